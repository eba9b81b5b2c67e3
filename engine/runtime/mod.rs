//! Sessions: prefill, decode, sampling, streaming.

pub mod sampling;
