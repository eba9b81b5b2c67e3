//! `harness threeway`, `harness selftest` and `harness synth --mlx-4bit` end to end: every arm
//! for real (fak-native on the present adapter, llama-server from the peer build, mlx_lm on
//! CPU), and the runs that go wrong — a model that does not exist, a llama-server that exits at
//! start, an MLX without the model's architecture, engines killed mid-run, Ctrl-C — must fail
//! clearly and keep everything already measured.

use fak_tests::harness::harness;
use fak_tests::{llama_cpp_tool, python};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("threeway")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The synthetic models live in one cache for the whole test binary (written once).
fn cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("threeway-cache")
}

/// `harness threeway` with the test cache and the oracle Python.
fn threeway(out: &Path) -> Command {
    let mut c = harness();
    c.arg("threeway")
        .arg("--out")
        .arg(out)
        .args(["--python", &python()])
        .env("FAK_CACHE", cache());
    c
}

fn raw(out: &Path, arm: &str) -> Value {
    let path = out.join(format!("{arm}-raw.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every arm runs the envelope: each request has exactly n_out tokens, its buckets sum to its
/// wall clock, token timestamps rise; the warm-up is kept apart; each arm's quality rows cover
/// every prompt position plus the tail; fak-native and llama.cpp (same GGUF) each pass parity
/// against their own-rounding references and llama.cpp stays within the two roundings'
/// budget of fak-native; each engine's peak memory is recorded.
#[test]
fn every_arm_runs_the_matched_envelope() {
    let out = scratch("all-arms");
    let run = threeway(&out)
        .arg("--llama-server")
        .arg(llama_cpp_tool("llama-server"))
        .args(["--prompts", "2", "--n-ctx", "32", "--n-out", "6"])
        .args([
            "--quality-prompts",
            "1",
            "--quality-tail",
            "4",
            "--no-selftest",
        ])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", stderr_of(&run));
    // The engine's FAK_* environment (this run sets FAK_CACHE) is part of what the packet names.
    let flags = raw(&out, "fak-native")["engine"]["flags"].to_string();
    assert!(
        flags.contains("fak_env") && flags.contains("FAK_CACHE"),
        "{flags}"
    );
    for arm in ["fak-native", "llama.cpp", "mlx"] {
        let r = raw(&out, arm);
        assert_eq!(r["status"]["state"], "ran", "{arm}: {}", r["status"]);
        let requests = r["requests"].as_array().unwrap();
        assert_eq!(requests.len(), 3, "{arm}: one warm-up and two timed");
        assert_eq!(requests[0]["warmup"], true);
        for q in requests {
            assert_eq!(q["token_ids"].as_array().unwrap().len(), 6, "{arm}: {q}");
            let b = &q["buckets"];
            let sum: f64 = [
                "queue_s",
                "setup_s",
                "prefill_s",
                "decode_s",
                "verification_s",
                "recovery_s",
                "other_s",
            ]
            .iter()
            .map(|k| b[k].as_f64().unwrap())
            .sum();
            let wall = q["wall_s"].as_f64().unwrap();
            assert!(
                (sum - wall).abs() < 1e-6,
                "{arm}: buckets {sum} vs wall {wall}"
            );
            assert!(
                b["prefill_s"].as_f64().unwrap() > 0.0 && b["decode_s"].as_f64().unwrap() > 0.0
            );
            let times: Vec<f64> = serde_json::from_value(q["token_times_s"].clone()).unwrap();
            assert!(times.windows(2).all(|w| w[0] <= w[1]), "{arm}: {times:?}");
        }
        assert!(
            r["memory"]["resident_bytes"].as_u64().unwrap() > 1 << 20,
            "{arm}: {r}"
        );
        let quality: Value = serde_json::from_slice(
            &std::fs::read(out.join(format!("{arm}-quality.json"))).unwrap(),
        )
        .unwrap();
        let vs_reference = &quality["comparisons"][0];
        assert_eq!(vs_reference["summary"]["positions"], 32 + 4, "{arm}");
        if arm != "mlx" {
            // Parity against the reference rounding as this engine does: it must hold.
            let own = &quality["comparisons"][1];
            assert_eq!(own["against"]["kind"], "own-rounding", "{arm}: {own}");
            assert_eq!(own["against"]["rounds_as"], arm);
            assert_eq!(own["rule"]["name"], "own-rounding-parity-v1");
            assert_eq!(own["summary"]["passed"], true, "{arm}: {}", own["summary"]);
        }
    }
    let llama: Value =
        serde_json::from_slice(&std::fs::read(out.join("llama.cpp-quality.json")).unwrap())
            .unwrap();
    let cross = &llama["comparisons"][2];
    assert_eq!(cross["against"]["arm"], "fak-native");
    assert_eq!(cross["rule"]["name"], "cross-engine-within-rounding-v1");
    assert_eq!(cross["summary"]["passed"], true, "{}", cross["summary"]);
    let validate = harness()
        .arg("validate")
        .arg(out.join("packet.json"))
        .output()
        .unwrap();
    assert!(
        validate.status.success(),
        "{}",
        String::from_utf8_lossy(&validate.stdout)
    );
}

/// The MLX directory synth writes holds, bit for bit, what `mlx_lm.convert -q` makes of the
/// Hugging Face export of the same weights (mlx_lm's layout, `mx.quantize` of every quantizable
/// layer), for both architectures; mlx_lm on CPU loads and runs it to the same logits. The
/// hybrid's short-conv weight is where a checkpoint and MLX's layout differ (`[C, 1, K]` vs
/// `[C, K, 1]`), and its norm gains carry the +1 mlx_lm adds to a checkpoint's.
#[test]
fn mlx_4bit_export_is_what_mlx_convert_makes_for_both_architectures() {
    // (arch, quantized layers: qwen3 4 layers × 7 projections + embedding + head; qwen35 8
    // layers × 3 MLP projections + 6 GDN × 5 projections + 2 attention × 4 + embedding + head)
    for (arch, quantized) in [("qwen3", 30), ("qwen35", 64)] {
        let dir = scratch(&format!("mlx-4bit-{arch}"));
        let out = harness()
            .args([
                "synth", "--arch", arch, "--preset", "tiny", "--vocab", "cut", "--quant", "f32",
            ])
            .args(["--seed", "3"])
            .arg("--out")
            .arg(dir.join("tiny.gguf"))
            .arg("--hf-dir")
            .arg(dir.join("hf"))
            .arg("--mlx-4bit")
            .arg(dir.join("mlx"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{arch}: {}", stderr_of(&out));
        let check = Command::new(python())
            .arg(fak_tests::fixture("../scripts/mlx_4bit_check.py"))
            .arg(dir.join("hf"))
            .arg(dir.join("mlx"))
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&check.stdout);
        assert!(
            check.status.success(),
            "{arch}: {report}\n{}",
            stderr_of(&check)
        );
        let report: Value = serde_json::from_str(&report).unwrap();
        assert_eq!(report["quantized"], quantized, "{arch}: {report}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The headline packet's MLX model is `synth --quant q4_k_m --fast-random --mlx-4bit` (the GGUF's
/// random blocks, requantized by MLX's rule): for both architectures the MLX arm (mlx_lm on CPU)
/// loads it and answers every request of the envelope with n_out tokens, and on the hybrid it
/// runs the multi-agent scenario with mlx_lm's prompt cache on and off (a hybrid's cache cannot
/// be trimmed, so an exact hit is recomputed whole) with every turn answered.
#[test]
fn the_mlx_arm_runs_the_fast_random_4bit_export_of_both_architectures() {
    for arch in ["qwen3", "qwen35"] {
        let dir = scratch(&format!("mlx-arm-{arch}"));
        let (model, mlx) = (dir.join("model.gguf"), dir.join("mlx"));
        let synth = harness()
            .args([
                "synth", "--arch", arch, "--preset", "tiny", "--vocab", "cut",
            ])
            .args(["--quant", "q4_k_m", "--seed", "7", "--fast-random", "--out"])
            .arg(&model)
            .arg("--mlx-4bit")
            .arg(&mlx)
            .output()
            .unwrap();
        assert!(synth.status.success(), "{arch}: {}", stderr_of(&synth));
        let with_models = |out: &Path| {
            let mut c = threeway(out);
            c.arg("--model")
                .arg(&model)
                .arg("--mlx-model")
                .arg(&mlx)
                .args(["--arms", "mlx", "--no-selftest", "--n-out", "4"]);
            c
        };
        let out = dir.join("envelope");
        let run = with_models(&out)
            .args(["--prompts", "2", "--n-ctx", "16", "--quality-prompts", "0"])
            .output()
            .unwrap();
        assert!(run.status.success(), "{arch}: {}", stderr_of(&run));
        let r = raw(&out, "mlx");
        assert_eq!(r["status"]["state"], "ran", "{arch}: {}", r["status"]);
        let requests = r["requests"].as_array().unwrap();
        assert_eq!(requests.len(), 3, "{arch}: one warm-up and two timed");
        for q in requests {
            assert_eq!(q["token_ids"].as_array().unwrap().len(), 4, "{arch}: {q}");
        }
        if arch == "qwen35" {
            let out = dir.join("scenario");
            let run = with_models(&out)
                .args(["--scenario", "multi-agent", "--agents", "2", "--turns", "2"])
                .args(["--preamble", "32", "--suffix", "8"])
                .output()
                .unwrap();
            assert!(run.status.success(), "{arch}: {}", stderr_of(&run));
            for cache in ["cache", "nocache"] {
                let path = out.join(format!("multi-agent-mlx-{cache}-raw.json"));
                let r: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
                assert_eq!(r["status"]["state"], "ran", "{cache}: {}", r["status"]);
                assert_eq!(r["turns"].as_array().unwrap().len(), 4, "{cache}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// selftest passes on this adapter for every path it runs, says per kernel and variant what ran
/// and how close it came (the Gated DeltaNet kernels of both head sizes, prefill and decode;
/// decode and prefill attention at both models' head shapes, the decode's rope form among them;
/// RMSNorm per token and per head in
/// place; rope_kv on prefill and batched decode; the embedding and dequantization of every type;
/// SwiGLU, residual add and sigmoid gate; argmax of the last row and of every row),
/// holds the tiny qwen3 and qwen35 models (f32 and Q4_K_M) to the CPU reference on every path,
/// trusts every fast path it tested, and measures a positive bandwidth.
#[test]
fn selftest_checks_every_kernel_and_model_on_every_path_and_measures_bandwidth() {
    let out = harness()
        .args(["selftest", "--json"])
        .env("FAK_CACHE", cache())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["pass"], true);
    let paths = result["paths"].as_array().unwrap().len();
    assert!(paths >= 1);
    // Four models (qwen3, qwen35; f32 and Q4_K_M) × two checks per path.
    assert_eq!(result["checks"].as_array().unwrap().len(), paths * 8);
    let kernels = result["kernels"].as_array().unwrap();
    for name in [
        "ssm_conv",
        "delta_prep",
        "gated_delta",
        "gated_delta_chunk",
        "gated_norm",
        "gdn_decode",
        "attn_decode",
        "attn_prefill",
        "rms_norm",
        "rope_kv",
        "embed",
        "elementwise",
        "argmax",
        "dequant",
        "matmul",
        "matvec",
        "matvec_q8",
        "quantize_q8",
    ] {
        let runs: Vec<&Value> = kernels.iter().filter(|k| k["kernel"] == name).collect();
        // Two cases or more, on at least the fallback variant.
        assert!(runs.len() >= 2, "{name}: {runs:?}");
        for k in runs {
            assert_eq!(k["pass"], true, "{k}");
            let m = &k["measured"];
            assert!(m["elements"].as_u64().unwrap() > 0, "{k}");
            assert_eq!(m["outside"], 0, "{k}");
            assert!(m["worst_of_tolerance"].as_f64().unwrap() <= 1.0, "{k}");
        }
    }
    // The engine's default decode attention (the rope form) is checked on every variant.
    let rope_forms = kernels
        .iter()
        .filter(|k| {
            k["kernel"] == "attn_decode" && k["case"].as_str().unwrap().starts_with("rope form")
        })
        .count();
    assert!(rope_forms >= 2, "{rope_forms} rope-form cases");
    for f in result["fast_paths"].as_array().unwrap() {
        assert_ne!(f["verdict"], "failed", "{f}");
    }
    assert_eq!(result["force"], "");
    assert!(result["bandwidth"]["best_bytes_per_s"].as_f64().unwrap() > 1e6);
}

#[test]
fn a_model_that_does_not_exist_is_a_clear_error() {
    let out = scratch("no-model");
    let run = threeway(&out)
        .args(["--model", "/nonexistent/model.gguf", "--no-selftest"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    let err = stderr_of(&run);
    assert!(
        err.contains("/nonexistent/model.gguf") && err.contains("does not exist"),
        "{err}"
    );
}

/// A llama-server that exits at start fails its arm with its exit status and its last words;
/// the arm after it still runs and the run ends non-zero naming the failed arm.
#[test]
fn a_llama_server_that_exits_at_start_fails_its_arm_only() {
    let out = scratch("server-exits");
    let script = out.join("llama-server-exits.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho 'cannot start: no GPU for you' >&2\nexit 1\n",
    )
    .unwrap();
    set_executable(&script);
    let run = harness()
        .arg("threeway")
        .arg("--out")
        .arg(&out)
        .arg("--llama-server")
        .arg(&script)
        .args([
            "--python",
            &python(),
            "--arms",
            "llama.cpp,mlx",
            "--prompts",
            "2",
        ])
        .args([
            "--n-ctx",
            "16",
            "--n-out",
            "4",
            "--quality-prompts",
            "1",
            "--no-selftest",
        ])
        .env("FAK_CACHE", cache())
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1), "{}", stderr_of(&run));
    let err = stderr_of(&run);
    assert!(err.contains("llama.cpp") && err.contains("failed"), "{err}");
    let llama = raw(&out, "llama.cpp");
    assert_eq!(llama["status"]["state"], "faulted");
    let fault = llama["status"]["faults"][0].to_string();
    assert!(
        fault.contains("exit 1") && fault.contains("no GPU for you"),
        "{fault}"
    );
    let mlx = raw(&out, "mlx");
    assert_eq!(mlx["status"]["state"], "ran");
    assert_eq!(mlx["requests"].as_array().unwrap().len(), 3);
}

/// An MLX whose mlx_lm lacks the model's architecture fails the MLX arm with mlx_lm's reason.
#[test]
fn an_mlx_without_the_architecture_fails_clearly() {
    let out = scratch("mlx-arch");
    let model = out.join("tiny.gguf");
    let mlx_dir = out.join("mlx");
    let synth = harness()
        .args([
            "synth", "--arch", "qwen3", "--preset", "tiny", "--vocab", "cut", "--quant", "q8_0",
            "--seed", "5",
        ])
        .arg("--out")
        .arg(&model)
        .arg("--mlx-4bit")
        .arg(&mlx_dir)
        .output()
        .unwrap();
    assert!(synth.status.success(), "{}", stderr_of(&synth));
    let config_path = mlx_dir.join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    config["model_type"] = "fakearch".into();
    std::fs::write(&config_path, serde_json::to_vec(&config).unwrap()).unwrap();
    let run = threeway(&out)
        .arg("--model")
        .arg(&model)
        .arg("--mlx-model")
        .arg(&mlx_dir)
        .args([
            "--arms",
            "mlx",
            "--prompts",
            "1",
            "--n-ctx",
            "8",
            "--n-out",
            "2",
            "--no-selftest",
        ])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1), "{}", stderr_of(&run));
    let mlx = raw(&out, "mlx");
    assert_eq!(mlx["status"]["state"], "faulted");
    let fault = mlx["status"]["faults"][0].to_string();
    assert!(
        fault.contains("fakearch") && fault.contains("not supported"),
        "{fault}"
    );
}

/// A running threeway, its stderr read line by line as it comes.
struct Running {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStderr>>,
    seen: Vec<String>,
}

impl Running {
    fn start(mut command: Command) -> Running {
        let mut child = command.stderr(Stdio::piped()).spawn().unwrap();
        let lines = BufReader::new(child.stderr.take().unwrap()).lines();
        Running {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until one contains `text`; returns it.
    fn wait_for(&mut self, text: &str) -> String {
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            self.seen.push(line.clone());
            if line.contains(text) {
                return line;
            }
        }
        panic!("no line with {text:?} in:\n{}", self.seen.join("\n"));
    }

    fn finish(mut self) -> (Option<i32>, String) {
        for line in self.lines.by_ref() {
            self.seen.push(line.unwrap());
        }
        (self.child.wait().unwrap().code(), self.seen.join("\n"))
    }
}

/// The pid in "threeway: <arm> started (pid N)".
fn pid_in(line: &str) -> i32 {
    line.rsplit("pid ")
        .next()
        .and_then(|s| s.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"))
}

fn kill(pid: i32, signal: &str) {
    let ok = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {signal} {pid}");
}

fn alive(pid: i32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn mlx_run(out: &Path, prompts: &str) -> Command {
    let mut c = threeway(out);
    c.args([
        "--arms",
        "mlx",
        "--prompts",
        prompts,
        "--n-ctx",
        "16",
        "--n-out",
        "8",
    ])
    .args(["--quality-prompts", "1", "--no-selftest"]);
    c
}

/// An engine killed mid-run is restarted once: the samples before the kill stay, the lost
/// request is sent again with the restart in its recovery bucket, the run completes.
#[test]
fn an_engine_killed_mid_run_is_restarted_once_and_the_run_completes() {
    let out = scratch("killed-once");
    let mut run = Running::start(mlx_run(&out, "8"));
    let pid = pid_in(&run.wait_for("mlx started"));
    run.wait_for("mlx request 2/8");
    kill(pid, "-KILL");
    let (code, log) = run.finish();
    assert_eq!(code, Some(0), "{log}");
    let r = raw(&out, "mlx");
    assert_eq!(r["status"]["state"], "faulted", "the fault is recorded");
    assert_eq!(r["status"]["restarts"], 1);
    assert_eq!(
        r["status"]["faults"].as_array().unwrap().len(),
        1,
        "{}",
        r["status"]
    );
    let requests = r["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 9, "warm-up and every timed request");
    let recovered: Vec<f64> = requests
        .iter()
        .map(|s| s["buckets"]["recovery_s"].as_f64().unwrap())
        .collect();
    assert_eq!(
        recovered.iter().filter(|&&s| s > 0.0).count(),
        1,
        "{recovered:?}"
    );
}

/// Killed again after its one restart, the arm fails but keeps every sample it measured.
#[test]
fn an_engine_killed_twice_fails_and_keeps_its_samples() {
    let out = scratch("killed-twice");
    let mut run = Running::start(mlx_run(&out, "20"));
    let first = pid_in(&run.wait_for("mlx started"));
    run.wait_for("mlx request 2/20");
    kill(first, "-KILL");
    let second = pid_in(&run.wait_for("mlx started"));
    run.wait_for("mlx request 4/20");
    kill(second, "-KILL");
    let (code, log) = run.finish();
    assert_eq!(code, Some(1), "{log}");
    let r = raw(&out, "mlx");
    assert_eq!(r["status"]["state"], "faulted");
    assert!(r["requests"].as_array().unwrap().len() >= 4, "{r}");
    assert!(!alive(second));
}

/// Ctrl-C stops the engine (no orphan), keeps the samples so far, marks the arm interrupted
/// and exits 130.
#[test]
fn ctrl_c_stops_the_engine_and_keeps_the_samples() {
    let out = scratch("ctrl-c");
    let mut run = Running::start(mlx_run(&out, "20"));
    let pid = pid_in(&run.wait_for("mlx started"));
    run.wait_for("mlx request 3/20");
    kill(run.child.id() as i32, "-INT");
    let (code, log) = run.finish();
    assert_eq!(code, Some(130), "{log}");
    let r = raw(&out, "mlx");
    assert_eq!(r["status"]["state"], "faulted");
    assert!(
        r["status"]["faults"].to_string().contains("interrupted"),
        "{}",
        r["status"]
    );
    assert!(r["requests"].as_array().unwrap().len() >= 3, "{r}");
    assert!(!alive(pid), "the engine outlived the harness");
}

fn set_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
