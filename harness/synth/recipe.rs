//! Which ggml type each tensor gets, and in which order the tensors sit in the file: what
//! llama.cpp's converter (`convert_hf_to_gguf.py --outtype f32|f16|q8_0`) writes, and for
//! Q6_K and Q4_K_M what `llama-quantize` then makes of the converter's f16 file (model-spec.md
//! §2.1). `harness quantize` applies the same llama-quantize rules to any GGUF.
//!
//! Converter: 1-D tensors, `*_norm.weight`, `ssm_conv1d`, `ffn_gate_inp` and names not ending
//! in `.weight` stay F32; other tensors take the outtype (Q8_0 falls back to F16 when a row is
//! not whole 32-blocks). Tensors come in the order the converter reads the Hugging Face
//! checkpoint: a single safetensors file is sorted by tensor name.
//!
//! llama-quantize (`llama_tensor_get_type_impl`, llama.cpp 0c1e570): tensors it does not
//! quantize (1-D, norms, `ffn_gate_inp`, `ssm_conv1d`) keep their type. For Q4_K_M: default
//! Q4_K; `output.weight` (or a tied `token_embd.weight`) Q6_K, Q8_0 when its rows are not whole
//! 256-blocks; attn_v-like tensors (`attn_v`, `attn_qkv`, `attn_kv_b`) and `ffn_down` Q6_K where
//! `use_more_bits(i, n)` holds for their running index i, else Q4_K. For Q6_K and Q8_0 every
//! quantized tensor takes that type (the LM head Q8_0 where its rows are not whole blocks of
//! the type). Then the shape fallback for rows that are not whole blocks (Q4_K→Q5_0,
//! Q6_K→Q8_0, F16 if not whole 32-blocks). It writes tensors in its loader's order: global
//! tensors by name, then block by block in layer order, each block's tensors by name — the
//! order the running indices count in.

use super::TensorPlan;
use fak::gguf::TensorInfo;
use fak::quant::GgmlType;
use std::cmp::Ordering;

/// What `--quant` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Quant {
    F32,
    F16,
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q6_k")]
    Q6K,
    #[value(name = "q4_k_m")]
    Q4KM,
}

impl Quant {
    /// The name `--quant` takes.
    pub fn name(self) -> &'static str {
        match self {
            Quant::F32 => "f32",
            Quant::F16 => "f16",
            Quant::Q8_0 => "q8_0",
            Quant::Q6K => "q6_k",
            Quant::Q4KM => "q4_k_m",
        }
    }

    /// `general.file_type` (llama_ftype): ALL_F32, MOSTLY_F16, MOSTLY_Q8_0, MOSTLY_Q6_K,
    /// MOSTLY_Q4_K_M.
    pub fn file_type(self) -> u32 {
        match self {
            Quant::F32 => 0,
            Quant::F16 => 1,
            Quant::Q8_0 => 7,
            Quant::Q6K => 18,
            Quant::Q4KM => 15,
        }
    }

    /// Puts `tensors` in the order the producing tool writes them and returns each one's type:
    /// the converter for f32/f16/q8_0, llama-quantize on the converter's f16 file for q6_k and
    /// q4_k_m.
    pub fn arrange(self, tensors: &mut [TensorPlan]) -> Vec<GgmlType> {
        match self {
            Quant::F32 => converter_types(tensors, GgmlType::F32),
            Quant::F16 => converter_types(tensors, GgmlType::F16),
            Quant::Q8_0 => converter_types(tensors, GgmlType::Q8_0),
            Quant::Q6K | Quant::Q4KM => {
                llama_quantize_types(self, tensors, |t| converter_type(t, GgmlType::F16))
            }
        }
    }
}

/// A tensor as the type rules see it: its GGUF name and shape.
pub trait Tensor {
    fn name(&self) -> &str;
    /// GGUF shape, `ne[0]` (the row) first.
    fn shape(&self) -> &[u64];
    fn row_len(&self) -> u64 {
        self.shape().first().copied().unwrap_or(1)
    }
}

impl Tensor for TensorPlan {
    fn name(&self) -> &str {
        &self.name
    }
    fn shape(&self) -> &[u64] {
        &self.shape
    }
}

impl Tensor for TensorInfo {
    fn name(&self) -> &str {
        &self.name
    }
    fn shape(&self) -> &[u64] {
        &self.shape
    }
}

fn converter_types(tensors: &mut [TensorPlan], outtype: GgmlType) -> Vec<GgmlType> {
    tensors.sort_by(|a, b| a.hf_name.cmp(&b.hf_name));
    tensors.iter().map(|t| converter_type(t, outtype)).collect()
}

fn converter_type(t: &TensorPlan, outtype: GgmlType) -> GgmlType {
    let name = t.name.as_str();
    let kept_f32 = t.shape.len() <= 1
        || name.ends_with("_norm.weight")
        || !name.ends_with(".weight")
        || name.contains("ssm_conv1d")
        || name.contains("ffn_gate_inp");
    match outtype {
        _ if kept_f32 => GgmlType::F32,
        GgmlType::Q8_0 if !t.row_len().is_multiple_of(GgmlType::Q8_0.block_elems()) => {
            GgmlType::F16
        }
        ty => ty,
    }
}

