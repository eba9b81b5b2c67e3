//! `harness synth`: its files are what llama.cpp's converter (and llama-quantize, for Q4_K_M)
//! would write — keys, tensor names, shapes, types and order — with the real Qwen3 tokenizer and
//! seeded weights of the planned scales; llama.cpp loads and runs every one; gguf-py reads them;
//! and the Hugging Face export holds the same weights and a tokenizer that agrees with
//! llama.cpp's on the GGUF.

use fak::gguf::{Gguf, TensorInfo};
use fak::quant::GgmlType;
use fak_tests::harness::harness;
use fak_tests::peer::{
    check, llama_cli_generates, llama_quantize_plan, llama_tokenize, names_and_types, tensor_table,
};
use fak_tests::synth_files::{
    QUANTS, SEED, SynthFiles, Tokenizer, assert_converter_tensors,
    assert_tiny_tensors_fit_one_binding, for_each_tiny_metadata,
};
use fak_tests::{fixture, python};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const N_VOCAB: u64 = 151_936;

fn files() -> SynthFiles {
    SynthFiles::new(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("synth"),
        "qwen3",
    )
}

fn tiny(quant: &str) -> PathBuf {
    files().tiny(quant)
}

/// A Qwen3-0.6B-shaped Q4_K_M file of random blocks.
fn fast_random_0_6b() -> PathBuf {
    files().fast_random("qwen3-0.6b")
}

/// The qwen3 tensors llama.cpp's loader asks for (`llm_build_qwen3` and its tensor list), with
/// GGUF shapes, for the tiny preset (d 64, 4 layers, q 4×64, kv 2×64, ffn 256, untied).
fn tiny_expected_tensors() -> HashMap<String, Vec<u64>> {
    let mut t = HashMap::from([
        ("token_embd.weight".to_string(), vec![64, N_VOCAB]),
        ("output.weight".to_string(), vec![64, N_VOCAB]),
        ("output_norm.weight".to_string(), vec![64]),
    ]);
    for l in 0..4 {
        for (name, shape) in [
            ("attn_norm", vec![64]),
            ("attn_q", vec![64, 256]),
            ("attn_k", vec![64, 128]),
            ("attn_v", vec![64, 128]),
            ("attn_q_norm", vec![64]),
            ("attn_k_norm", vec![64]),
            ("attn_output", vec![256, 64]),
            ("ffn_norm", vec![64]),
            ("ffn_gate", vec![64, 256]),
            ("ffn_up", vec![64, 256]),
            ("ffn_down", vec![256, 64]),
        ] {
            t.insert(format!("blk.{l}.{name}.weight"), shape);
        }
    }
    t
}

/// The keys llama.cpp's converter writes for a Qwen3 checkpoint, in its order.
const QWEN3_KEYS: [&str; 26] = [
    "general.architecture",
    "general.type",
    "general.name",
    "general.size_label",
    "qwen3.block_count",
    "qwen3.context_length",
    "qwen3.embedding_length",
    "qwen3.feed_forward_length",
    "qwen3.attention.head_count",
    "qwen3.attention.head_count_kv",
    "qwen3.rope.freq_base",
    "qwen3.attention.layer_norm_rms_epsilon",
    "qwen3.attention.key_length",
    "qwen3.attention.value_length",
    "general.file_type",
    "general.quantization_version",
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.chat_template",
];

#[test]
fn metadata_has_the_converters_qwen3_keys_and_values() {
    let tokenizer = Tokenizer {
        vocab: "vocab/ggml-vocab-qwen2.gguf",
        template: "templates/Qwen-Qwen3-0.6B.jinja",
        n_vocab: N_VOCAB,
        bos: 151_643,
        eos: 151_645,
        padding: 151_643,
    };
    for_each_tiny_metadata(&files(), &QWEN3_KEYS, |_, m| {
        assert_eq!(m.u32("general.quantization_version").unwrap(), 2);
        for (key, value) in [
            ("block_count", 4),
            ("context_length", 40_960),
            ("embedding_length", 64),
            ("feed_forward_length", 256),
            ("attention.head_count", 4),
            ("attention.head_count_kv", 2),
            ("attention.key_length", 64),
            ("attention.value_length", 64),
        ] {
            assert_eq!(m.u32(&format!("qwen3.{key}")).unwrap(), value, "{key}");
        }
        assert_eq!(m.f32("qwen3.rope.freq_base").unwrap(), 1e6);
        assert_eq!(
            m.f32("qwen3.attention.layer_norm_rms_epsilon").unwrap(),
            1e-6
        );
        assert_eq!(m.str("tokenizer.ggml.model").unwrap(), "gpt2");
        assert_eq!(m.str("tokenizer.ggml.pre").unwrap(), "qwen2");
        assert!(!m.bool("tokenizer.ggml.add_bos_token").unwrap());
        tokenizer.assert_in(m);
    });
}

