//! `harness synth --arch qwen35`: its files are what llama.cpp's converter (0c1e570,
//! `Qwen3_5TextModel`) and `llama-quantize` would write for a Qwen3.5 checkpoint — keys, tensor
//! names, shapes, types and order. llama.cpp runs tiny (every type) and mid (the 27B's heads);
//! the 9B and 27B layouts match its loader's shapes and llama-quantize's plan. The Hugging Face
//! export holds the checkpoint the converter would have started from (its transforms undone:
//! norm gains −1, A_log = ln(−ssm_a), conv1d [C, 1, K], value heads grouped).

use fak::gguf::Gguf;
use fak::quant::GgmlType;
use fak_tests::harness::harness;
use fak_tests::peer::{
    check, llama_cli_generates, llama_quantize_plan, llama_tokenize, names_and_types, tensor_table,
};
use fak_tests::synth_files::{
    QUANTS, SynthFiles, Tokenizer, assert_converter_tensors, assert_tiny_tensors_fit_one_binding,
    for_each_tiny_metadata,
};
use fak_tests::{fixture, python};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

const N_VOCAB: u64 = 248_320;

fn files() -> SynthFiles {
    SynthFiles::new(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("synth_qwen35"),
        "qwen35",
    )
}

fn tiny(quant: &str) -> PathBuf {
    files().tiny(quant)
}

/// A preset's Q4_K_M layout: metadata and tensor table, the data a sparse hole.
fn layout(preset: &str) -> PathBuf {
    let args = ["--preset", preset, "--quant", "q4_k_m", "--layout-only"];
    files().synth(&format!("{preset}-q4_k_m-layout.gguf"), &args)
}

/// A preset's dimensions, stated here independently of synth (the real ones from the
/// published Qwen3.5 configs).
struct Dims {
    d: u64,
    layers: u64,
    d_ff: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    k_heads: u64,
    v_heads: u64,
    ssm_head: u64,
    conv: u64,
}

const TINY: Dims = Dims {
    d: 64,
    layers: 8,
    d_ff: 256,
    heads: 4,
    kv_heads: 2,
    head_dim: 64,
    k_heads: 2,
    v_heads: 6,
    ssm_head: 32,
    conv: 4,
};

const PRESETS: [(&str, Dims); 3] = [
    // The 27B's heads at d 1024, 8 layers.
    (
        "mid",
        Dims {
            d: 1024,
            layers: 8,
            d_ff: 3072,
            heads: 24,
            kv_heads: 4,
            head_dim: 256,
            k_heads: 16,
            v_heads: 48,
            ssm_head: 128,
            conv: 4,
        },
    ),
    // Qwen/Qwen3.5-9B.
    (
        "qwen35-9b",
        Dims {
            d: 4096,
            layers: 32,
            d_ff: 12288,
            heads: 16,
            kv_heads: 4,
            head_dim: 256,
            k_heads: 16,
            v_heads: 32,
            ssm_head: 128,
            conv: 4,
        },
    ),
    // Qwen/Qwen3.5-27B: 48 Gated DeltaNet + 16 gated attention layers.
    (
        "qwen35-27b",
        Dims {
            d: 5120,
            layers: 64,
            d_ff: 17408,
            heads: 24,
            kv_heads: 4,
            head_dim: 256,
            k_heads: 16,
            v_heads: 48,
            ssm_head: 128,
            conv: 4,
        },
    ),
];

/// The tensors llama.cpp's qwen35 loader asks for (`llama_model_qwen35::load_arch_tensors`)
/// with their GGUF shapes: every fourth layer attention, the rest Gated DeltaNet.
fn expected_tensors(dims: &Dims) -> HashMap<String, Vec<u64>> {
    let (d, ff) = (dims.d, dims.d_ff);
    let key_dim = dims.k_heads * dims.ssm_head;
    let value_dim = dims.v_heads * dims.ssm_head;
    let q_dim = dims.heads * dims.head_dim;
    let kv_dim = dims.kv_heads * dims.head_dim;
    let mut t = HashMap::from([
        ("token_embd.weight".to_string(), vec![d, N_VOCAB]),
        ("output.weight".to_string(), vec![d, N_VOCAB]),
        ("output_norm.weight".to_string(), vec![d]),
    ]);
    for l in 0..dims.layers {
        let mut add = |name: &str, shape: Vec<u64>| {
            t.insert(format!("blk.{l}.{name}"), shape);
        };
        add("attn_norm.weight", vec![d]);
        add("post_attention_norm.weight", vec![d]);
        add("ffn_gate.weight", vec![d, ff]);
        add("ffn_up.weight", vec![d, ff]);
        add("ffn_down.weight", vec![ff, d]);
        if (l + 1) % 4 == 0 {
            add("attn_q.weight", vec![d, 2 * q_dim]);
            add("attn_k.weight", vec![d, kv_dim]);
            add("attn_v.weight", vec![d, kv_dim]);
            add("attn_output.weight", vec![q_dim, d]);
            add("attn_q_norm.weight", vec![dims.head_dim]);
            add("attn_k_norm.weight", vec![dims.head_dim]);
        } else {
            add("attn_qkv.weight", vec![d, 2 * key_dim + value_dim]);
            add("attn_gate.weight", vec![d, value_dim]);
            add(
                "ssm_conv1d.weight",
                vec![dims.conv, 2 * key_dim + value_dim],
            );
            add("ssm_dt.bias", vec![dims.v_heads]);
            add("ssm_a", vec![dims.v_heads]);
            add("ssm_beta.weight", vec![d, dims.v_heads]);
            add("ssm_alpha.weight", vec![d, dims.v_heads]);
            add("ssm_norm.weight", vec![dims.ssm_head]);
            add("ssm_out.weight", vec![value_dim, d]);
        }
    }
    t
}

