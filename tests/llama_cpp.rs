//! The llama.cpp arm against llama-server from the peer build, on the CPU: the flags it tunes per
//! workload and records, its TTFT against a plain client's on the same server, and the tokens
//! llama-server withholds for incomplete UTF-8, recovered (from the stream's text, else a
//! replay) in the envelope and in the multi-agent scenario. The tests run one at a time: the
//! plain-client check times requests, and a second engine on the same cores would time the
//! machine instead.

use fak_tests::harness::harness;
use fak_tests::{llama_cpp_tool, python};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Held by each test for its whole run.
static ALONE: Mutex<()> = Mutex::new(());

const N_OUT: usize = 4;

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("llama-cpp")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `harness threeway` with the threeway tests' model cache and the oracle Python.
fn threeway(out: &Path) -> Command {
    let mut c = harness();
    c.arg("threeway")
        .arg("--out")
        .arg(out)
        .args(["--python", &python()])
        .env(
            "FAK_CACHE",
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("threeway-cache"),
        );
    c
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The llama.cpp arm runs llama-server with the flags that serve distinct prompts fastest (no
/// host-RAM prompt cache, no context checkpoints), each recorded with why, plus the user's
/// `--llama-arg`; a plain Python client on the same server and prompts in the same run measures
/// what the arm measures; its derived and zero buckets say so; it ran on the CPU (the peer
/// build lists no GPU); the run folder holds command.txt and validation.json.
#[test]
fn the_llama_cpp_arm_measures_what_a_plain_client_measures() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let out = scratch("plain-client");
    let run = threeway(&out)
        .arg("--llama-server")
        .arg(llama_cpp_tool("llama-server"))
        .args(["--arms", "llama.cpp", "--no-selftest"])
        .args(["--prompts", "8", "--n-out", "4"])
        .args(["--quality-prompts", "1", "--quality-tail", "1"])
        .args(["--llama-arg", "--threads 2"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", stderr_of(&run));
    let packet: Value =
        serde_json::from_slice(&std::fs::read(out.join("packet.json")).unwrap()).unwrap();
    let arm = &packet["arms"][0];
    // The check as the packet states it (within 5 % or 3 ms) holds on an idle machine, and on
    // the H200 (experiments/h200/llama-ttft.sh); a busy one swings the prompt's own compute by
    // more than that from one request to the next (NOTES, fair). What the client and the
    // server add beyond the prompt's compute — the arm's derived queue, the plain client's TTFT
    // minus its request's prompt_ms — must agree within 3 ms whatever the machine does.
    let plain = &arm["plain_client"];
    assert_eq!(plain["requests"], 8, "{plain}");
    assert!(plain["within"].is_boolean(), "{plain}");
    let (beyond_arm, beyond_plain) = (
        plain["arm_beyond_prompt_p50_s"].as_f64().unwrap(),
        plain["plain_beyond_prompt_p50_s"].as_f64().unwrap(),
    );
    assert!(
        (beyond_arm - beyond_plain).abs() <= 0.003,
        "arm {beyond_arm} s, plain client {beyond_plain} s beyond the server's prompt time: {plain}"
    );
    let args = arm["engine"]["flags"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|f| f.as_str().unwrap().strip_prefix("args="))
        .unwrap()
        .to_string();
    for flag in [
        "\"--cache-ram\",\"0\"",
        "\"--ctx-checkpoints\",\"0\"",
        "\"--threads\",\"2\"",
    ] {
        assert!(args.contains(flag), "{flag} in {args}");
    }
    let tuning: Vec<&str> = arm["engine"]["tuning"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["flag"].as_str().unwrap())
        .collect();
    assert_eq!(
        tuning,
        ["--cache-ram 0", "--ctx-checkpoints 0", "--threads 2"]
    );
    let kinds = &arm["bucket_methods"]["kinds"];
    assert_eq!(
        (&kinds["queue"], &kinds["setup"], &kinds["prefill"]),
        (&json!("derived"), &json!("zero"), &json!("measured"))
    );
    assert_eq!(arm["device"]["kind"], "cpu", "{}", arm["device"]);
    let command = std::fs::read_to_string(out.join("command.txt")).unwrap();
    assert!(
        command.contains("threeway") && command.contains("'--threads 2'"),
        "{command}"
    );
    let validation: Value =
        serde_json::from_slice(&std::fs::read(out.join("validation.json")).unwrap()).unwrap();
    assert_eq!(validation["valid"], true, "{validation}");
}

/// A tiny Qwen3 whose greedy output repeats `cycle` (vocabulary texts, byte-mapped) from its
/// first entry on, whatever the prompt (unless it ends in one of them). Arranged from the
/// synthetic model: the blocks add nothing (attention and MLP output projections zeroed, so the
/// last hidden state is the current token's embedding), each cycle token embeds as a direction
/// of its own and every other token as one more, and the head maps each direction to its
/// successor. Returns the file and the cycle's ids.
fn cycle_model(dir: &Path, name: &str, cycle: &[&str]) -> (PathBuf, Vec<u32>) {
    use fak::gguf::{Gguf, GgufWriter};
    use fak::quant::GgmlType;
    let source = fak_tests::harness::synth_model(
        dir,
        "qwen3-tiny-f32.gguf",
        &[
            "--arch", "qwen3", "--preset", "tiny", "--vocab", "cut", "--quant", "f32", "--seed",
            "5",
        ],
    );
    let gguf = Gguf::open(&source).unwrap();
    let tokens = gguf.metadata().str_array("tokenizer.ggml.tokens").unwrap();
    let ids: Vec<u32> = cycle
        .iter()
        .map(|t| tokens.iter().position(|x| x == t).unwrap() as u32)
        .collect();
    let d = gguf.tensor("token_embd.weight").unwrap().shape[0] as usize;
    assert!(
        d > cycle.len(),
        "{d} dimensions for {} directions",
        cycle.len() + 1
    );
    // Direction 0 for every token outside the cycle, 1 + i for cycle[i]. Unit RMS: the final
    // RMSNorm (its gain set to 1) leaves them as they are.
    let direction = |tok: u32| ids.iter().position(|&id| id == tok).map_or(0, |i| i + 1);
    let axis = |k: usize| {
        let mut v = vec![0f32; d];
        v[k] = (d as f32).sqrt();
        v
    };
    // The head row of cycle[i] reads the direction of its predecessor (cycle[0]'s also
    // direction 0): logit 1 for the successor, 0 for everything else.
    let head_row = |tok: u32| {
        let mut row = vec![0f32; d];
        if let Some(i) = ids.iter().position(|&id| id == tok) {
            let before = if i == 0 { ids.len() } else { i };
            row[before] = 1.0 / (d as f32).sqrt();
            if i == 0 {
                row[0] = 1.0 / (d as f32).sqrt();
            }
        }
        row
    };
    let path = dir.join(name);
    let mut w = GgufWriter::new();
    for (key, value) in gguf.metadata().entries() {
        w.set(key, value.clone()).unwrap();
    }
    for t in gguf.tensors() {
        assert_eq!(t.ty, GgmlType::F32, "{}", t.name);
        let rows = t.n_rows() as u32;
        let values: Vec<f32> = match t.name.as_str() {
            "token_embd.weight" => (0..rows).flat_map(|tok| axis(direction(tok))).collect(),
            "output.weight" => (0..rows).flat_map(head_row).collect(),
            "output_norm.weight" => vec![1.0; t.n_elements() as usize],
            n if n.ends_with("attn_output.weight") || n.ends_with("ffn_down.weight") => {
                vec![0.0; t.n_elements() as usize]
            }
            _ => bytemuck::cast_slice(gguf.tensor_data(t)).to_vec(),
        };
        let bytes: Vec<u8> = bytemuck::cast_slice(&values).to_vec();
        let source = Box::new(move |out: &mut dyn std::io::Write| out.write_all(&bytes));
        w.add_tensor(&t.name, t.ty, &t.shape, source).unwrap();
    }
    w.write(&path, |_| {}).unwrap();
    (path, ids)
}

/// Greedy output alternating `A` and the byte-level token `ä` (the lone byte 0xE4, a UTF-8
/// lead byte): llama-server withholds every token from the first `ä` on (the text never ends
/// outside a character again), and an even `--n-out` ends on an `ä`.
fn utf8_tail_model(dir: &Path) -> (PathBuf, u32, u32) {
    let (path, ids) = cycle_model(dir, "qwen3-utf8-tail.gguf", &["A", "ä"]);
    (path, ids[0], ids[1])
}

/// The multi-agent scenario's llama.cpp arm on `model` (2 agents, 2 turns, a 64-token preamble,
/// 8 own tokens, `n_out` out, later turns carrying `replies`: `own` or `scripted`) run into
/// `out`: its cache-on and cache-off raw records, each asserted to have run.
fn multi_agent_runs(
    out: &Path,
    model: &Path,
    n_out: usize,
    replies: &str,
) -> [(&'static str, Value); 2] {
    let run = threeway(out)
        .args([
            "--scenario",
            "multi-agent",
            "--no-selftest",
            "--arms",
            "llama.cpp",
        ])
        .args([
            "--agents",
            "2",
            "--turns",
            "2",
            "--preamble",
            "64",
            "--suffix",
            "8",
        ])
        .args(["--n-out", &n_out.to_string(), "--replies", replies])
        .arg("--llama-server")
        .arg(llama_cpp_tool("llama-server"))
        .arg("--model")
        .arg(model)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", stderr_of(&run));
    ["cache", "nocache"].map(|cache| {
        let name = format!("multi-agent-llama.cpp-{cache}-raw.json");
        let raw: Value = serde_json::from_slice(&std::fs::read(out.join(name)).unwrap()).unwrap();
        assert_eq!(raw["status"]["state"], "ran", "{cache}: {}", raw["status"]);
        (cache, raw)
    })
}

/// llama-server withholds a token whose text is an incomplete UTF-8 sequence; with each engine's
/// own replies the scenario's llama.cpp arm, like the envelope's, recovers its id (an untimed
/// replay), also when the reply ends on one, so both of its runs (and the envelope's) complete
/// with n_out tokens per request and each request says which positions came from the replay.
#[test]
fn llama_cpp_recovers_tokens_withheld_for_incomplete_utf8() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let out = scratch("utf8-tail");
    let models = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("llama-cpp-models");
    let (model, a, lead) = utf8_tail_model(&models);
    for (cache, raw) in multi_agent_runs(&out, &model, N_OUT, "own") {
        let turns = raw["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 4, "{cache}: 2 agents × 2 turns");
        for t in turns {
            let ids: Vec<u32> = serde_json::from_value(t["token_ids"].clone()).unwrap();
            assert_eq!(ids, [a, lead, a, lead], "{cache}: {t}");
            // From the lead byte on the server's check always finds a lead byte too close to
            // the text's end (0xE4 then `A` is not a character either), so the stream sends no
            // further id nor any text: all three come from the replay.
            let withheld = &t["engine_report"]["engine"]["withheld_ids"];
            assert_eq!(withheld["positions"], json!([1, 2, 3]), "{cache}: {t}");
            assert_eq!(withheld["from_replay"], json!([1, 2, 3]), "{cache}: {t}");
            assert_eq!(withheld["from_text"], json!([]), "{cache}: {t}");
        }
    }
    let validation: Value =
        serde_json::from_slice(&std::fs::read(out.join("validation.json")).unwrap()).unwrap();
    assert_eq!(validation["valid"], true, "{validation}");

    // The envelope's arm, on the same model.
    let out = scratch("utf8-tail-envelope");
    let run = threeway(&out)
        .args([
            "--arms",
            "llama.cpp",
            "--no-selftest",
            "--quality-prompts",
            "0",
        ])
        .args(["--prompts", "2", "--n-out", &N_OUT.to_string()])
        .arg("--llama-server")
        .arg(llama_cpp_tool("llama-server"))
        .arg("--model")
        .arg(&model)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", stderr_of(&run));
    let raw: Value =
        serde_json::from_slice(&std::fs::read(out.join("llama.cpp-raw.json")).unwrap()).unwrap();
    for q in raw["requests"].as_array().unwrap() {
        let ids: Vec<u32> = serde_json::from_value(q["token_ids"].clone()).unwrap();
        assert_eq!(ids, [a, lead, a, lead], "{q}");
        let withheld = &q["engine_timings"]["withheld_ids"]["positions"];
        assert_eq!(withheld, &json!([1, 2, 3]), "{q}");
    }
}

/// A withheld token whose character a later token completes is named from the stream's text,
/// no replay: greedy output cycles `A`, the byte 0xC3 (`Ã`, withheld: a lead byte) and 0xA9
/// (`©`, completing `é`, whose chunk carries both bytes). Five tokens end on a withheld 0xC3
/// with no text after it, which the replay fills; six end on `é`, and nothing is replayed.
#[test]
fn llama_cpp_names_withheld_tokens_from_the_stream_text() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let models = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("llama-cpp-models");
    let (model, ids) = cycle_model(&models, "qwen3-utf8-complete.gguf", &["A", "Ã", "©"]);
    let (a, c3, a9) = (ids[0], ids[1], ids[2]);

    let out = scratch("utf8-complete");
    for (cache, raw) in multi_agent_runs(&out, &model, 5, "own") {
        for t in raw["turns"].as_array().unwrap() {
            let got: Vec<u32> = serde_json::from_value(t["token_ids"].clone()).unwrap();
            assert_eq!(got, [a, c3, a9, a, c3], "{cache}: {t}");
            let withheld = &t["engine_report"]["engine"]["withheld_ids"];
            assert_eq!(withheld["positions"], json!([1, 4]), "{cache}: {t}");
            assert_eq!(withheld["from_text"], json!([1]), "{cache}: {t}");
            assert_eq!(withheld["from_replay"], json!([4]), "{cache}: {t}");
        }
    }

    let out = scratch("utf8-complete-envelope");
    let run = threeway(&out)
        .args([
            "--arms",
            "llama.cpp",
            "--no-selftest",
            "--quality-prompts",
            "0",
        ])
        .args(["--prompts", "2", "--n-out", "6"])
        .arg("--llama-server")
        .arg(llama_cpp_tool("llama-server"))
        .arg("--model")
        .arg(&model)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", stderr_of(&run));
    let raw: Value =
        serde_json::from_slice(&std::fs::read(out.join("llama.cpp-raw.json")).unwrap()).unwrap();
    for q in raw["requests"].as_array().unwrap() {
        let got: Vec<u32> = serde_json::from_value(q["token_ids"].clone()).unwrap();
        assert_eq!(got, [a, c3, a9, a, c3, a9], "{q}");
        let withheld = &q["engine_timings"]["withheld_ids"];
        assert_eq!(withheld["from_text"], json!([1, 4]), "{q}");
        assert_eq!(withheld["from_replay"], json!([]), "{q}");
        assert!(withheld.get("replay_s").is_none(), "{q}");
    }
}

/// With scripted replies (the scenario's default) no later prompt holds llama.cpp's answer, so
/// a withheld id the stream's text cannot name needs no replay: on the model whose greedy
/// answer ends on withheld tokens (every token from the first `ä` on), both runs complete with
/// those positions unnamed (`null`), no replay sent; every turn's prompt is the script's, the
/// same in both runs, and the packet validates (its validator holds every turn to the script).
/// Where the text names a withheld token (`é` completed), the id is still recorded.
#[test]
fn scripted_replies_need_no_withheld_ids() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let models = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("llama-cpp-models");
    let (model, a, _) = utf8_tail_model(&models);
    let out = scratch("utf8-tail-scripted");
    let runs = multi_agent_runs(&out, &model, N_OUT, "scripted");
    let packet: Value =
        serde_json::from_slice(&std::fs::read(out.join("packet.json")).unwrap()).unwrap();
    let script = &packet["scenario"]["replies"];
    assert_eq!(script["mode"], "scripted", "{script}");
    for (cache, raw) in &runs {
        let turns = raw["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 4, "{cache}: 2 agents × 2 turns");
        for t in turns {
            assert_eq!(
                t["token_ids"],
                json!([a, null, null, null]),
                "{cache}: the answer ends on withheld tokens: {t}"
            );
            let withheld = &t["engine_report"]["engine"]["withheld_ids"];
            assert_eq!(withheld["unnamed"], json!([1, 2, 3]), "{cache}: {t}");
            assert_eq!(withheld["from_replay"], json!([]), "{cache}: {t}");
            assert!(withheld.get("replay_s").is_none(), "{cache}: {t}");
            let (agent, turn) = (t["agent"].as_u64().unwrap(), t["turn"].as_u64().unwrap());
            assert_eq!(
                t["prompt_sha256"],
                script["prompt_sha256"][agent as usize - 1][turn as usize - 1],
                "{cache}: agent {agent} turn {turn}"
            );
        }
    }
    let validation: Value =
        serde_json::from_slice(&std::fs::read(out.join("validation.json")).unwrap()).unwrap();
    assert_eq!(validation["valid"], true, "{validation}");

    let (model, ids) = cycle_model(&models, "qwen3-utf8-complete.gguf", &["A", "Ã", "©"]);
    let out = scratch("utf8-complete-scripted");
    for (cache, raw) in multi_agent_runs(&out, &model, 5, "scripted") {
        for t in raw["turns"].as_array().unwrap() {
            assert_eq!(
                t["token_ids"],
                json!([ids[0], ids[1], ids[2], ids[0], null]),
                "{cache}: {t}"
            );
            let withheld = &t["engine_report"]["engine"]["withheld_ids"];
            assert_eq!(withheld["from_text"], json!([1]), "{cache}: {t}");
            assert_eq!(withheld["unnamed"], json!([4]), "{cache}: {t}");
        }
    }
}
