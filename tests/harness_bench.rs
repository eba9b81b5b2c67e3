//! `harness bench` on a tiny qwen3 on whatever adapter is present: the report's structure and
//! its internal consistency (bytes against the model file, sums, rates against times). Speed
//! numbers themselves are never asserted.

use fak::gguf::Gguf;
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

#[test]
fn bench_reports_a_consistent_per_op_profile_against_the_model_bytes() {
    let args = [
        "--arch", "qwen3", "--preset", "tiny", "--quant", "q4_k_m", "--seed", "5",
    ];
    let path = synth_model(&scratch(), "tiny-q4_k_m-5.gguf", &args);
    let (depth, n_out) = (5u64, 3u64);
    let out = harness()
        .args(["bench", "--model"])
        .arg(&path)
        .args(["--depths", "5", "--n-out", "3", "--profile-steps", "2"])
        .args(["--probe-mib", "8", "--json"])
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
    let d = &depths[0];
    assert_eq!(u(d, "depth"), depth);
    assert_eq!(u(d, "profiled_kv_len"), depth + n_out);
    assert!(f(d, "decode_tokens_per_s") > 0.0);
    assert_rel(
        "µs per token",
        f(d, "decode_us_per_token"),
        1e6 / f(d, "decode_tokens_per_s"),
    );
    // Greedy decode is GPU-resident: one submit per step, whatever the adapter.
    assert_rel("submits per token", f(d, "submits_per_token"), 1.0);
    assert!(f(d, "encode_us_per_token") > 0.0);

    let ops = d["ops"].as_array().expect("ops");
    let sum = |key: &str| ops.iter().map(|o| u(o, key)).sum::<u64>();
    assert_eq!(sum("dispatches"), u(d, "dispatches_per_step"));
    assert_eq!(sum("count"), u(d, "ops_per_step"));
    assert_eq!(sum("weight_bytes"), u(d, "step_weight_bytes"));
    assert_eq!(sum("activation_bytes"), u(d, "step_activation_bytes"));
    assert_rel(
        "roofline µs",
        f(d, "roofline_us"),
        u(d, "step_weight_bytes") as f64 / gb_per_s / 1e3,
    );

    // The roofline bytes are the model's: every tensor once, the embedding table one row, plus
    // k and v of every cached position in every layer.
    let gguf = Gguf::open(&path).unwrap();
    let tensor_bytes = |t: &fak::gguf::TensorInfo| t.n_rows() * t.row_bytes();
    let all: u64 = gguf.tensors().iter().map(tensor_bytes).sum();
    let embd = gguf.require_tensor("token_embd.weight").unwrap();
    let tied = gguf.require_tensor("output.weight").is_err();
    let weights =
        all - tensor_bytes(embd) + embd.row_bytes() + if tied { tensor_bytes(embd) } else { 0 };
    let attention = ops
        .iter()
        .find(|o| o["name"] == "attention")
        .expect("an attention op");
    let n_layer = u(attention, "count");
    let kv_per_layer = u(attention, "weight_bytes") / n_layer;
    let k = gguf.require_tensor("blk.0.attn_k.weight").unwrap();
    let kv_width = k.n_rows();
    let per_element = kv_per_layer / (2 * (depth + n_out) * kv_width);
    assert!(
        [2, 4].contains(&per_element)
            && kv_per_layer == 2 * (depth + n_out) * kv_width * per_element,
        "attention reads {kv_per_layer} B per layer at kv {} × width {kv_width}",
        depth + n_out
    );
    assert_eq!(u(d, "step_weight_bytes"), weights + n_layer * kv_per_layer);

    // With timestamps inside passes every op has a GPU time, and the rows agree with it.
    if report["op_timing"] == "gpu_timestamps" {
        let gpu_us = f(d, "gpu_us");
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
    let names: Vec<&str> = ops.iter().filter_map(|o| o["name"].as_str()).collect();
    for want in [
        "embed",
        "attn_q",
        "attention",
        "ffn_down",
        "output",
        "argmax",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
}
