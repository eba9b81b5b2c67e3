//! fak for users: `fak serve`, an OpenAI-compatible HTTP server over the engine with continuous
//! batching and the prefix cache shared by every request, and `fak run`, one generation from the
//! command line (also `harness run`).

pub mod flag_values;
pub mod logits_file;
pub mod run;
pub mod serve;
