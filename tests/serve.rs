//! `fak serve` on the tiny synthetic Qwen3 with a real client: one server for the whole module,
//! driven by `tests/scripts/serve_openai.py` through the official `openai` Python package (chat
//! and completions, streaming, stop strings, sampling, logprobs, tools, thinking, cached tokens,
//! disconnects, every bad-input error, the full queue, a load test checked token for token against
//! each request alone, and the SIGTERM drain, last). The server must then exit cleanly.

use fak_tests::harness::{fak_bin, synth_model};
use fak_tests::python;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONTEXT: usize = 256;
const MAX_SEQS: usize = 4;
const MAX_QUEUE: usize = 4;
const MAX_BODY: usize = 64 << 10;

fn tiny() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve");
    let args = [
        "--arch", "qwen3", "--preset", "tiny", "--quant", "q8_0", "--seed", "5",
    ];
    synth_model(&dir, "tiny-qwen3-q8_0-5.gguf", &args)
}

/// A server on a port the OS picks, its line "… at http://127.0.0.1:PORT" read from stderr.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(model: &PathBuf) -> Server {
        let mut child = Command::new(fak_bin())
            .args(["serve", "--model"])
            .arg(model)
            .args(["--model-name", "tiny", "--port", "0"])
            .args(["--max-context", &CONTEXT.to_string()])
            .args(["--max-seqs", &MAX_SEQS.to_string()])
            .args(["--max-queue", &MAX_QUEUE.to_string()])
            .args(["--max-body", &MAX_BODY.to_string()])
            .args(["--cache-mem", "64M", "--page-size", "16"])
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting fak serve");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("fak serve exited before it listened")
                .unwrap();
            eprintln!("server: {line}");
            if let Some(at) = line.find(" at http://") {
                break line[at + 4..].trim().to_string();
            }
        };
        // Keep echoing the server's log (the drain message, errors) into the test output.
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                eprintln!("server: {line}");
            }
        });
        Server { child, url }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_openai_client_against_fak_serve() {
    let mut server = Server::start(&tiny());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/serve_openai.py");
    let status = Command::new(python())
        .arg(&script)
        .args(["--base-url", &server.url, "--model", "tiny"])
        .args(["--pid", &server.child.id().to_string()])
        .args(["--context", &CONTEXT.to_string()])
        .args(["--max-body", &MAX_BODY.to_string()])
        .args(["--max-outstanding", &(MAX_SEQS + MAX_QUEUE).to_string()])
        .status()
        .expect("running serve_openai.py");
    assert!(status.success(), "serve_openai.py failed: {status}");
    // The script's last test sent SIGTERM: the drained server exits by itself, successfully.
    let deadline = Instant::now() + Duration::from_secs(60);
    let exit = loop {
        if let Some(exit) = server.child.try_wait().unwrap() {
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
