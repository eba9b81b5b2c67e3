//! Running the `harness` and `fak` binaries from a test: the tests crate cannot depend on a
//! binary crate, so each binary is built (once per test process) by the same cargo, into the same
//! target directory and profile as the test itself, and run as a child process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The `harness` executable: `$FAK_HARNESS_BIN` if set (a machine that runs prebuilt test
/// binaries and has no cargo), else built on first use with the cargo that runs the tests.
pub fn harness_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("FAK_HARNESS_BIN") {
        Some(path) => PathBuf::from(path),
        None => build_bin("fak-harness", "harness"),
    })
}

/// The `fak` executable (`fak serve`, `fak run`): `$FAK_BIN` if set, else built on first use like
/// [`harness_bin`].
pub fn fak_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("FAK_BIN") {
        Some(path) => PathBuf::from(path),
        None => build_bin("fak-cli", "fak"),
    })
}

/// Builds binary `bin` of `package` into this test's target directory and profile.
fn build_bin(package: &str, bin: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // target/<profile>/deps/<test> → the profile this test was built with.
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable inside target/<profile>/deps");
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(name) => name.to_string(),
    };
    let out = Command::new(cargo)
        .args(["build", "-p", package, "--bin", bin, "--profile", &profile])
        .args(["--message-format", "json-render-diagnostics"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo build");
    assert!(
        out.status.success(),
        "cargo build -p {package} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|msg| msg["reason"] == "compiler-artifact" && msg["target"]["name"] == bin)
        .find_map(|msg| msg["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo reported no {bin} executable"))
}

/// A command running the `harness` binary (add arguments, environment, then run it).
pub fn harness() -> Command {
    Command::new(harness_bin())
}

/// Runs `harness synth <args> --out <dir>/<name>` once per test process and returns the path;
/// tests asking for the same name share the file. (`dir` is the test's
/// `env!("CARGO_TARGET_TMPDIR")`-based scratch folder: only test targets see that variable.)
pub fn synth_model(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    static WRITTEN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    std::fs::create_dir_all(dir).expect("creating the scratch folder");
    let path = dir.join(name);
    let mut written = WRITTEN.lock().unwrap_or_else(|e| e.into_inner());
    if !written.contains(&path) {
        let out = harness()
            .arg("synth")
            .args(args)
            .arg("--out")
            .arg(&path)
            .output()
            .expect("running harness synth");
        assert!(
            out.status.success(),
            "harness synth {} failed ({}):\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        written.push(path.clone());
    }
    path
}