#[test]
fn added_tokens_are_qwen3s_with_the_converters_token_types() {
    let g = Gguf::open(tiny("f16")).unwrap();
    let m = g.metadata();
    let tokens = m.str_array("tokenizer.ggml.tokens").unwrap();
    let types = m.int_array("tokenizer.ggml.token_type").unwrap();
    // Ids and texts from Qwen3's tokenizer_config.json. CONTROL (3) for special tokens and for
    // `<|…|>` ones, USER_DEFINED (4) for the rest, UNUSED (5) for the converter's padding.
    for (id, text, ty) in [
        (151_643, "<|endoftext|>", 3),
        (151_644, "<|im_start|>", 3),
        (151_645, "<|im_end|>", 3),
        (151_656, "<|video_pad|>", 3),
        (151_657, "<tool_call>", 4),
        (151_659, "<|fim_prefix|>", 3),
        (151_664, "<|file_sep|>", 3),
        (151_667, "<think>", 4),
        (151_668, "</think>", 4),
        (151_669, "[PAD151669]", 5),
        (151_935, "[PAD151935]", 5),
    ] {
        assert_eq!((tokens[id].as_str(), types[id]), (text, ty), "token {id}");
    }
    assert!(
        types[151_669..].iter().all(|&t| t == 5),
        "padding is UNUSED"
    );
}

#[test]
fn converter_outputs_have_llama_cpp_tensor_names_shapes_and_types() {
    // The converter keeps 1-D tensors (the norms) F32 whatever the outtype.
    assert_converter_tensors(&files(), &tiny_expected_tensors(), |_, shape| {
        shape.len() == 1
    });
}

#[test]
fn q4_k_m_types_and_order_are_llama_quantizes() {
    // Tiny: shape fallbacks on every d = 64 row (Q5_0, Q8_0), K-quants on rows of 256.
    let ours = Gguf::open(tiny("q4_k_m")).unwrap();
    assert_eq!(names_and_types(&ours), llama_quantize_plan(&tiny("f32")));

    // Qwen3-0.6B shape: tied embedding → Q6_K, use_more_bits over 28 layers.
    let fast = Gguf::open(fast_random_0_6b()).unwrap();
    assert_eq!(
        names_and_types(&fast),
        llama_quantize_plan(&fast_random_0_6b())
    );
}

#[test]
fn q4_k_m_recipe_picks_the_documented_types_for_tiny() {
    // model-spec.md §2.1 applied by hand to the tiny shapes: d-row tensors (64 wide) fall back
    // (Q4_K→Q5_0, Q6_K and the untied output's Q6_K→Q8_0); use_more_bits(i, 4) is true for
    // layers 2 and 3 (i ≥ 7·4/8), so their attn_v and ffn_down get the Q6_K branch.
    let g = Gguf::open(tiny("q4_k_m")).unwrap();
    for (name, _, ty) in tensor_table(&g) {
        let layer: Option<u32> = name
            .strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|n| n.parse().ok());
        let more_bits = layer.is_some_and(|l| l >= 2);
        let want = match name.as_str() {
            "token_embd.weight" => GgmlType::Q5_0,
            "output.weight" => GgmlType::Q8_0,
            _ if name.ends_with("norm.weight") => GgmlType::F32,
            _ if name.ends_with("attn_v.weight") && more_bits => GgmlType::Q8_0,
            _ if name.ends_with("ffn_down.weight") && more_bits => GgmlType::Q6_K,
            _ if name.ends_with("ffn_down.weight") || name.ends_with("attn_output.weight") => {
                GgmlType::Q4_K
            }
            _ => GgmlType::Q5_0,
        };
        assert_eq!(ty, want, "{name}");
    }
}

#[test]
fn every_tiny_tensor_fits_one_lavapipe_binding() {
    assert_tiny_tensors_fit_one_binding(&files());
}

