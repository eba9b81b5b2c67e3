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
        None => built_bins().harness.clone(),
    })
}

/// The `fak` executable (`fak serve`, `fak run`): `$FAK_BIN` if set, else built on first use like
/// [`harness_bin`].
pub fn fak_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("FAK_BIN") {
        Some(path) => PathBuf::from(path),
        None => built_bins().fak.clone(),
    })
}

struct Bins {
    harness: PathBuf,
    fak: PathBuf,
}

/// The command that builds both binaries, as `ci/test.sh` runs it before the tests (so the first
/// test that needs one finds it fresh). One invocation for the two packages: cargo resolves the
/// dependencies' features over the packages it is asked for, and the harness (which depends on
/// fak-cli) asks for what the tests do; `-p fak-cli` alone would not (num-traits' `std`, serde's
/// `alloc`, …) and would compile half, naga, wgpu and the engine a second time for itself.
const BUILD_BINS: &str = "build -p fak-harness -p fak-cli --bin harness --bin fak";

/// Builds the `harness` and `fak` binaries into this test's target directory and profile.
fn built_bins() -> &'static Bins {
    static BINS: OnceLock<Bins> = OnceLock::new();
    BINS.get_or_init(|| {
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
            .args(BUILD_BINS.split(' '))
            .args(["--profile", &profile])
            .args(["--message-format", "json-render-diagnostics"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("running cargo build");
        assert!(
            out.status.success(),
            "cargo {BUILD_BINS} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let executable = |bin: &str| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .filter(|msg| msg["reason"] == "compiler-artifact" && msg["target"]["name"] == bin)
                .find_map(|msg| msg["executable"].as_str().map(PathBuf::from))
                .unwrap_or_else(|| panic!("cargo reported no {bin} executable"))
        };
        Bins {
            harness: executable("harness"),
            fak: executable("fak"),
        }
    })
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
