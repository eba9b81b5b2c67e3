//! docs/SCALE-OUT.md on loopback: two `fak serve` replicas behind nginx configured with the
//! document's own block (its ports substituted), conversations routed on `X-Conversation-Id`.
//! `tests/scripts/scale_out.py` runs several two-turn conversations through the proxy and asserts,
//! through each replica's `/metrics`, that every conversation's turns land on one replica, whose
//! prefix cache then supplies the earlier turn (cached tokens), and that both replicas serve.

use fak_tests::model::tiny_cut;
use fak_tests::python;
use fak_tests::serve::Server;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// nginx: on PATH or in /usr/sbin (Debian's package; ci/test.sh installs it).
fn nginx() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("nginx"))
        .find(|p| p.is_file())
        .expect("nginx not found: ci/test.sh installs Debian's nginx-light")
}

/// The ```nginx block of docs/SCALE-OUT.md.
fn documented_block() -> String {
    let doc = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/SCALE-OUT.md"),
    )
    .expect("reading docs/SCALE-OUT.md");
    let start = doc
        .find("```nginx\n")
        .expect("an nginx block in docs/SCALE-OUT.md")
        + 9;
    let len = doc[start..].find("```").expect("the nginx block's end");
    doc[start..start + len].to_string()
}

fn port_of(url: &str) -> &str {
    url.rsplit(':').next().expect("a port")
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().unwrap().port()
}

/// nginx, stopped on drop as its docs say: SIGTERM to the master, which stops its worker first.
/// `Child::kill` (SIGKILL) left the worker running, holding the test's stdout open: a pipe
/// reading the suite's output waited minutes on it (2026-12-05).
struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of our own child, not yet waited for.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// nginx in the foreground with the documented block routing to `replicas`, listening on `port`,
/// everything it writes under `dir`.
fn start_nginx(dir: &Path, replicas: [&str; 2], port: u16) -> Nginx {
    let block = documented_block()
        .replace(
            "127.0.0.1:8081",
            &format!("127.0.0.1:{}", port_of(replicas[0])),
        )
        .replace(
            "127.0.0.1:8082",
            &format!("127.0.0.1:{}", port_of(replicas[1])),
        )
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    let d = dir.display();
    let conf = format!(
        "daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 64; }}\nhttp {{\n  access_log {d}/access.log;\n  \
         client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  \
         fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  \
         scgi_temp_path {d}/scgi;\n{block}}}\n"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let child = Command::new(nginx())
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&path)
        .args(["-e", "stderr"])
        .spawn()
        .expect("starting nginx");
    Nginx(child)
}

fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx is not listening on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn conversations_stay_on_one_replica_behind_nginx() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("scale_out");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let model = tiny_cut(&dir.join("models"), "qwen3", "q8_0", 5);
    let serve_args = [
        "--model-name",
        "tiny",
        "--max-context",
        "256",
        "--max-seqs",
        "2",
        "--cache-mem",
        "16M",
        "--page-size",
        "16",
    ];
    let a = Server::start(&model, &serve_args);
    let b = Server::start(&model, &serve_args);
    let port = free_port();
    let proxy_dir = dir.join("nginx");
    std::fs::create_dir_all(&proxy_dir).unwrap();
    let proxy = start_nginx(&proxy_dir, [&a.url, &b.url], port);
    wait_listening(port);
    let status = Command::new(python())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/scale_out.py"))
        .args(["--proxy", &format!("http://127.0.0.1:{port}")])
        .args(["--replicas", &a.url, &b.url])
        .args(["--model", "tiny"])
        .status()
        .expect("running scale_out.py");
    drop(proxy);
    assert!(status.success(), "scale_out.py failed: {status}");
}
