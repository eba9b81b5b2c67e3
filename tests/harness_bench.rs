//! `harness bench` on a tiny qwen3 and a tiny qwen35 on whatever adapter is present: the
//! report's structure and its internal consistency (bytes and FLOPs against the model file and
//! its recurrent state, sums, dispatches against the timed run's, rates against times), for the
//! decode step (one sequence, and a batched step of several) and the prefill profiles; and
//! profiling leaving the profiled sequences as they were.
//! Speed numbers themselves are never asserted.

use fak::gguf::Gguf;
use fak::model::qwen35::{Hparams, LayerKind};
use fak::runtime::{Engine, EngineOptions};
use fak_tests::harness::harness;
use fak_tests::model::{random_ids, tiny_cut};
use serde_json::Value;
use std::path::PathBuf;

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("harness_bench")
}

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number: {v}"))
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not an integer: {v}"))
}

/// `a` equals `b` up to rounding in the report's own arithmetic (f64, printed with full
/// precision by serde_json).
fn assert_rel(what: &str, a: f64, b: f64) {
    assert!(
        a.is_finite() && b.is_finite() && (a - b).abs() <= 1e-9 * a.abs().max(b.abs()),
        "{what}: {a} vs {b}"
    );
}

/// A prompt of two prefill chunks, a full one and a short one: prompt steps both (mat-muls and
/// prefill attention, however few tokens a step holds).
const DEPTH: u64 = 20;
const PREFILL_CHUNK: u64 = 16;
const N_OUT: u64 = 3;
/// Tokens after the prompt profiled as a prefix-cache hit computes them: a full chunk and a
/// short one again, now attending to the prompt too.
const SUFFIX: u64 = 20;
/// KV page of the bench's prefix cache: one whole page of the prompt is reusable.
const PAGE: u64 = 16;
/// Sequences of the batched decode (`--sequences`).
const SEQUENCES: u64 = 3;

/// A tiny synthetic model of `arch` (Q4_K_M, seed 5).
fn tiny(arch: &str) -> PathBuf {
    tiny_cut(&scratch(), arch, "q4_k_m", 5)
}

