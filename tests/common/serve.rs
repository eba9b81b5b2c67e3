//! A `fak serve` process for a test: started on a port the OS picks (read from the line it
//! prints when it listens), its log echoed into the test's output, killed when dropped.

use crate::harness::fak_bin;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};

pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Server {
    /// `fak serve --model <model> --port 0 <args>`, once it listens.
    pub fn start(model: &Path, args: &[&str]) -> Server {
        let mut child = Command::new(fak_bin())
            .args(["serve", "--model"])
            .arg(model)
            .args(["--port", "0"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting fak serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let mut lines = BufReader::new(stderr).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("fak serve exited before it listened")
                .expect("reading fak serve's log");
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

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("waiting for fak serve")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