/// The tensor categories llama-quantize's rules distinguish.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Category {
    Output,
    TokenEmbd,
    AttnVLike,
    FfnDown,
    Other,
}

fn category(name: &str) -> Category {
    if name == "output.weight" {
        Category::Output
    } else if name == "token_embd.weight" {
        Category::TokenEmbd
    } else if ["attn_qkv.weight", "attn_kv_b.weight", "attn_v.weight"]
        .iter()
        .any(|s| name.contains(s))
    {
        Category::AttnVLike
    } else if name.contains("ffn_down") {
        Category::FfnDown
    } else {
        Category::Other
    }
}

/// llama-quantize's `tensor_allows_quantization` for the tensors our architectures have.
fn quantizable(t: &impl Tensor) -> bool {
    let name = t.name();
    t.shape().len() >= 2
        && name.ends_with("weight")
        && !name.contains("_norm.weight")
        && !name.contains("ffn_gate_inp.weight")
        && !name.contains("ssm_conv1d")
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers, and every third between.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i as isize - (n / 8) as isize) % 3 == 2
}

/// llama.cpp's loader order (`weight_name_comparer`): tensors outside blocks first, then by
/// block number, then by name.
fn loader_order(a: &impl Tensor, b: &impl Tensor) -> Ordering {
    fn layer(name: &str) -> Option<u64> {
        let rest = name.strip_prefix("blk.")?;
        rest[..rest.find('.')?].parse().ok()
    }
    layer(a.name())
        .cmp(&layer(b.name()))
        .then_with(|| a.name().cmp(b.name()))
}

/// llama-quantize's choice for `quant` (Q8_0, Q6_K or Q4_K_M): puts `tensors` in its order and
/// returns each one's type; a tensor it does not quantize keeps `kept(t)`, its type in the
/// source file.
pub fn llama_quantize_types<T: Tensor>(
    quant: Quant,
    tensors: &mut [T],
    kept: impl Fn(&T) -> GgmlType,
) -> Vec<GgmlType> {
    tensors.sort_by(loader_order);
    let base = match quant {
        Quant::Q8_0 => GgmlType::Q8_0,
        Quant::Q6K => GgmlType::Q6_K,
        Quant::Q4KM => GgmlType::Q4_K,
        Quant::F32 | Quant::F16 => unreachable!("llama-quantize rules for {quant:?}"),
    };
    let tied = !tensors.iter().any(|t| t.name() == "output.weight");
    let count = |c: Category| {
        tensors
            .iter()
            .filter(|t| quantizable(*t) && category(t.name()) == c)
            .count()
    };
    let (n_attn_v, n_ffn_down) = (count(Category::AttnVLike), count(Category::FfnDown));
    let (mut i_attn_v, mut i_ffn_down) = (0, 0);
    // Q4_K_M's extra bits on a share of attn_v-like and ffn_down tensors; the counters run for
    // every ftype, as llama-quantize's do.
    let more_bits = |i: &mut usize, n: usize| {
        let more = use_more_bits(*i, n);
        *i += 1;
        if more && quant == Quant::Q4KM {
            GgmlType::Q6_K
        } else {
            base
        }
    };
    // The LM head: Q8_0 where its rows are not whole blocks of the base type, else Q6_K unless
    // the base is Q8_0.
    let lm_head = |row_len: u64| {
        if !row_len.is_multiple_of(base.block_elems()) || base == GgmlType::Q8_0 {
            GgmlType::Q8_0
        } else {
            GgmlType::Q6_K
        }
    };

    tensors
        .iter()
        .map(|t| {
            if !quantizable(t) {
                return kept(t);
            }
            let row_len = t.row_len();
            let ty = match category(t.name()) {
                Category::Output => lm_head(row_len),
                Category::TokenEmbd if tied => lm_head(row_len),
                Category::AttnVLike => more_bits(&mut i_attn_v, n_attn_v),
                Category::FfnDown => more_bits(&mut i_ffn_down, n_ffn_down),
                _ => base,
            };
            shape_fallback(ty, row_len)
        })
        .collect()
}

/// llama-quantize's `tensor_type_fallback` for rows that are not whole blocks of `ty`.
fn shape_fallback(ty: GgmlType, row_len: u64) -> GgmlType {
    if row_len.is_multiple_of(ty.block_elems()) {
        return ty;
    }
    let fallback = match ty {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        other => other,
    };
    if row_len.is_multiple_of(fallback.block_elems()) {
        fallback
    } else {
        GgmlType::F16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_matches_llama_cpp_for_28_layers() {
        // n=28: n/8 = 3, 7n/8 = 24; between them every third layer from 5 on (5, 8, …, 23).
        let more: Vec<usize> = (0..28).filter(|&i| use_more_bits(i, 28)).collect();
        assert_eq!(more, [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27]);
    }

    #[test]
    fn shape_fallbacks_follow_llama_quantize() {
        assert_eq!(shape_fallback(GgmlType::Q4_K, 1024), GgmlType::Q4_K);
        assert_eq!(shape_fallback(GgmlType::Q4_K, 64), GgmlType::Q5_0);
        assert_eq!(shape_fallback(GgmlType::Q6_K, 64), GgmlType::Q8_0);
        assert_eq!(shape_fallback(GgmlType::Q4_K, 48), GgmlType::F16);
    }
}