/// gguf-py's view of a file (tests/scripts/gguf_dump.py).
fn gguf_py_dump(path: &Path) -> Json {
    let out = Command::new(python())
        .arg(fixture("../scripts/gguf_dump.py"))
        .arg(path)
        .output()
        .unwrap();
    let out = check(out, "gguf-py (pip install gguf)");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn gguf_py_reads_every_file_as_fak_does() {
    // gguf-py takes ~10 s to parse a 151 936-token vocabulary, so three files: together they
    // hold every tensor type synth writes (F32, F16, Q8_0, Q5_0, Q4_K, Q6_K) and a real shape.
    for path in [tiny("f16"), tiny("q4_k_m"), fast_random_0_6b()] {
        let g = Gguf::open(&path).unwrap();
        let py = gguf_py_dump(&path);
        let py_tensors = py["tensors"].as_array().unwrap();
        assert_eq!(py_tensors.len(), g.tensors().len());
        for (p, t) in py_tensors.iter().zip(g.tensors()) {
            let TensorInfo {
                name,
                shape,
                ty,
                file_offset,
                n_bytes,
                ..
            } = t;
            assert_eq!(p["name"], name.as_str());
            assert_eq!(p["shape"], serde_json::json!(shape), "{name}");
            assert_eq!(p["type"], ty.id(), "{name}");
            assert_eq!(p["data_offset"], *file_offset, "{name}");
            assert_eq!(p["n_bytes"], *n_bytes, "{name}");
        }
        let keys: Vec<&str> = py["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(keys, QWEN3_KEYS, "{}", path.display());
    }
}

fn f32_values<'a>(g: &'a Gguf, name: &str) -> &'a [f32] {
    let t = g.require_tensor(name).unwrap();
    assert_eq!(t.ty, GgmlType::F32, "{name}");
    bytemuck::cast_slice(g.tensor_data(t))
}

