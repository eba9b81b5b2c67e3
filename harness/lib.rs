//! The harness's library half: the comparison packet (types, writer, metrics, validator), the
//! report and compare tools that read it, and `inspect` (whose decode-step bytes the roofline
//! uses). The `harness` binary and its arms build on these.

pub mod inspect;
pub mod packet;
pub mod report;