/// What `command` (a `harness bench … --json`) printed, after it succeeded.
fn json_report(mut command: std::process::Command) -> Value {
    let out = command.output().expect("running harness bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("bench --json output")
}

/// `harness bench --json` at one depth, checked for what holds whatever the model: the probe,
/// the step's sums, rates against times. Returns the report and its one depth.
fn bench(path: &PathBuf) -> (Value, Value) {
    let mut command = harness();
    command
        .args(["bench", "--model"])
        .arg(path)
        .args([
            "--depths",
            &DEPTH.to_string(),
            "--n-out",
            &N_OUT.to_string(),
            "--prefill-chunk",
            &PREFILL_CHUNK.to_string(),
            "--suffix",
            &SUFFIX.to_string(),
            "--cache-mem",
            "64M",
            "--page-size",
            &PAGE.to_string(),
        ])
        .args(["--profile-steps", "2", "--probe-mib", "8", "--json"])
        .args(["--sequences", &SEQUENCES.to_string()]);
    let report = json_report(command);

    let bandwidth = &report["bandwidth"];
    assert_eq!(u(bandwidth, "bytes"), 8 << 20);
    let gb_per_s = f(bandwidth, "gb_per_s");
    assert!(gb_per_s > 0.0, "{bandwidth}");
    assert_eq!(bandwidth["pass_seconds"].as_array().map(Vec::len), Some(5));

    let depths = report["depths"].as_array().expect("depths");
    assert_eq!(depths.len(), 1);
    let d = depths[0].clone();
    assert_eq!(u(&d, "depth"), DEPTH);
    assert_eq!(u(&d, "profiled_kv_len"), DEPTH + 1);
    assert!(f(&d, "decode_tokens_per_s") > 0.0);
    assert_rel(
        "µs per token",
        f(&d, "decode_us_per_token"),
        1e6 / f(&d, "decode_tokens_per_s"),
    );
    // Greedy decode is GPU-resident: one submit per step, whatever the adapter.
    assert_rel("submits per token", f(&d, "submits_per_token"), 1.0);
    assert!(f(&d, "encode_us_per_token") > 0.0);

    let rows = ops(&d);
    let sum = |key: &str| rows.iter().map(|o| u(o, key)).sum::<u64>();
    assert_eq!(sum("dispatches"), u(&d, "dispatches_per_step"));
    assert_eq!(sum("count"), u(&d, "ops_per_step"));
    assert_eq!(sum("weight_bytes"), u(&d, "step_weight_bytes"));
    assert_eq!(sum("activation_bytes"), u(&d, "step_activation_bytes"));
    assert_rel(
        "roofline µs",
        f(&d, "roofline_us"),
        u(&d, "step_weight_bytes") as f64 / gb_per_s / 1e3,
    );
    check_rows(&report, &d, gb_per_s);

    let rest = DEPTH - PREFILL_CHUNK;
    let chunk_dispatches = check_prefill(
        &report,
        &d["prefill"],
        &[(PREFILL_CHUNK, PREFILL_CHUNK), (rest, DEPTH)],
        gb_per_s,
    );
    // The profiled chunks record what the timed prefill recorded (its last chunk's dispatches
    // come from the request's own run).
    assert_eq!(chunk_dispatches[1], u(&d, "prefill_step_dispatches"));
    // The suffix resumed at the depth: the same step shapes, each attending to the prompt.
    let resumed = check_prefill(
        &report,
        &d["resumed"],
        &[
            (PREFILL_CHUNK, DEPTH + PREFILL_CHUNK),
            (SUFFIX - PREFILL_CHUNK, DEPTH + SUFFIX),
        ],
        gb_per_s,
    );
    assert_eq!(resumed, chunk_dispatches, "the same steps' dispatches");
    check_cache_hit(&d["cache_hit"]);
    check_batched(&report, &d, gb_per_s);
    (report, d)
}

/// `--sequences` decoding together: every sequence, every step after the first token, and the
/// aggregate rate what the step time says; then its profiled step: its rows against its own
/// sums, and the one-sequence step's ops, in order, one dispatch each as there (every op of a
/// decode step serves the whole batch in one dispatch), reading the same weight bytes.
fn check_batched(report: &Value, d: &Value, gb_per_s: f64) {
    let b = &d["batched"];
    assert_eq!(u(b, "sequences"), SEQUENCES, "{b}");
    assert_eq!(u(b, "steps"), N_OUT - 1, "{b}");
    assert!(f(b, "ms_per_step") > 0.0, "{b}");
    assert_rel(
        "aggregate tok/s",
        f(b, "aggregate_tokens_per_s"),
        SEQUENCES as f64 * 1e3 / f(b, "ms_per_step"),
    );
    assert!(f(b, "ms_per_step_in_flight") > 0.0, "{b}");
    assert_rel(
        "aggregate tok/s in flight",
        f(b, "aggregate_in_flight_tokens_per_s"),
        SEQUENCES as f64 * 1e3 / f(b, "ms_per_step_in_flight"),
    );
    let rows = ops(b);
    let sum = |key: &str| rows.iter().map(|o| u(o, key)).sum::<u64>();
    assert_eq!(sum("dispatches"), u(b, "dispatches_per_step"));
    assert_eq!(sum("count"), u(b, "ops_per_step"));
    assert_eq!(sum("weight_bytes"), u(b, "step_weight_bytes"));
    assert_eq!(sum("activation_bytes"), u(b, "step_activation_bytes"));
    assert!(f(b, "step_wall_us") > 0.0, "{b}");
    check_rows(report, b, gb_per_s);
    let shape = |step: &Value| -> Vec<(String, String, u64, u64)> {
        ops(step)
            .iter()
            .map(|o| {
                let name = o["name"].as_str().expect("name").to_string();
                let kernel = o["kernel"].as_str().expect("kernel").to_string();
                (name, kernel, u(o, "count"), u(o, "dispatches"))
            })
            .collect()
    };
    assert_eq!(
        shape(b),
        shape(d),
        "the batched step's ops against one sequence's"
    );
    // Products read their weights once for the batch: a product row's weight bytes are the
    // one-sequence step's (other rows' weight bytes include per-sequence state and cache).
    for o in ops(d).iter().filter(|o| u(o, "flops") > 0) {
        let batched = op(b, o["name"].as_str().expect("name"));
        assert_eq!(
            u(batched, "weight_bytes"),
            u(o, "weight_bytes"),
            "{o} vs {batched}"
        );
        assert_eq!(
            u(batched, "flops"),
            SEQUENCES * u(o, "flops"),
            "{o} vs {batched}"
        );
    }
}

/// The prompt + suffix served as a prefix-cache hit: every token reused or computed, at least
/// the prompt's whole page reused, and the host phases within the TTFT they divide.
fn check_cache_hit(h: &Value) {
    assert_eq!(
        u(h, "cached_tokens") + u(h, "computed_tokens"),
        DEPTH + SUFFIX
    );
    let phases: f64 = [
        "open_us",
        "steps_us",
        "snapshots_us",
        "insert_us",
        "wait_us",
    ]
    .iter()
    .map(|k| f(h, k))
    .sum();
    assert!(
        phases > 0.0 && phases <= f(h, "ttft_us"),
        "phases {phases} µs against the TTFT: {h}"
    );
}

/// One prefill profile `p` of chunks `(tokens, kv_len)` = `shape`: its rows sum to its chunks and
/// totals, and its rates agree with its times. Returns the chunks' dispatches.
fn check_prefill(report: &Value, p: &Value, shape: &[(u64, u64)], gb_per_s: f64) -> Vec<u64> {
    let tokens: u64 = shape.iter().map(|c| c.0).sum();
    assert_eq!(u(p, "tokens"), tokens);
    let chunks = p["chunks"].as_array().expect("prefill chunks");
    let got: Vec<(u64, u64)> = chunks
        .iter()
        .map(|c| (u(c, "tokens"), u(c, "kv_len")))
        .collect();
    assert_eq!(got, shape);
    let chunk_dispatches: Vec<u64> = chunks.iter().map(|c| u(c, "dispatches")).collect();
    let rows = ops(p);
    let sum = |key: &str| rows.iter().map(|o| u(o, key)).sum::<u64>();
    assert_eq!(sum("dispatches"), chunk_dispatches.iter().sum::<u64>());
    assert_eq!(sum("dispatches"), u(p, "dispatches"));
    assert_eq!(sum("count"), u(p, "op_count"));
    for key in ["weight_bytes", "activation_bytes", "flops"] {
        assert_eq!(sum(key), u(p, key), "{key}");
    }
    check_rows(report, p, gb_per_s);
    if report["op_timing"] == "gpu_timestamps" {
        let chunk_us = chunks.iter().map(|c| f(c, "gpu_us")).sum::<f64>();
        assert_rel("Σ chunk µs", chunk_us, f(p, "gpu_us"));
        let rate = tokens as f64 / f(p, "gpu_us") * 1e6;
        assert_rel("GPU tok/s", f(p, "gpu_tokens_per_s"), rate);
    }
    chunk_dispatches
}

/// The rows of one profile (`d`: a decode step or a prefill) against the profile's own sums:
/// with timestamps inside passes every op has a GPU time and the rows' rates agree with it;
/// without, none has.
fn check_rows(report: &Value, d: &Value, gb_per_s: f64) {
    let rows = ops(d);
    if report["op_timing"] != "gpu_timestamps" {
        assert_eq!(report["op_timing"], "host_wall_per_step");
        assert!(rows.iter().all(|o| o["gpu_us"].is_null()));
        assert!(d["gpu_us"].is_null());
        return;
    }
    let gpu_us = f(d, "gpu_us");
    let sum = |key: &str| rows.iter().map(|o| f(o, key)).sum::<f64>();
    assert_rel("Σ op µs", sum("gpu_us"), gpu_us);
    assert_rel("Σ shares", sum("share"), 1.0);
    for o in rows {
        let us = f(o, "gpu_us");
        assert!(us >= 0.0, "{o}");
        if us > 0.0 {
            let bytes = (u(o, "weight_bytes") + u(o, "activation_bytes")) as f64;
            assert_rel("GB/s", f(o, "gb_per_s"), bytes / us / 1e3);
            let roof = u(o, "weight_bytes") as f64 / gb_per_s / 1e3 / us;
            assert_rel("roofline fraction", f(o, "roofline_fraction"), roof);
            match u(o, "flops") {
                0 => assert!(o["tflop_per_s"].is_null(), "{o}"),
                flops => assert_rel("TFLOP/s", f(o, "tflop_per_s"), flops as f64 / us / 1e6),
            }
        }
    }
}

fn ops(d: &Value) -> &Vec<Value> {
    d["ops"].as_array().expect("ops")
}

fn op<'a>(d: &'a Value, name: &str) -> &'a Value {
    ops(d)
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("no {name} op in {d}"))
}

