//! `harness bench` on a tiny qwen3 and a tiny qwen35 on whatever adapter is present: the
//! report's structure and its internal consistency (bytes against the model file and its
//! recurrent state, sums, rates against times). Speed numbers themselves are never asserted.

use fak::gguf::Gguf;
use fak::model::qwen35::{Hparams, LayerKind};
use fak_tests::harness::{harness, synth_model};
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

const DEPTH: u64 = 5;
const N_OUT: u64 = 3;

/// A tiny synthetic model of `arch` (Q4_K_M, seed 5).
fn tiny(arch: &str) -> PathBuf {
    let args = [
        "--arch", arch, "--preset", "tiny", "--quant", "q4_k_m", "--seed", "5",
    ];
    synth_model(&scratch(), &format!("tiny-{arch}-q4_k_m-5.gguf"), &args)
}

/// `harness bench --json` at one depth, checked for what holds whatever the model: the probe,
/// the step's sums, rates against times. Returns the report and its one depth.
fn bench(path: &PathBuf) -> (Value, Value) {
    let out = harness()
        .args(["bench", "--model"])
        .arg(path)
        .args([
            "--depths",
            &DEPTH.to_string(),
            "--n-out",
            &N_OUT.to_string(),
        ])
        .args(["--profile-steps", "2", "--probe-mib", "8", "--json"])
        .output()
        .expect("running harness bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("bench --json output");

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

    let ops = ops(&d);
    let sum = |key: &str| ops.iter().map(|o| u(o, key)).sum::<u64>();
    assert_eq!(sum("dispatches"), u(&d, "dispatches_per_step"));
    assert_eq!(sum("count"), u(&d, "ops_per_step"));
    assert_eq!(sum("weight_bytes"), u(&d, "step_weight_bytes"));
    assert_eq!(sum("activation_bytes"), u(&d, "step_activation_bytes"));
    assert_rel(
        "roofline µs",
        f(&d, "roofline_us"),
        u(&d, "step_weight_bytes") as f64 / gb_per_s / 1e3,
    );

    // With timestamps inside passes every op has a GPU time, and the rows agree with it.
    if report["op_timing"] == "gpu_timestamps" {
        let gpu_us = f(&d, "gpu_us");
        assert_rel(
            "Σ op µs",
            ops.iter().map(|o| f(o, "gpu_us")).sum::<f64>(),
            gpu_us,
        );
        assert_rel(
            "Σ shares",
            ops.iter().map(|o| f(o, "share")).sum::<f64>(),
            1.0,
        );
        for o in ops {
            let us = f(o, "gpu_us");
            assert!(us >= 0.0, "{o}");
            if us > 0.0 {
                let bytes = (u(o, "weight_bytes") + u(o, "activation_bytes")) as f64;
                assert_rel("GB/s", f(o, "gb_per_s"), bytes / us / 1e3);
                let roof = u(o, "weight_bytes") as f64 / gb_per_s / 1e3 / us;
                assert_rel("roofline fraction", f(o, "roofline_fraction"), roof);
            }
        }
    } else {
        assert_eq!(report["op_timing"], "host_wall_per_step");
        assert!(ops.iter().all(|o| o["gpu_us"].is_null()));
    }
    (report, d)
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

/// Bytes of every weight a step reads once: every tensor, the embedding table one row (and
/// once more whole when the output head is tied to it).
fn weight_bytes(gguf: &Gguf) -> u64 {
    let tensor_bytes = |t: &fak::gguf::TensorInfo| t.n_rows() * t.row_bytes();
    let all: u64 = gguf.tensors().iter().map(tensor_bytes).sum();
    let embd = gguf.require_tensor("token_embd.weight").unwrap();
    let tied = gguf.require_tensor("output.weight").is_err();
    all - tensor_bytes(embd) + embd.row_bytes() + if tied { tensor_bytes(embd) } else { 0 }
}

/// KV-cache bytes one attention layer reads (k and v of every cached position), checked to be
/// that many positions of `kv_width` at 2 or 4 bytes; returns (layers, bytes per layer).
fn kv_reads(d: &Value, kv_width: u64) -> (u64, u64) {
    let attention = op(d, "attention");
    let n_layer = u(attention, "count");
    let kv_per_layer = u(attention, "weight_bytes") / n_layer;
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
    // The roofline bytes are the model's weights plus k and v of every cached position in
    // every layer.
    let gguf = Gguf::open(&path).unwrap();
    let kv_width = gguf.require_tensor("blk.0.attn_k.weight").unwrap().n_rows();
    let (n_layer, kv_per_layer) = kv_reads(&d, kv_width);
    assert_eq!(
        u(&d, "step_weight_bytes"),
        weight_bytes(&gguf) + n_layer * kv_per_layer
    );
    assert_names(
        &d,
        // Q4_K_M: q, k, v stacked where v is Q4_K, q and k where it is Q6_K; the norms, RoPE,
        // cache write and SwiGLU folded into the ops around them.
        &[
            "embed",
            "attn_qkv",
            "attn_qk",
            "attn_v",
            "rope_kv",
            "attention",
            "ffn_gate_up",
            "ffn_down",
            "output",
            "argmax",
        ],
    );
}

/// The hybrid model profiles op by op too: its Gated DeltaNet ops are rows of their own, and
/// the roofline bytes are the weights, the attention layers' KV reads and every GDN layer's
/// recurrent state (f32 conv and delta-rule state, read once per step).
#[test]
fn bench_profiles_the_hybrid_model_with_its_recurrent_state() {
    let path = tiny("qwen35");
    let (_, d) = bench(&path);
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
    let (n_attn, kv_per_layer) = kv_reads(&d, (hp.n_head_kv * hp.head_dim) as u64);
    assert_eq!(n_attn + n_gdn, hp.n_layer as u64);
    let conv_dim = (2 * hp.ssm_nk * hp.ssm_dk + hp.ssm_nv * hp.ssm_dv) as u64;
    let conv_state = 4 * (hp.conv_kernel as u64 - 1) * conv_dim;
    let delta_state = 4 * (hp.ssm_nv * hp.ssm_dv * hp.ssm_dk) as u64;
    assert_eq!(
        u(op(&d, "gated_delta"), "weight_bytes"),
        n_gdn * delta_state
    );
    assert_eq!(u(op(&d, "ssm_conv"), "count"), n_gdn);
    assert_eq!(
        u(&d, "step_weight_bytes"),
        weight_bytes(&gguf) + n_attn * kv_per_layer + n_gdn * (conv_state + delta_state)
    );
    assert_names(
        &d,
        &[
            "embed",
            "attn_norm",
            "gdn_qkv",
            "ssm_conv",
            "delta_prep",
            "gated_delta",
            "gated_norm",
            "gdn_out",
            "attn_q",
            "attention",
            "attn_gate",
            "ffn_down",
            "output",
            "argmax",
        ],
    );
}
