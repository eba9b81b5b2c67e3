//! Engine processes: a clock every process shares, start and stop with peak memory, stdout lines
//! delivered through a channel (so a wait can give up on Ctrl-C or a timeout), and the Ctrl-C
//! handler that makes the harness stop its engines before it exits.

use anyhow::{Context, Result, anyhow, bail};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// Nanoseconds on `CLOCK_MONOTONIC`: the clock the harness, its fak child and the MLX driver
/// (`time.clock_gettime_ns(time.CLOCK_MONOTONIC)`) all read, so their timestamps subtract.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Ctrl-C and SIGTERM set a flag instead of killing the harness: every wait below checks it,
/// stops the engine it waits on and returns [`Interrupted`], so samples already measured are
/// written and no engine outlives the harness. (Engines run in their own process group, so the
/// terminal's Ctrl-C reaches only the harness.)
pub fn install_interrupt_handler() {
    let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// The error a wait returns when Ctrl-C (or SIGTERM) arrived.
#[derive(Debug, thiserror::Error)]
#[error("interrupted (Ctrl-C or SIGTERM)")]
pub struct Interrupted;

/// How an engine process ended.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ExitInfo {
    /// `exit 0`, `exit 1`, `signal 9`, …
    pub status: String,
    /// Peak resident memory of the process (getrusage through wait4), bytes.
    pub peak_rss_bytes: Option<u64>,
}

/// A running engine process.
pub struct EngineProcess {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Option<Receiver<String>>,
    /// Where the process's stderr goes (kept for error messages).
    pub log: std::path::PathBuf,
    exit: Option<ExitInfo>,
}