fn assert_names(d: &Value, want: &[&str]) {
    let names: Vec<&str> = ops(d).iter().filter_map(|o| o["name"].as_str()).collect();
    for w in want {
        assert!(names.contains(w), "{w} missing from {names:?}");
    }
}

/// In `d` (a prefill's profile) only the output head ran a mat-vec: prompt steps multiply as
/// mat-muls, except the head's one row per sequence (a mat-vec's job: experiments/NOTES.md,
/// session 2026-12-05 #5), which must be one.
fn assert_mat_vec_only_in_the_head(d: &Value) {
    let mat_vecs: Vec<(&str, &str)> = ops(d)
        .iter()
        .filter_map(|o| Some((o["name"].as_str()?, o["kernel"].as_str()?)))
        .filter(|(_, kernel)| kernel.starts_with("matvec"))
        .collect();
    assert_eq!(
        mat_vecs,
        [("output", "matvec")],
        "a prompt step's mat-vecs (the head's f32-input one only)"
    );
}

/// Every `(op, kernel)` of `want` is a row of `d`.
fn assert_kernels(d: &Value, want: &[(&str, &str)]) {
    let rows: Vec<(&str, &str)> = ops(d)
        .iter()
        .filter_map(|o| Some((o["name"].as_str()?, o["kernel"].as_str()?)))
        .collect();
    for w in want {
        assert!(rows.contains(w), "{w:?} missing from {rows:?}");
    }
}