fn mean_std(v: &[f32]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let var = v
        .iter()
        .map(|&x| (f64::from(x) - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean, var.sqrt())
}

#[test]
fn weights_have_the_planned_scales() {
    let g = Gguf::open(tiny("f32")).unwrap();
    let mut norm_gains = Vec::new();
    for t in g.tensors() {
        let v = f32_values(&g, &t.name);
        assert!(v.iter().all(|x| x.is_finite()), "{}", t.name);
        if t.shape.len() == 1 {
            norm_gains.extend_from_slice(v);
            continue;
        }
        // Projections N(0, 1/fan_in), fan_in = ne0; embeddings 1/√d too. With ≥ 8192 samples the
        // sample std is within ~1.5 % (1/√(2n)) of the true one; 5 % leaves margin.
        let (mean, std) = mean_std(v);
        let want = 1.0 / (t.shape[0] as f64).sqrt();
        assert!(
            (std / want - 1.0).abs() < 0.05,
            "{}: std {std}, want {want}",
            t.name
        );
        assert!(mean.abs() < 0.05 * want, "{}: mean {mean}", t.name);
    }
    // Gains 1 + N(0, 0.1²): 1 088 samples put the sample mean within 0.003 and std within 2 %.
    let (mean, std) = mean_std(&norm_gains);
    assert!((mean - 1.0).abs() < 0.02, "norm gain mean {mean}");
    assert!((std - 0.1).abs() < 0.01, "norm gain std {std}");
}

fn rel_rms_error(got: &[f32], want: &[f32]) -> f64 {
    let sq = |it: &mut dyn Iterator<Item = f64>| it.map(|x| x * x).sum::<f64>();
    let err = sq(&mut got
        .iter()
        .zip(want)
        .map(|(&g, &w)| f64::from(g) - f64::from(w)));
    let norm = sq(&mut want.iter().map(|&w| f64::from(w)));
    (err / norm).sqrt()
}

#[test]
fn quantized_files_hold_the_f32_files_weights() {
    let floats = Gguf::open(tiny("f32")).unwrap();
    for quant in ["f16", "q8_0", "q4_k_m"] {
        let g = Gguf::open(tiny(quant)).unwrap();
        for t in g.tensors() {
            let want = f32_values(&floats, &t.name);
            let mut got = vec![f32::NAN; want.len()];
            fak::quant::dequantize_into(t.ty, g.tensor_data(t), &mut got).unwrap();
            // Relative RMS error a uniform quantizer of the format's step leaves on Gaussian
            // rows (step/√12 against σ, step from a block maximum of ≈2.5σ), with margin:
            // F16 2^-11 relative rounding; Q8_0 amax/127; Q6_K amax/32 per 16; Q5_0 amax/16;
            // Q4_K (max−min)/15 per 32 with 6-bit scales. NaN fails every comparison.
            let bound = match t.ty {
                GgmlType::F32 => 0.0,
                GgmlType::F16 => 1e-3,
                GgmlType::Q8_0 => 0.01,
                GgmlType::Q6_K => 0.03,
                GgmlType::Q5_0 => 0.06,
                GgmlType::Q4_K => 0.10,
                ty => panic!("{quant} {}: unexpected {ty}", t.name),
            };
            let err = rel_rms_error(&got, want);
            assert!(
                err <= bound,
                "{quant} {} ({}): relative RMS error {err}",
                t.name,
                t.ty
            );
        }
    }
}

#[test]
fn a_seed_gives_the_same_file_whatever_the_thread_count() {
    // Q4_K_M: both the float generation and the quantizer run in parallel.
    let write = |name: &str, seed: &str, threads: &str| {
        let path = files().scratch(name);
        let out = harness()
            .args([
                "synth", "--arch", "qwen3", "--preset", "tiny", "--quant", "f16",
            ])
            .args(["--seed", seed, "--out"])
            .arg(&path)
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .unwrap();
        check(out, "harness synth");
        path
    };
    let one = std::fs::read(write("seed1-threads1.gguf", "1", "1")).unwrap();
    let two = std::fs::read(write("seed1-threads2.gguf", "1", "2")).unwrap();
    assert!(
        one == two,
        "seed 1 on 1 and 2 threads wrote different files"
    );

    let other = Gguf::open(write("seed2.gguf", "2", "2")).unwrap();
    let same = Gguf::open(files().scratch("seed1-threads2.gguf")).unwrap();
    for (a, b) in other.tensors().iter().zip(same.tensors()) {
        assert_eq!((&a.name, a.offset), (&b.name, b.offset));
        assert_ne!(
            other.tensor_data(a),
            same.tensor_data(b),
            "{} ignores the seed",
            a.name
        );
    }
}

#[test]
fn llama_cpp_loads_and_runs_every_file() {
    for (quant, _) in QUANTS {
        llama_cli_generates(&tiny(quant));
    }
    llama_cli_generates(&fast_random_0_6b());
}

#[test]
fn fast_random_keeps_the_quantized_layout() {
    let fast = |name: &str| Gguf::open(files().fast_random_seeded("tiny", SEED, name)).unwrap();
    let quantized = Gguf::open(tiny("q4_k_m")).unwrap();
    let random = fast("tiny-q4_k_m-fast.gguf");
    assert_eq!(
        random.metadata().entries(),
        quantized.metadata().entries(),
        "same keys and values"
    );
    assert_eq!(
        random.tensors(),
        quantized.tensors(),
        "same names, types, shapes, offsets"
    );

    let again = fast("tiny-q4_k_m-fast-again.gguf");
    for t in random.tensors() {
        assert_eq!(
            random.tensor_data(t),
            again.tensor_data(again.require_tensor(&t.name).unwrap())
        );
        if t.ty != GgmlType::F32 {
            let q = quantized.tensor_data(quantized.require_tensor(&t.name).unwrap());
            assert_ne!(random.tensor_data(t), q, "{} is not random blocks", t.name);
            // Random blocks still decode to the planned N(0, 1/fan_in) scale: ≥ 8192 values
            // put the sample std within ~2 % of the generator's; 10 % allows for its shape.
            let mut values = vec![f32::NAN; t.n_elements() as usize];
            fak::quant::dequantize_into(t.ty, random.tensor_data(t), &mut values).unwrap();
            let (mean, std) = mean_std(&values);
            let want = 1.0 / (t.shape[0] as f64).sqrt();
            assert!(
                (std / want - 1.0).abs() < 0.1,
                "{}: std {std}, want {want}",
                t.name
            );
            assert!(mean.abs() < 0.1 * want, "{}: mean {mean}", t.name);
        }
    }
}

/// The Hugging Face (and MLX) name of a tiny qwen3 GGUF tensor.
fn qwen3_hf_name(gguf: &str) -> String {
    let top = [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output.weight", "lm_head.weight"),
        ("output_norm.weight", "model.norm.weight"),
    ];
    if let Some((_, hf)) = top.iter().find(|(g, _)| *g == gguf) {
        return hf.to_string();
    }
    let rest = gguf.strip_prefix("blk.").expect("a block tensor");
    let (layer, name) = rest.split_once('.').unwrap();
    let hf = match name {
        "attn_norm.weight" => "input_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "attn_q_norm.weight" => "self_attn.q_norm.weight",
        "attn_k_norm.weight" => "self_attn.k_norm.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        other => panic!("unexpected tensor {gguf} ({other})"),
    };
    format!("model.layers.{layer}.{hf}")
}

/// `--fast-random` with `--mlx-4bit` and `--f16-reference` (what the H200 three-arm run uses for
/// the 8B): the GGUF is the same file as without them; the f16 reference has the converter's
/// f16 layout and holds the GGUF's values (random blocks dequantized) to f16 rounding; MLX's
/// 4-bit model dequantizes to the GGUF's values within its own quantization step.
#[test]
fn fast_random_mlx_and_f16_reference_hold_the_gguf_weights() {
    let dir = files().scratch("fast-exports");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (mlx, reference) = (dir.join("mlx"), dir.join("reference-f16.gguf"));
    let out = harness()
        .args([
            "synth", "--arch", "qwen3", "--preset", "tiny", "--quant", "q4_k_m",
        ])
        .args(["--seed", SEED, "--fast-random", "--out"])
        .arg(dir.join("model.gguf"))
        .arg("--mlx-4bit")
        .arg(&mlx)
        .arg("--f16-reference")
        .arg(&reference)
        .output()
        .unwrap();
    check(
        out,
        "harness synth --fast-random --mlx-4bit --f16-reference",
    );
    let plain = std::fs::read(files().fast_random_tiny()).unwrap();
    assert!(
        std::fs::read(dir.join("model.gguf")).unwrap() == plain,
        "the exports changed the GGUF"
    );
    let gguf = Gguf::open(dir.join("model.gguf")).unwrap();
    let values = |g: &Gguf, t: &TensorInfo| {
        let mut v = vec![f32::NAN; t.n_elements() as usize];
        fak::quant::dequantize_into(t.ty, g.tensor_data(t), &mut v).unwrap();
        v
    };

    // The reference: the converter's f16 file (tensor table and keys but the file type), the
    // GGUF's values rounded to f16 (F32 tensors exactly).
    let reference = Gguf::open(&reference).unwrap();
    let f16 = Gguf::open(tiny("f16")).unwrap();
    assert_eq!(
        reference.tensors(),
        f16.tensors(),
        "the converter's f16 layout"
    );
    assert_eq!(reference.metadata().u32("general.file_type").unwrap(), 1);
    for t in reference.tensors() {
        let want = values(&gguf, gguf.require_tensor(&t.name).unwrap());
        let got = values(&reference, t);
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            let bound = if t.ty == GgmlType::F32 {
                0.0
            } else {
                w.abs() / 2048.0 + 6e-8
            };
            assert!((g - w).abs() <= bound, "{} [{i}]: {g} vs {w}", t.name);
        }
    }

    // MLX: every matrix as affine 4-bit (group 64) whose levels come back within one step of
    // the GGUF's value; the rest (norm gains) as the GGUF's F32 values exactly.
    let bytes = std::fs::read(mlx.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let f32s = |name: &str| -> Vec<f32> {
        let view = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
        bytemuck::pod_collect_to_vec(view.data())
    };
    let mut expected_tensors = 0;
    for t in gguf.tensors() {
        let hf = qwen3_hf_name(&t.name);
        let want = values(&gguf, t);
        if t.shape.len() == 1 {
            expected_tensors += 1;
            assert!(f32s(&hf) == want, "{hf} differs from {}", t.name);
            continue;
        }
        expected_tensors += 3;
        let base = hf.strip_suffix(".weight").unwrap();
        let view = st.tensor(&hf).unwrap();
        assert_eq!(view.dtype(), safetensors::Dtype::U32, "{hf}");
        let row_len = t.shape[0] as usize;
        assert_eq!(view.shape(), [t.shape[1] as usize, row_len / 8], "{hf}");
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(view.data());
        let (scales, biases) = (
            f32s(&format!("{base}.scales")),
            f32s(&format!("{base}.biases")),
        );
        assert_eq!(scales.len(), want.len() / 64, "{base}.scales");
        let mut back = vec![0f32; want.len()];
        for (i, (b, &w)) in back.iter_mut().zip(&want).enumerate() {
            let level = (words[i / 8] >> (4 * (i % 8))) & 15;
            let (scale, bias) = (scales[i / 64], biases[i / 64]);
            *b = bias + scale * level as f32;
            assert!(
                (*b - w).abs() <= scale.abs() * 1.001 + 1e-6,
                "{hf} [{i}]: {b} vs the GGUF's {w} (step {scale})"
            );
        }
        // Not merely within a (possibly huge) step: 4-bit rounding of Q4_K/Q6_K values leaves
        // about the 4-bit error of Gaussian rows (step/√12 against σ).
        let err = rel_rms_error(&back, &want);
        assert!(err < 0.12, "{hf}: relative RMS error {err}");
    }
    assert_eq!(st.len(), expected_tensors, "tensors in the MLX file");
}

#[test]
fn hf_export_loads_in_mlx_lm_with_the_same_weights_and_tokenizer() {
    let (gguf_path, hf) = files().tiny_f32_with_hf();
    let texts = [
        "Hello world!",
        "你好，世界 — naïve café, 12345 digits",
        "<|im_start|>user\nhi <think>x</think><|im_end|>\n",
        "  leading spaces\tand\ttabs\n\n\nnewlines   ",
        "fn main() { println!(\"{}\", 1 + 2); } // code's fine",
    ];
    let texts_path = files().scratch("texts.json");
    std::fs::write(&texts_path, serde_json::to_string(&texts).unwrap()).unwrap();
    let out = Command::new(python())
        .arg(fixture("../scripts/hf_export_check.py"))
        .args([&hf, &gguf_path, &texts_path])
        .output()
        .unwrap();
    let out = check(out, "mlx_lm load (pip install 'mlx[cpu]' mlx-lm)");
    let r: Json = serde_json::from_slice(&out.stdout).unwrap();

    let c = &r["config"];
    for (key, value) in [
        ("hidden_size", 64),
        ("num_hidden_layers", 4),
        ("num_attention_heads", 4),
        ("num_key_value_heads", 2),
        ("head_dim", 64),
        ("intermediate_size", 256),
        ("vocab_size", N_VOCAB),
    ] {
        assert_eq!(c[key], value, "{key}");
    }
    assert_eq!(c["tie_word_embeddings"], false);
    assert_eq!(c["rope_theta"].as_f64(), Some(1e6));

    let tensors = r["tensors"].as_array().unwrap();
    assert_eq!(
        r["n_params"].as_u64(),
        Some(tensors.len() as u64),
        "no extra HF tensors"
    );
    for t in tensors {
        let mut reversed: Vec<Json> = t["gguf_shape"].as_array().unwrap().clone();
        reversed.reverse();
        assert_eq!(
            t["hf_shape"],
            Json::Array(reversed),
            "{} → {}",
            t["gguf"],
            t["hf"]
        );
        // The export holds the very floats the f32 GGUF holds: no tolerance.
        assert_eq!(t["max_abs_diff"].as_f64(), Some(0.0), "{}", t["gguf"]);
    }
    assert_eq!(r["logits_shape"][2], N_VOCAB);
    assert_eq!(r["logits_finite"], true);
    assert_eq!(r["eos_token"], "<|im_end|>");
    assert_eq!(r["pad_token"], "<|endoftext|>");

    for (text, got) in texts.iter().zip(r["texts"].as_array().unwrap()) {
        let llama = llama_tokenize(&gguf_path, text);
        assert_eq!(
            got["ids"],
            serde_json::json!(llama),
            "transformers vs llama.cpp on {text:?}"
        );
        assert_eq!(
            got["mlx_ids"], got["ids"],
            "mlx_lm vs transformers on {text:?}"
        );
        assert_eq!(got["decoded"], *text, "decode(encode(text))");
    }
}

#[test]
fn bad_arguments_fail_with_one_clear_line() {
    let fail = |args: &[&str], says: &str| {
        let out = harness().arg("synth").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    };
    let out = files().scratch("never-written.gguf");
    let out = out.to_str().unwrap();
    let tiny = ["--arch", "qwen3", "--quant", "f16", "--preset"];
    fail(
        &[&tiny[..], &["huge", "--out", out]].concat(),
        "unknown qwen3 preset \"huge\"",
    );
    fail(
        &[
            &tiny[..],
            &["tiny", "--out", out, "--fast-random", "--hf-dir", out],
        ]
        .concat(),
        "cannot be used with",
    );
    fail(
        &[&tiny[..], &["tiny", "--out", "/nonexistent-dir/x.gguf"]].concat(),
        "error: writing the GGUF: /nonexistent-dir/x.gguf: No such file",
    );
    assert!(!Path::new(out).exists());
}