impl EngineProcess {
    /// Starts `command` in its own process group with stderr into `log`; with `jsonl`, stdin
    /// is a pipe and stdout lines arrive through [`EngineProcess::recv_line`].
    pub fn spawn(name: &str, mut command: Command, log: &Path, jsonl: bool) -> Result<Self> {
        let log_file = std::fs::File::create(log)
            .with_context(|| format!("creating the {name} log {}", log.display()))?;
        command
            .stderr(log_file)
            .stdin(if jsonl { Stdio::piped() } else { Stdio::null() })
            .stdout(if jsonl { Stdio::piped() } else { Stdio::null() })
            .process_group(0);
        #[cfg(target_os = "linux")]
        // SAFETY: prctl is async-signal-safe; it asks the kernel to kill the engine when the
        // harness dies, even by SIGKILL.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {name} ({program})"))?;
        let stdin = child.stdin.take();
        let lines = child.stdout.take().map(|stdout| {
            let (send, recv) = channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if send.send(line).is_err() {
                        break;
                    }
                }
            });
            recv
        });
        Ok(EngineProcess {
            name: name.to_string(),
            child,
            stdin,
            lines,
            log: log.to_path_buf(),
            exit: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes one line to the process's stdin.
    pub fn send_line(&mut self, line: &str) -> Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("{}: stdin is closed", self.name))?;
        stdin
            .write_all(line.as_bytes())
            .and_then(|_| stdin.write_all(b"\n"))
            .and_then(|_| stdin.flush())
            .map_err(|e| self.died(&format!("writing a request: {e}")))
    }

    /// The next stdout line, waiting at most `timeout`; a dead process, a timeout and Ctrl-C
    /// are errors (Ctrl-C as [`Interrupted`]).
    pub fn recv_line(&mut self, timeout: Duration) -> Result<String> {
        match self.try_recv_line(timeout)? {
            Some(line) => Ok(line),
            None => bail!("{}: no answer within {} s", self.name, timeout.as_secs()),
        }
    }

    /// The next stdout line, or None when none came within `timeout`; a dead process and
    /// Ctrl-C are errors (Ctrl-C as [`Interrupted`]).
    pub fn try_recv_line(&mut self, timeout: Duration) -> Result<Option<String>> {
        let deadline = Instant::now() + timeout;
        loop {
            if interrupted() {
                return Err(Interrupted.into());
            }
            let lines = self.lines.as_ref().expect("a JSON-lines process");
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            match lines.recv_timeout(wait) {
                Ok(line) => return Ok(Some(line)),
                Err(RecvTimeoutError::Disconnected) => return Err(self.died("its output ended")),
                Err(RecvTimeoutError::Timeout) if Instant::now() >= deadline => return Ok(None),
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Whether the process has exited (reaping it if so).
    pub fn exited(&mut self) -> bool {
        if self.exit.is_some() {
            return true;
        }
        if let Some(info) = self.reap(false) {
            self.exit = Some(info);
        }
        self.exit.is_some()
    }

    /// An error saying the process died (or misbehaved) and ending with its last log lines.
    pub fn died(&mut self, what: &str) -> anyhow::Error {
        // Give a process that is exiting a moment to finish, so its status is known.
        for _ in 0..20 {
            if self.exited() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let status = self
            .exit
            .as_ref()
            .map_or("still running".to_string(), |e| e.status.clone());
        anyhow!(
            "{} ({}): {what} [{status}]; last lines of {}:\n{}",
            self.name,
            self.child.id(),
            self.log.display(),
            log_tail(&self.log, 12)
        )
    }

    /// Stops the process: closes stdin (a JSON-lines engine exits on EOF), then SIGTERM after
    /// `grace`, SIGKILL after another `grace`; reaps it and returns its status and peak memory.
    pub fn stop(&mut self, grace: Duration) -> ExitInfo {
        if let Some(info) = &self.exit {
            return info.clone();
        }
        drop(self.stdin.take());
        let pid = self.child.id() as libc::pid_t;
        let mut info = self.wait_for(grace);
        if info.is_none() {
            // SAFETY: signalling our own child, which has not been reaped yet.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            info = self.wait_for(grace);
        }
        let info = info.unwrap_or_else(|| {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            self.reap(true).unwrap_or_default()
        });
        self.exit = Some(info.clone());
        info
    }

    /// Kills the process at once (a crash test's doing, or Ctrl-C).
    pub fn kill(&mut self) -> ExitInfo {
        if !self.exited() {
            // SAFETY: signalling our own child, which has not been reaped yet.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
            self.exit = Some(self.reap(true).unwrap_or_default());
        }
        self.exit.clone().unwrap_or_default()
    }

    fn wait_for(&mut self, timeout: Duration) -> Option<ExitInfo> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(info) = self.reap(false) {
                return Some(info);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// wait4 on the child: its status and `ru_maxrss`, or None while it runs (`block` false).
    fn reap(&mut self, block: bool) -> Option<ExitInfo> {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let flags = if block { 0 } else { libc::WNOHANG };
        // SAFETY: waits on our own child; std's Child is never waited on afterwards.
        let pid = unsafe {
            libc::wait4(
                self.child.id() as libc::pid_t,
                &mut status,
                flags,
                &mut usage,
            )
        };
        if pid <= 0 {
            return None;
        }
        let status = if libc::WIFEXITED(status) {
            format!("exit {}", libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            format!("signal {}", libc::WTERMSIG(status))
        } else {
            format!("status {status}")
        };
        // ru_maxrss is KiB on Linux and bytes on macOS.
        let scale = if cfg!(target_os = "macos") { 1 } else { 1024 };
        Some(ExitInfo {
            status,
            peak_rss_bytes: u64::try_from(usage.ru_maxrss).ok().map(|kib| kib * scale),
        })
    }
}

impl Drop for EngineProcess {
    fn drop(&mut self) {
        if self.exit.is_none() {
            self.kill();
        }
    }
}

/// The last `n` lines of a log file (or why it cannot be read).
pub fn log_tail(path: &Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("({e})"),
    }
}

/// GPU memory the process holds, where the OS tells it: NVIDIA's `nvidia-smi` per-process
/// accounting. None elsewhere (lavapipe's memory is host memory, counted in the resident set;
/// Apple's unified memory is not reported per process).
pub fn gpu_memory_bytes(pid: u32) -> Option<u64> {
    let out = Command::new("nvidia-smi")
        .args([
            "--query-compute-apps=pid,used_memory",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|line| {
            let (p, mib) = line.split_once(',')?;
            (p.trim().parse::<u32>().ok()? == pid)
                .then(|| mib.trim().parse::<u64>().ok())
                .flatten()
                .map(|mib| mib << 20)
        })
}