/// The FLOPs of the weight products, from the file's shapes: 2 · rows · cols of every layer's
/// product weights for each token of each chunk, and of the output head for each chunk's last
/// token (the only row a step turns into logits). Checked for the decode step (one token) and
/// the prefill (its chunks); and only products have FLOPs.
fn assert_flops(gguf: &Gguf, d: &Value) {
    let is_product = |t: &&fak::gguf::TensorInfo| {
        t.name.starts_with("blk.") && t.n_rows() > 1 && !t.name.ends_with("ssm_conv1d.weight")
    };
    let layers: u64 = gguf
        .tensors()
        .iter()
        .filter(is_product)
        .map(|t| t.n_elements())
        .sum();
    let head = gguf
        .require_tensor("output.weight")
        .or_else(|_| gguf.require_tensor("token_embd.weight"))
        .unwrap()
        .n_elements();
    // The architecture's spec gives the roofline's compute floor per prompt token: the same.
    let spec = fak::model::blueprint(gguf).unwrap();
    assert_eq!(
        spec.prefill_flops_per_token(),
        2 * layers,
        "the spec's FLOPs"
    );
    let flops = |tokens: u64| 2 * (tokens * layers + head);
    let sum = |d: &Value| ops(d).iter().map(|o| u(o, "flops")).sum::<u64>();
    assert_eq!(sum(d), flops(1), "decode step FLOPs");
    let p = &d["prefill"];
    let chunks = p["chunks"].as_array().unwrap();
    let want: u64 = chunks.iter().map(|c| flops(u(c, "tokens"))).sum();
    assert_eq!(sum(p), want, "prefill FLOPs");
    for o in ops(d).iter().chain(ops(p)) {
        let product = ["matvec", "matvec_q8", "matmul"].contains(&o["kernel"].as_str().unwrap());
        assert_eq!(u(o, "flops") > 0, product, "{o}");
    }
}

/// Bytes of every weight a step reads once: every tensor, the embedding table one row (and
/// once more whole when the output head is tied to it). The architecture's spec (the registry's
/// decode-step bytes, which `inspect` and the roofline report) must say the same of these
/// models, which have no tensors a step skips.
fn weight_bytes(gguf: &Gguf) -> u64 {
    let tensor_bytes = |t: &fak::gguf::TensorInfo| t.n_rows() * t.row_bytes();
    let all: u64 = gguf.tensors().iter().map(tensor_bytes).sum();
    let embd = gguf.require_tensor("token_embd.weight").unwrap();
    let tied = gguf.require_tensor("output.weight").is_err();
    let bytes =
        all - tensor_bytes(embd) + embd.row_bytes() + if tied { tensor_bytes(embd) } else { 0 };
    let spec = fak::model::blueprint(gguf).unwrap().decode_step_bytes();
    assert_eq!(spec.bytes, bytes, "the spec's decode-step bytes");
    bytes
}

