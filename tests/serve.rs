//! `fak serve` on the tiny synthetic Qwen3 with a real client: one server for the whole module,
//! driven by `tests/scripts/serve_openai.py` through the official `openai` Python package (chat
//! and completions, streaming, stop strings, sampling, logprobs, tools, thinking, cached tokens,
//! disconnects, every bad-input error, the full queue, a load test checked token for token against
//! each request alone, and the SIGTERM drain, last). The server must then exit cleanly.

use fak_tests::model::tiny_cut;
use fak_tests::python;
use fak_tests::serve::Server;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const CONTEXT: usize = 256;
const MAX_SEQS: usize = 4;
const MAX_QUEUE: usize = 4;
const MAX_BODY: usize = 64 << 10;

fn tiny() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve");
    tiny_cut(&dir, "qwen3", "q8_0", 5)
}

#[test]
fn the_openai_client_against_fak_serve() {
    let mut server = Server::start(
        &tiny(),
        &[
            "--model-name",
            "tiny",
            "--max-context",
            &CONTEXT.to_string(),
            "--max-seqs",
            &MAX_SEQS.to_string(),
            "--max-queue",
            &MAX_QUEUE.to_string(),
            "--max-body",
            &MAX_BODY.to_string(),
            "--cache-mem",
            "64M",
            "--page-size",
            "16",
        ],
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/serve_openai.py");
    let status = Command::new(python())
        .arg(&script)
        .args(["--base-url", &server.url, "--model", "tiny"])
        .args(["--pid", &server.pid().to_string()])
        .args(["--context", &CONTEXT.to_string()])
        .args(["--max-body", &MAX_BODY.to_string()])
        .args(["--max-outstanding", &(MAX_SEQS + MAX_QUEUE).to_string()])
        .status()
        .expect("running serve_openai.py");
    assert!(status.success(), "serve_openai.py failed: {status}");
    // The script's last test sent SIGTERM: the drained server exits by itself, successfully.
    let deadline = Instant::now() + Duration::from_secs(60);
    let exit = loop {
        if let Some(exit) = server.try_wait() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "fak serve still runs 60 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(exit.success(), "fak serve exited with {exit}");
}
