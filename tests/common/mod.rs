//! Utilities shared by the integration tests.

use std::path::PathBuf;

/// `tests/fixtures/<rel>`; every fixture says where it came from in `tests/fixtures/README.md`.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(rel)
}