/// KV-cache bytes one attention layer reads (k and v of every cached position), checked to be
/// that many positions of `kv_width` at 2 or 4 bytes; returns (layers, bytes per layer). With
/// the rope fusion (the default) the attention row also holds the q and k head norms' weights
/// (f32, `head_dim` each), which rope_kv's row holds otherwise.
fn kv_reads(d: &Value, kv_width: u64, head_dim: u64) -> (u64, u64) {
    let attention = op(d, "attention");
    let n_layer = u(attention, "count");
    let norms = match fak::model::blocks::decode_fuse("rope") {
        true => 2 * 4 * head_dim,
        false => 0,
    };
    let kv_per_layer = u(attention, "weight_bytes") / n_layer - norms;
    let positions = DEPTH + 1;
    let per_element = kv_per_layer / (2 * positions * kv_width);
    assert!(
        [2, 4].contains(&per_element) && kv_per_layer == 2 * positions * kv_width * per_element,
        "attention reads {kv_per_layer} B per layer at kv {positions} × width {kv_width}",
    );
    (n_layer, kv_per_layer)
}

#[test]
fn bench_reports_a_consistent_per_op_profile_against_the_model_bytes() {
    let path = tiny("qwen3");
    let (_, d) = bench(&path);
    assert_eq!(
        u(&d["cache_hit"], "cached_tokens"),
        DEPTH,
        "the prompt's whole page, and its last 4 tokens by copy-on-write"
    );
    // The roofline bytes are the model's weights plus k and v of every cached position in
    // every layer.
    let gguf = Gguf::open(&path).unwrap();
    let kv_width = gguf.require_tensor("blk.0.attn_k.weight").unwrap().n_rows();
    let head_dim = gguf
        .require_tensor("blk.0.attn_k_norm.weight")
        .unwrap()
        .row_len();
    let (n_layer, kv_per_layer) = kv_reads(&d, kv_width, head_dim);
    assert_eq!(
        u(&d, "step_weight_bytes"),
        weight_bytes(&gguf) + n_layer * kv_per_layer
    );
    // Q4_K_M: q, k, v stacked where v is Q4_K, q and k where it is Q6_K; the norms, RoPE,
    // cache write and SwiGLU folded into the ops around them (rope_kv into the attention with
    // the rope fusion, the default).
    let mut names = vec![
        "embed",
        "attn_qkv",
        "attn_qk",
        "attn_v",
        "attention",
        "ffn_gate_up",
        "ffn_down",
        "output",
        "argmax",
    ];
    let roped = fak::model::blocks::decode_fuse("rope");
    if !roped {
        names.push("rope_kv");
    }
    assert_names(&d, &names);
    assert_eq!(
        ops(&d).iter().any(|o| o["name"] == "rope_kv"),
        !roped,
        "rope_kv's row with the rope fusion {roped}"
    );
    assert_flops(&gguf, &d);
    // The prefill: mat-muls and prefill attention for both chunks, the short one too (a
    // prompt step's kernels follow its role, not its size), the head's one row included.
    assert_kernels(
        &d["prefill"],
        &[
            ("embed", "embed"),
            ("attn_norm", "rms_norm"),
            ("attn_v", "matmul"),
            ("rope_kv", "rope_kv"),
            ("attention", "attn_prefill"),
            ("ffn_norm", "rms_norm"),
            ("ffn_gate_up", "matmul"),
            ("swiglu", "elementwise"),
            ("ffn_down", "matmul"),
            ("output", "matvec"),
            ("argmax", "argmax"),
        ],
    );
    assert_mat_vec_only_in_the_head(&d["prefill"]);
    assert_eq!(u(op(&d["prefill"], "attention"), "count"), 2 * n_layer);
}

