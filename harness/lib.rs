//! The harness's library half: the comparison packet (types, writer, metrics, validator), the
//! report and compare tools that read it, `inspect` (whose decode-step bytes the roofline
//! uses) and the kernel checks (`selftest` runs them, the GPU tests assert them). The `harness`
//! binary and its arms build on these.

pub mod checks;
pub mod inspect;
pub mod packet;
pub mod report;
