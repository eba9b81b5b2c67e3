//! fak for users: `fak serve`, an OpenAI-compatible HTTP server over the engine with continuous
//! batching and the prefix cache shared by every request, and `fak run`, one generation from the
//! command line (also `harness run`).

pub mod flag_values;
pub mod logits_file;
pub mod run;
pub mod serve;

/// Rust ignores SIGPIPE, so printing to a closed pipe (`harness inspect x.gguf | head -1`,
/// `fak run … | head -c 100`) fails, and `println!` panics on the failure. Like any Unix filter,
/// a command that calls this first instead ends at once by the signal (status 141 in a shell)
/// when its reader goes away. Not for servers, nor for a process that writes to its children's
/// pipes: there a dead peer must be an error it reports, not the end of the process.
pub fn end_quietly_on_closed_stdout() {
    #[cfg(unix)]
    // SAFETY: SIG_DFL is a valid disposition for SIGPIPE; signal() is safe to call at any time.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