/// The hybrid model profiles op by op too: its Gated DeltaNet ops are rows of their own, and
/// the roofline bytes are the weights, the attention layers' KV reads and every GDN layer's
/// recurrent state (f32 conv and delta-rule state, read once per step).
#[test]
fn bench_profiles_the_hybrid_model_with_its_recurrent_state() {
    let path = tiny("qwen35");
    let (_, d) = bench(&path);
    assert_eq!(
        u(&d["cache_hit"], "cached_tokens"),
        0,
        "a hybrid model snapshots its state on the delta rule's 64-token grid only: a \
         20-token prompt leaves no snapshot to resume from"
    );
    let gguf = Gguf::open(&path).unwrap();
    let hp = Hparams::from_gguf(&gguf).unwrap();
    let n_gdn = hp
        .layer_kinds
        .iter()
        .filter(|k| **k == LayerKind::DeltaNet)
        .count() as u64;
    assert!(
        n_gdn > 0 && n_gdn < hp.n_layer as u64,
        "{:?}",
        hp.layer_kinds
    );
    let (n_attn, kv_per_layer) =
        kv_reads(&d, (hp.n_head_kv * hp.head_dim) as u64, hp.head_dim as u64);
    assert_eq!(n_attn + n_gdn, hp.n_layer as u64);
    let conv_dim = (2 * hp.ssm_nk * hp.ssm_dk + hp.ssm_nv * hp.ssm_dv) as u64;
    let conv_state = 4 * (hp.conv_kernel as u64 - 1) * conv_dim;
    let delta_state = 4 * (hp.ssm_nv * hp.ssm_dv * hp.ssm_dk) as u64;
    // A decode step runs each GDN layer as one gdn_decode: both states, the conv taps, ssm_a,
    // dt_bias and ssm_norm.
    let small_weights =
        4 * (conv_dim * hp.conv_kernel as u64 + 2 * hp.ssm_nv as u64 + hp.ssm_dv as u64);
    assert_eq!(
        u(op(&d, "gdn_decode"), "weight_bytes"),
        n_gdn * (conv_state + delta_state + small_weights)
    );
    assert_eq!(u(op(&d, "gdn_decode"), "count"), n_gdn);
    assert_eq!(
        u(&d, "step_weight_bytes"),
        weight_bytes(&gguf) + n_attn * kv_per_layer + n_gdn * (conv_state + delta_state)
    );
    assert_names(
        &d,
        &[
            "embed",
            // attn_norm folds into the projections, stacked where their types agree: the
            // Q6_K qkv of some GDN layers stands alone, the Q6_K v of the attention layers too.
            "gdn_qkv",
            "gdn_zba",
            "gdn_qkvzba",
            "gdn_decode",
            "gdn_out",
            "attn_qk",
            "attn_v",
            // (No attn_gate: the decode attention gates o as it writes it.)
            "attention",
            "ffn_down",
            "output",
            "argmax",
        ],
    );
    assert_flops(&gguf, &d);
    // The prefill: its GDN layers run the chunked delta rule and its products mat-muls on both
    // chunks, the short one too.
    let p = &d["prefill"];
    assert_mat_vec_only_in_the_head(p);
    assert_kernels(
        p,
        &[
            ("gdn_qkv", "matmul"),
            ("ssm_conv", "ssm_conv"),
            ("delta_prep", "delta_prep"),
            ("gated_delta", "gated_delta_chunk"),
            ("gated_norm", "gated_norm"),
            ("gdn_out", "matmul"),
            ("attn_norm", "rms_norm"),
            ("attn_qk", "matmul"),
            ("attention", "attn_prefill"),
            ("attn_gate", "elementwise"),
            ("ffn_gate_up", "matmul"),
            ("output", "matvec"),
        ],
    );
    assert_eq!(u(op(p, "gated_delta"), "count"), 2 * n_gdn);
    assert_eq!(u(op(p, "attention"), "count"), 2 * n_attn);
}