/// The keys llama.cpp's converter writes for a Qwen3.5 checkpoint without MTP layers and
/// without `layer_types`, in its order (conversion/base.py `set_gguf_parameters`, then
/// conversion/qwen.py `Qwen3NextModel.set_gguf_parameters`).
const QWEN35_KEYS: [&str; 34] = [
    "general.architecture",
    "general.type",
    "general.name",
    "general.size_label",
    "qwen35.block_count",
    "qwen35.context_length",
    "qwen35.embedding_length",
    "qwen35.feed_forward_length",
    "qwen35.attention.head_count",
    "qwen35.attention.head_count_kv",
    "qwen35.rope.dimension_sections",
    "qwen35.rope.freq_base",
    "qwen35.attention.layer_norm_rms_epsilon",
    "qwen35.attention.key_length",
    "qwen35.attention.value_length",
    "general.file_type",
    "qwen35.ssm.conv_kernel",
    "qwen35.ssm.state_size",
    "qwen35.ssm.group_count",
    "qwen35.ssm.time_step_rank",
    "qwen35.ssm.inner_size",
    "qwen35.full_attention_interval",
    "qwen35.rope.dimension_count",
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
fn metadata_has_the_converters_qwen35_keys_and_values() {
    let tokenizer = Tokenizer {
        vocab: "vocab/ggml-vocab-qwen35.gguf",
        template: "templates/Qwen3.5-4B.jinja",
        n_vocab: N_VOCAB,
        bos: 248_044,
        eos: 248_046,
        padding: 248_044,
    };
    for_each_tiny_metadata(&files(), &QWEN35_KEYS, |_, m| {
        for (key, value) in [
            ("block_count", TINY.layers),
            ("context_length", 262_144),
            ("embedding_length", TINY.d),
            ("feed_forward_length", TINY.d_ff),
            ("attention.head_count", TINY.heads),
            ("attention.head_count_kv", TINY.kv_heads),
            ("attention.key_length", TINY.head_dim),
            ("attention.value_length", TINY.head_dim),
            ("ssm.conv_kernel", TINY.conv),
            ("ssm.state_size", TINY.ssm_head),
            ("ssm.group_count", TINY.k_heads),
            ("ssm.time_step_rank", TINY.v_heads),
            ("ssm.inner_size", TINY.v_heads * TINY.ssm_head),
            ("full_attention_interval", 4),
            // Partial rotary: a quarter of the head.
            ("rope.dimension_count", TINY.head_dim / 4),
        ] {
            assert_eq!(
                u64::from(m.u32(&format!("qwen35.{key}")).unwrap()),
                value,
                "{key}"
            );
        }
        // Interleaved M-RoPE sections covering the rotary half-width (8 pairs).
        assert_eq!(
            m.int_array("qwen35.rope.dimension_sections").unwrap(),
            [3, 3, 2, 0]
        );
        assert_eq!(m.f32("qwen35.rope.freq_base").unwrap(), 1e7);
        assert_eq!(
            m.f32("qwen35.attention.layer_norm_rms_epsilon").unwrap(),
            1e-6
        );
        assert_eq!(m.str("tokenizer.ggml.pre").unwrap(), "qwen35");
        tokenizer.assert_in(m);
        // Qwen3.5's ids for its added tokens; the hole below them is the converter's padding.
        let tokens = m.str_array("tokenizer.ggml.tokens").unwrap();
        let types = m.int_array("tokenizer.ggml.token_type").unwrap();
        for (id, text, ty) in [
            (151_643, "[PAD151643]", 5),
            (248_043, "[PAD248043]", 5),
            (248_044, "<|endoftext|>", 3),
            (248_045, "<|im_start|>", 3),
            (248_046, "<|im_end|>", 3),
            (248_068, "<think>", 4),
            (248_069, "</think>", 4),
            (248_070, "[PAD248070]", 5),
        ] {
            assert_eq!((tokens[id].as_str(), types[id]), (text, ty), "token {id}");
        }
    });
}

#[test]
fn converter_outputs_have_llama_cpp_tensor_names_shapes_and_types() {
    // The converter keeps 1-D tensors (norms, ssm_a, ssm_dt.bias) and the conv F32.
    assert_converter_tensors(&files(), &expected_tensors(&TINY), |name, shape| {
        shape.len() == 1 || name.contains("ssm_conv1d")
    });
}

#[test]
fn q4_k_m_types_and_order_are_llama_quantizes() {
    // Tiny: shape fallbacks on the 64-wide rows, K-quants on rows of 256, ssm tensors kept.
    let ours = Gguf::open(tiny("q4_k_m")).unwrap();
    assert_eq!(names_and_types(&ours), llama_quantize_plan(&tiny("f32")));
    // The real shapes: attn_qkv and attn_v share use_more_bits, ffn_down over 8, 32, 64 layers.
    for (preset, _) in &PRESETS {
        let g = Gguf::open(layout(preset)).unwrap();
        assert_eq!(
            names_and_types(&g),
            llama_quantize_plan(&layout(preset)),
            "{preset}"
        );
    }
}

/// Every preset has the tensors llama.cpp's loader asks for, with its shapes, for the
/// published dimensions (the shapes of the real-size presets are checked here; llama.cpp runs
/// tiny and mid below).
#[test]
fn real_size_presets_have_the_loaders_tensors_and_dims() {
    for (preset, dims) in &PRESETS {
        let g = Gguf::open(layout(preset)).unwrap();
        let expected = expected_tensors(dims);
        assert_eq!(g.tensors().len(), expected.len(), "{preset}");
        for (name, shape, _) in tensor_table(&g) {
            assert_eq!(Some(&shape), expected.get(&name), "{preset} {name}");
        }
        let m = g.metadata();
        for (key, value) in [
            ("block_count", dims.layers),
            ("embedding_length", dims.d),
            ("attention.head_count", dims.heads),
            ("ssm.group_count", dims.k_heads),
            ("ssm.time_step_rank", dims.v_heads),
            ("rope.dimension_count", 64),
        ] {
            let got = m.u32(&format!("qwen35.{key}")).unwrap();
            assert_eq!(u64::from(got), value, "{preset} {key}");
        }
        assert_eq!(
            m.int_array("qwen35.rope.dimension_sections").unwrap(),
            [11, 11, 10, 0],
            "{preset}"
        );
    }
}

#[test]
fn q4_k_m_keeps_the_ssm_tensors_that_llama_quantize_keeps() {
    let g = Gguf::open(layout("qwen35-27b")).unwrap();
    let mut types: HashMap<&str, Vec<GgmlType>> = HashMap::new();
    for t in g.tensors() {
        let kind = t.name.splitn(3, '.').nth(2).unwrap_or(&t.name);
        types.entry(kind).or_default().push(t.ty);
    }
    for kept in [
        "ssm_conv1d.weight",
        "ssm_a",
        "ssm_dt.bias",
        "ssm_norm.weight",
    ] {
        assert!(
            types[kept].iter().all(|&ty| ty == GgmlType::F32),
            "{kept}: {:?}",
            types[kept]
        );
    }
    for quantized in [
        "ssm_beta.weight",
        "ssm_alpha.weight",
        "attn_gate.weight",
        "ssm_out.weight",
    ] {
        assert!(
            types[quantized].iter().all(|&ty| ty == GgmlType::Q4_K),
            "{quantized}: {:?}",
            types[quantized]
        );
    }
    let qkv = &types["attn_qkv.weight"];
    assert_eq!(qkv.len(), 48);
    assert!(qkv.contains(&GgmlType::Q6_K) && qkv.contains(&GgmlType::Q4_K));
    assert_eq!(g.tensors().len(), 3 + 48 * 14 + 16 * 11);
}

#[test]
fn every_tiny_tensor_fits_one_lavapipe_binding() {
    assert_tiny_tensors_fit_one_binding(&files());
}

/// A Q4_K_M file of random blocks with the 27B's heads (d 1024, 8 layers).
fn fast_random_mid() -> PathBuf {
    files().fast_random("mid")
}

/// llama.cpp loads (metadata, every tensor's name and shape) and generates with every tiny
/// file and with the real-head mid model. The real-size presets are not loaded: llama.cpp maps
/// a model with MAP_POPULATE, which would read 5.5 and 16 GB of weights into memory; their
/// layouts are checked against the loader's shapes and llama-quantize's plan above.
#[test]
fn llama_cpp_loads_and_runs_tiny_and_mid() {
    for (quant, _) in QUANTS {
        llama_cli_generates(&tiny(quant));
    }
    llama_cli_generates(&fast_random_mid());
}

/// The Hugging Face export holds what llama.cpp's converter would turn into the f32 GGUF:
/// gguf-py's values equal the converter's transforms (reimplemented in numpy in the script)
/// of the checkpoint's, exactly except for `ssm_a` = −exp(A_log) (one rounding of exp), and
/// mlx_lm loads it; its tokenizer agrees with llama.cpp's on the GGUF.
#[test]
fn hf_export_is_the_checkpoint_the_converter_started_from() {
    let (gguf_path, hf) = files().tiny_f32_with_hf();
    let texts = [
        "Hello world!",
        "नमस्ते दुनिया — naïve café, 12345 digits",
        "<|im_start|>user\nhi <think>x</think><|im_end|>\n",
        "  leading spaces\tand\ttabs\n\n\nnewlines   ",
    ];
    let texts_path = files().scratch("texts.json");
    std::fs::write(&texts_path, serde_json::to_string(&texts).unwrap()).unwrap();
    let out = Command::new(python())
        .arg(fixture("../scripts/hf_export_check.py"))
        .args([&hf, &gguf_path, &texts_path])
        .output()
        .unwrap();
    let out = check(
        out,
        "hf_export_check.py (pip install gguf 'mlx[cpu]' mlx-lm)",
    );
    let r: Json = serde_json::from_slice(&out.stdout).unwrap();

    let c = &r["config"];
    for (key, value) in [
        ("hidden_size", TINY.d),
        ("num_hidden_layers", TINY.layers),
        ("num_attention_heads", TINY.heads),
        ("num_key_value_heads", TINY.kv_heads),
        ("head_dim", TINY.head_dim),
        ("intermediate_size", TINY.d_ff),
        ("linear_num_key_heads", TINY.k_heads),
        ("linear_num_value_heads", TINY.v_heads),
        ("linear_key_head_dim", TINY.ssm_head),
        ("linear_value_head_dim", TINY.ssm_head),
        ("linear_conv_kernel_dim", TINY.conv),
        ("full_attention_interval", 4),
        ("vocab_size", N_VOCAB),
    ] {
        assert_eq!(c[key], value, "{key}");
    }
    assert_eq!(c["tie_word_embeddings"], false);
    assert_eq!(c["rope_theta"].as_f64(), Some(1e7));
    assert_eq!(c["partial_rotary_factor"].as_f64(), Some(0.25));

    let tensors = r["tensors"].as_array().unwrap();
    assert_eq!(r["n_checkpoint"].as_u64(), Some(tensors.len() as u64));
    assert_eq!(
        r["n_params"], r["n_checkpoint"],
        "mlx_lm loads every tensor"
    );
    for t in tensors {
        let name = t["gguf"].as_str().unwrap();
        let diff = t["max_abs_diff"]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}: no checkpoint tensor {}", t["hf"]));
        // exp and ln each round once: a few units in the last place of |ssm_a| ≤ ~10.
        let bound = if name.ends_with("ssm_a") {
            4.0 * f64::from(f32::EPSILON) * t["max_abs"].as_f64().unwrap()
        } else {
            0.0
        };
        assert!(
            diff <= bound,
            "{name}: converter(checkpoint) − GGUF = {diff}"
        );
    }
    let conv = tensors
        .iter()
        .find(|t| t["gguf"] == "blk.0.ssm_conv1d.weight")
        .unwrap();
    assert_eq!(conv["hf_shape"], serde_json::json!([320, 1, 4]));

    assert_eq!(r["logits_shape"][2], N_VOCAB);
    assert_eq!(r["logits_finite"], true);
    assert_eq!(r["eos_token"], "<|im_end|>");
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
fn an_unknown_qwen35_preset_fails_with_one_clear_line() {
    let out = harness()
        .args([
            "synth", "--arch", "qwen35", "--quant", "f16", "--preset", "huge",
        ])
        .arg("--out")
        .arg(files().scratch("never-written.gguf"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown qwen35 preset \"huge\"")
            && stderr.contains("tiny, trained, mid, qwen35-9b, qwen35-27b"),
        "{stderr}"
    );
}