/// Profiling leaves the sequence as it was: on the hybrid model, whose recurrent state every
/// step advances, the decode step after two profiled decode steps, two profiled batched steps
/// beside another sequence and a profiled prefill (on a sequence of its own) gives the logits
/// and tokens of the same step without them, bit for bit (the same kernels on the same inputs
/// and state).
#[test]
fn profiling_leaves_the_sequence_as_it_was() {
    let path = tiny("qwen35");
    let mut options = EngineOptions::from_env().unwrap();
    options.max_context = Some(64);
    options.prefill_chunk = PREFILL_CHUNK as u32;
    // A free sequence for the profiled prefill, and one batched with the decoded sequence.
    options.max_seqs = 3;
    let mut engine = Engine::load(&path, &options).unwrap();
    let n_vocab = engine.n_vocab();
    let prompt = random_ids(3, DEPTH as usize, n_vocab);
    let other = random_ids(4, DEPTH as usize, n_vocab);
    let mut decode = |profile: bool| {
        let seq = engine.start(&prompt, 2, false).unwrap().seq;
        if profile {
            for _ in 0..2 {
                engine.profile_step(seq).unwrap();
            }
            // Batched beside another sequence, twice: both put back each time.
            let companion = engine.start(&other, 2, false).unwrap().seq;
            for _ in 0..2 {
                let batch = engine.profile_batch_step(&[companion, seq]).unwrap();
                assert_eq!(batch.tokens, 2);
                assert_eq!(batch.kv_len, 2 * (DEPTH as u32 + 1));
            }
            engine.finish(companion).unwrap();
            assert_eq!(engine.profile_prefill(&other, 0).unwrap().1.len(), 2);
            // From inside the prompt: only the steps from there, attending to all before.
            let (_, rest) = engine
                .profile_prefill(&other, PREFILL_CHUNK as usize)
                .unwrap();
            let shape: Vec<(u32, u32)> = rest.iter().map(|c| (c.tokens, c.kv_len)).collect();
            assert_eq!(shape, [((DEPTH - PREFILL_CHUNK) as u32, DEPTH as u32)]);
            assert!(engine.profile_prefill(&other, DEPTH as usize).is_err());
        }
        let (tokens, logits) = engine.step_with_logits(&[seq]).unwrap();
        let sequence = engine.tokens(seq).unwrap().to_vec();
        engine.finish(seq).unwrap();
        (tokens, logits, sequence)
    };
    let plain = decode(false);
    let profiled = decode(true);
    assert!(plain.1[0].iter().all(|x| x.is_finite()));
    assert!(plain == profiled, "profiling changed the decode after it");
}

/// `harness bench --probe`: the default and each probe decode unprofiled in every round, the
/// default's row first; a probe's dispatches differ from the default's by what it adds or
/// leaves out (the profiled step's own row for that op), the deltas are against the default's
/// median, and a probe that keeps the default's bits decoded the default's tokens (the bench
/// fails otherwise, before it reports).
#[test]
fn bench_probes_time_op_classes_beside_the_default() {
    let path = tiny("qwen35");
    let rounds = 2;
    let mut command = harness();
    command
        .args(["bench", "--model"])
        .arg(&path)
        .args(["--depths", "12", "--n-out", "3", "--suffix", "0"])
        .args(["--profile-steps", "1", "--probe-mib", "8", "--json"])
        .args([
            "--probe",
            "attention*2",
            "--probe",
            "gdn_decode*0,ffn_gate_up*2",
        ])
        .args(["--probe-rounds", &rounds.to_string()]);
    let report = json_report(command);
    let d = &report["depths"][0];
    let probes = d["probes"].as_array().expect("probes");
    let names: Vec<&str> = probes
        .iter()
        .map(|p| p["probe"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["default", "attention*2", "gdn_decode*0,ffn_gate_up*2"]
    );
    let default_median = f(&probes[0], "median_us");
    for p in probes {
        let rounds_us = p["us_per_token"].as_array().expect("rounds");
        assert_eq!(rounds_us.len(), rounds, "{p}");
        assert!(rounds_us.iter().all(|v| v.as_f64().unwrap() > 0.0), "{p}");
        assert_rel("Δµs", f(p, "delta_us"), f(p, "median_us") - default_median);
        let delta = p["delta_dispatches"].as_i64().unwrap();
        assert_eq!(
            delta,
            u(p, "dispatches_per_token") as i64 - u(&probes[0], "dispatches_per_token") as i64
        );
    }
    assert_eq!(
        u(&probes[0], "dispatches_per_token"),
        u(d, "dispatches_per_step")
    );
    assert!(probes[0]["same_tokens"].as_bool().unwrap());
    // attention*2: its row's dispatches once more, the default's tokens.
    let attention = u(op(d, "attention"), "dispatches") as i64;
    assert_eq!(probes[1]["delta_dispatches"].as_i64(), Some(attention));
    assert_eq!(probes[1]["keeps_bits"].as_bool(), Some(true));
    assert_eq!(probes[1]["same_tokens"].as_bool(), Some(true));
    // gdn_decode left out: no longer the default's computation.
    assert_eq!(probes[2]["keeps_bits"].as_bool(), Some(false));
    let gdn = u(op(d, "gdn_decode"), "dispatches") as i64;
    let delta = probes[2]["delta_dispatches"].as_i64().unwrap();
    assert!(
        delta > -gdn,
        "{delta} against the gdn_decode row's {gdn}: gate/up added"
    );
}
