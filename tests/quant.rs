//! The CPU quant codecs against independent oracles:
//! - gguf-py (`gguf.quants`, driven through `tests/scripts/gguf_quants.py`): dequantization of
//!   every supported type and quantization of every type gguf-py can quantize, bit for bit;
//! - llama.cpp's `llama-quantize` (the CI peer): K-quant round-trip error on the same tensors.
//!
//! NaN policy for the bit-exact comparisons: where the value is a pure bit conversion (F32, F16,
//! BF16) NaN payload and sign must match exactly, since gguf-py keeps them. Where a NaN comes
//! out of arithmetic on a NaN or Inf scale (every block format), which NaN bit pattern the
//! hardware produces depends on operand order, which neither implementation promises; there
//! both sides must be NaN, and every non-NaN value must match bit for bit (zero signs included).

use fak::gguf::{Gguf, GgufWriter, Value};
use fak::quant::{self, GgmlType};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal, StudentT};
use std::path::{Path, PathBuf};
use std::process::Command;

const FLOAT_TYPES: [GgmlType; 3] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16];
const BLOCK_TYPES: [GgmlType; 8] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];
/// The block formats `gguf.quants.quantize` implements (it has no K-quant quantizers).
const GGUF_PY_QUANTIZES: [GgmlType; 5] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

/// A fresh directory for one test's exchange files.
fn scratch_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("quant")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// A batch of gguf-py jobs, run in one Python process.
struct GgufPy {
    dir: PathBuf,
    jobs: Vec<serde_json::Value>,
}

impl GgufPy {
    fn new(test: &str) -> Self {
        Self {
            dir: scratch_dir(test),
            jobs: Vec::new(),
        }
    }

    fn push(&mut self, mut job: serde_json::Value, input: &[u8]) {
        let n = self.jobs.len();
        let (inp, out) = (
            self.dir.join(format!("{n}.in")),
            self.dir.join(format!("{n}.out")),
        );
        std::fs::write(&inp, input).expect("write oracle input");
        job["input"] = inp.to_str().unwrap().into();
        job["output"] = out.to_str().unwrap().into();
        self.jobs.push(job);
    }

    fn dequantize(&mut self, ty: GgmlType, blocks: &[u8]) {
        let job = serde_json::json!({"op": "dequantize", "type": ty.name()});
        self.push(job, blocks);
    }

    fn quantize(&mut self, ty: GgmlType, src: &[f32], row_len: usize) {
        let job = serde_json::json!({"op": "quantize", "type": ty.name(), "row_len": row_len});
        self.push(job, bytemuck::cast_slice(src));
    }

    /// Runs every job; returns their outputs in order. Fails (never skips) without gguf-py.
    fn run(self) -> Vec<Vec<u8>> {
        let jobs_file = self.dir.join("jobs.json");
        std::fs::write(&jobs_file, serde_json::to_vec(&self.jobs).unwrap()).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gguf_quants.py");
        let python = fak_tests::python();
        let output = Command::new(&python)
            .arg(&script)
            .arg(&jobs_file)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run {python} for the gguf-py oracle ({e}): install Python 3, then pip install gguf")
            });
        assert!(
            output.status.success(),
            "gguf-py oracle failed ({}); it needs `pip install gguf`:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        (0..self.jobs.len())
            .map(|n| std::fs::read(self.dir.join(format!("{n}.out"))).expect("oracle output"))
            .collect()
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// f16 patterns that stress a scale field: ±0, subnormals, the normal boundary, ±max, ±Inf,
/// quiet, signalling, negative and payload-carrying NaNs, ±1.
const SPECIAL_F16: [u16; 16] = [
    0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe00,
    0x7c01, 0x7d55, 0x3c00, 0xbc00,
];

/// Byte offsets of each block format's f16 fields.
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        _ => unreachable!("{ty} has no block scale fields"),
    }
}

/// Random blocks of `ty` whose scale fields cycle through the special f16 patterns, typical
/// scales and raw random bits, with the K-quant sub-block scales pushed to their extremes.
fn stress_blocks(ty: GgmlType, n_blocks: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let size = ty.block_bytes() as usize;
    let mut bytes = vec![0u8; n_blocks * size];
    rng.fill_bytes(&mut bytes);
    for (i, block) in bytes.chunks_exact_mut(size).enumerate() {
        for (k, &at) in f16_fields(ty).iter().enumerate() {
            let bits = match (i / 16) % 3 {
                0 => SPECIAL_F16[(i + 5 * k) % SPECIAL_F16.len()],
                1 => half::f16::from_f32(rng.random_range(1e-4f32..1.0)).to_bits(),
                _ => continue, // keep the random bits: every exponent, NaNs included
            };
            block[at..at + 2].copy_from_slice(&bits.to_le_bytes());
        }
        stress_sub_block_scales(ty, i, block);
    }
    bytes
}

fn stress_sub_block_scales(ty: GgmlType, i: usize, block: &mut [u8]) {
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K => match i % 8 {
            0 => block[4..16].fill(0x00), // all scales and mins 0
            1 => block[4..16].fill(0xff), // all scales and mins 63
            _ => {}
        },
        GgmlType::Q6_K => match i % 8 {
            0 => block[192..208].fill(0x80), // −128
            1 => block[192..208].fill(0x7f), // 127
            2 => block[192..208].fill(0x00),
            3 => block[192..208].iter_mut().for_each(|s| *s |= 0x80), // all negative
            _ => {}
        },
        _ => {}
    }
    if ty == GgmlType::Q5_K {
        // the fifth bits: all set, none, and alternating patterns
        match i % 8 {
            3 => block[16..48].fill(0xff),
            4 => block[16..48].fill(0x00),
            5 => block[16..48].fill(0xaa),
            6 => block[16..48].fill(0x55),
            _ => {}
        }
    }
}

/// Every element for the float types: all 65536 patterns of the 16-bit ones (exhaustive), random
/// f32 bit patterns (every exponent, NaN payloads) plus specials for F32.
fn stress_floats(ty: GgmlType, rng: &mut ChaCha8Rng) -> Vec<u8> {
    match ty {
        GgmlType::F16 | GgmlType::BF16 => (0..=u16::MAX).flat_map(u16::to_le_bytes).collect(),
        GgmlType::F32 => {
            let specials = [
                0x0000_0000u32,
                0x8000_0000,
                0x0000_0001,
                0x007f_ffff,
                0x7f80_0000,
                0xff80_0000,
                0x7fc0_0000,
                0x7f80_0001,
                0xffc1_2345,
            ];
            let random = (0..1 << 16).map(|_| rng.next_u32());
            specials
                .into_iter()
                .chain(random)
                .flat_map(u32::to_le_bytes)
                .collect()
        }
        _ => unreachable!(),
    }
}

/// Asserts element-wise agreement under this file's NaN policy; names the first difference.
fn assert_same_values(ty: GgmlType, ours: &[f32], theirs: &[f32], nan_payload_matters: bool) {
    assert_eq!(ours.len(), theirs.len(), "{ty}: element count");
    let block = ty.block_elems() as usize;
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        let same = if b.is_nan() && !nan_payload_matters {
            a.is_nan()
        } else {
            a.to_bits() == b.to_bits()
        };
        assert!(
            same,
            "{ty}: element {i} (block {}): ours {a:e} ({:#010x}), gguf-py {b:e} ({:#010x})",
            i / block,
            a.to_bits(),
            b.to_bits()
        );
    }
}

#[test]
fn dequantize_matches_gguf_py_bit_for_bit_on_every_type() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_0001);
    let mut inputs: Vec<(GgmlType, Vec<u8>)> = Vec::new();
    for ty in FLOAT_TYPES {
        inputs.push((ty, stress_floats(ty, &mut rng)));
    }
    for ty in BLOCK_TYPES {
        inputs.push((ty, stress_blocks(ty, 768, &mut rng)));
    }
    let mut oracle = GgufPy::new("dequantize");
    for (ty, bytes) in &inputs {
        oracle.dequantize(*ty, bytes);
    }
    for ((ty, bytes), theirs) in inputs.iter().zip(oracle.run()) {
        let theirs = f32s(&theirs);
        let n = bytes.len() / ty.block_bytes() as usize * ty.block_elems() as usize;
        let mut ours = vec![f32::NAN; n]; // poisoned: every element must be written
        quant::dequantize_into(*ty, bytes, &mut ours).unwrap();
        assert_same_values(*ty, &ours, &theirs, FLOAT_TYPES.contains(ty));
        // The stress patterns must actually have reached the oracle's output.
        assert!(theirs.iter().any(|v| v.is_nan()), "{ty}: no NaN exercised");
        assert!(
            theirs.iter().any(|v| v.is_infinite()),
            "{ty}: no Inf exercised"
        );
    }
}

/// Finite rows that stress the reference quantizers: scales from 1e-6 to beyond f16's range,
/// zero, constant, one-outlier and exactly-tied (half-integer) blocks.
fn stress_rows(row_len: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    let mut rows = Vec::new();
    for r in 0..48 {
        let std = 10f32.powf(rng.random_range(-6.0..4.0));
        let normal = Normal::new(0.0, std).unwrap();
        let mut row: Vec<f32> = (0..row_len).map(|_| normal.sample(rng)).collect();
        match r % 8 {
            0 => row[..64].fill(0.0),
            1 => row[..32].fill(std),
            2 => row[32..64].fill(-std),
            3 => row[7] = 40.0 * std,
            4 => row.iter_mut().for_each(|v| *v *= 1e3), // Q8_0/Q4_0 d overflows f16 at 1e7
            5 => {
                // k/2 for k in −254..=254 with a 127 in each block: Q8_0 scale 1, exact ties
                for (i, v) in row.iter_mut().enumerate() {
                    *v = if i % 32 == 0 {
                        127.0
                    } else {
                        rng.random_range(-254..=254) as f32 / 2.0
                    };
                }
            }
            _ => {}
        }
        rows.extend(row);
    }
    rows
}

/// Random f32 bit patterns: every exponent including subnormals, ±Inf and NaN payloads.
fn random_bit_rows(n: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..n).map(|_| f32::from_bits(rng.next_u32())).collect()
}

#[test]
fn quantize_matches_gguf_py_bit_for_bit_where_gguf_py_quantizes() {
    const ROW_LEN: usize = 256;
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_0002);
    let finite = stress_rows(ROW_LEN, &mut rng);
    let any_bits = random_bit_rows(64 * ROW_LEN, &mut rng);
    let cases: Vec<(GgmlType, &[f32])> = GGUF_PY_QUANTIZES
        .iter()
        .map(|&ty| (ty, finite.as_slice()))
        .chain(FLOAT_TYPES.iter().map(|&ty| (ty, any_bits.as_slice())))
        .chain(FLOAT_TYPES.iter().map(|&ty| (ty, finite.as_slice())))
        .collect();
    let mut oracle = GgufPy::new("quantize");
    for (ty, src) in &cases {
        oracle.quantize(*ty, src, ROW_LEN);
    }
    for ((ty, src), theirs) in cases.iter().zip(oracle.run()) {
        let ours = quant::quantize(*ty, src, ROW_LEN).unwrap();
        assert_eq!(ours.len(), theirs.len(), "{ty}: byte count");
        let block = ty.block_bytes() as usize;
        if let Some(i) = (0..ours.len()).find(|&i| ours[i] != theirs[i]) {
            let b = i / block;
            panic!(
                "{ty}: byte {i} (block {b}) differs: ours {:02x?}, gguf-py {:02x?}",
                &ours[b * block..(b + 1) * block],
                &theirs[b * block..(b + 1) * block]
            );
        }
    }
}

#[test]
fn block_formats_refuse_non_finite_input_and_name_where_it_is() {
    let mut src = vec![0.5f32; 512];
    src[256 + 3] = f32::NAN;
    for ty in BLOCK_TYPES {
        let err = quant::quantize(ty, &src, 256).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(ty.name()) && msg.contains("row 1") && msg.contains("column 3"),
            "{ty}: {msg}"
        );
    }
}

#[test]
fn unsupported_types_are_errors_that_name_the_type() {
    for ty in [
        GgmlType::Q2_K,
        GgmlType::IQ4_XS,
        GgmlType::Q8_K,
        GgmlType::I32,
    ] {
        assert!(!quant::can_dequantize(ty) && !quant::can_quantize(ty));
        let bytes = vec![0u8; ty.block_bytes() as usize];
        let n = ty.block_elems() as usize;
        let msgs = [
            quant::dequantize(ty, &bytes, n).unwrap_err().to_string(),
            quant::quantize(ty, &vec![0.0; n], n)
                .unwrap_err()
                .to_string(),
            quant::fill_random_rows(ty, n, 1, 1.0, 0, &mut vec![0; bytes.len()])
                .unwrap_err()
                .to_string(),
        ];
        for msg in msgs {
            assert!(msg.contains(ty.name()), "{ty}: {msg}");
        }
    }
}

// --- K-quants against llama-quantize -------------------------------------------------------

const KQ_ROW_LEN: usize = 1024;
const KQ_ROWS: usize = 64;

/// The test tensors, named as llama.cpp tensors so `llama-quantize --pure` quantizes each.
fn kquant_tensors() -> Vec<(&'static str, &'static str, Vec<f32>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_0003);
    let n = KQ_ROW_LEN * KQ_ROWS;
    let std = 0.02f32;
    let gaussian = Normal::new(0.0, std).unwrap();
    let heavy = StudentT::new(3.0f32).unwrap();
    let gauss: Vec<f32> = (0..n).map(|_| gaussian.sample(&mut rng)).collect();
    let student: Vec<f32> = (0..n).map(|_| std * heavy.sample(&mut rng)).collect();
    let outliers: Vec<f32> = (0..n)
        .map(|_| {
            let v = gaussian.sample(&mut rng);
            if rng.random_bool(0.002) { 40.0 * v } else { v }
        })
        .collect();
    vec![
        ("blk.0.attn_q.weight", "gaussian", gauss),
        ("blk.0.attn_k.weight", "student-t(3)", student),
        (
            "blk.0.attn_output.weight",
            "gaussian+0.2% outliers",
            outliers,
        ),
    ]
}

/// A GGUF llama.cpp's quantizer loads: llama arch hyperparameters (it loads arch, hparams and
/// tensor stats, not the weights' roles) and the test tensors in F32.
fn write_llama_gguf(path: &Path, tensors: &[(&str, &str, Vec<f32>)]) {
    let mut w = GgufWriter::new();
    let meta = [
        ("general.architecture", Value::String("llama".into())),
        ("llama.block_count", Value::U32(1)),
        ("llama.context_length", Value::U32(256)),
        ("llama.embedding_length", Value::U32(KQ_ROW_LEN as u32)),
        ("llama.feed_forward_length", Value::U32(KQ_ROW_LEN as u32)),
        ("llama.attention.head_count", Value::U32(8)),
        ("llama.attention.head_count_kv", Value::U32(8)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
    ];
    for (key, value) in meta {
        w.set(key, value).unwrap();
    }
    for (name, _, data) in tensors {
        let bytes: Vec<u8> = bytemuck::cast_slice(data).to_vec();
        let shape = [KQ_ROW_LEN as u64, KQ_ROWS as u64];
        w.add_tensor(
            name,
            GgmlType::F32,
            &shape,
            Box::new(move |out| out.write_all(&bytes)),
        )
        .unwrap();
    }
    w.write(path, |_| {}).unwrap();
}

fn rms_error(reference: &[f32], approx: &[f32]) -> f64 {
    let sum: f64 = reference
        .iter()
        .zip(approx)
        .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
        .sum();
    (sum / reference.len() as f64).sqrt()
}

fn llama_quantize(input: &Path, output: &Path, ty: GgmlType) {
    let tool = fak_tests::llama_cpp_tool("llama-quantize");
    let out = Command::new(&tool)
        .arg("--pure")
        .arg(input)
        .arg(output)
        .arg(ty.name())
        .arg("2")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", tool.display()));
    assert!(
        out.status.success(),
        "{} failed ({}):\n{}",
        tool.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn kquant_round_trip_error_is_within_5_percent_of_llama_quantize() {
    let dir = scratch_dir("kquant_vs_llama");
    let tensors = kquant_tensors();
    let input = dir.join("f32.gguf");
    write_llama_gguf(&input, &tensors);
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
        let output = dir.join(format!("{}.gguf", ty.name()));
        llama_quantize(&input, &output, ty);
        let peer = Gguf::open(&output).unwrap();
        for (name, kind, data) in &tensors {
            let info = peer.require_tensor(name).unwrap();
            assert_eq!(
                info.ty, ty,
                "{name}: llama-quantize --pure wrote {}",
                info.ty
            );
            let theirs_bytes = peer.tensor_data(info);
            let theirs = quant::dequantize(ty, theirs_bytes, data.len()).unwrap();
            let ours_bytes = quant::quantize(ty, data, KQ_ROW_LEN).unwrap();
            let ours = quant::dequantize(ty, &ours_bytes, data.len()).unwrap();
            let (e_ours, e_theirs) = (rms_error(data, &ours), rms_error(data, &theirs));
            let same_blocks = ours_bytes
                .chunks_exact(ty.block_bytes() as usize)
                .zip(theirs_bytes.chunks_exact(ty.block_bytes() as usize))
                .filter(|(a, b)| a == b)
                .count();
            let n_blocks = ours_bytes.len() / ty.block_bytes() as usize;
            println!(
                "{ty} {kind}: rms error ours {e_ours:.4e}, llama-quantize {e_theirs:.4e} \
                 (ratio {:.4}); identical blocks {same_blocks}/{n_blocks}",
                e_ours / e_theirs
            );
            assert!(e_theirs > 0.0 && e_ours.is_finite());
            // The bar: the same search may differ in float details, never in quality.
            assert!(
                e_ours <= 1.05 * e_theirs,
                "{ty} on {kind}: rms error {e_ours:e} exceeds 1.05 × llama-quantize's {e_theirs:e}"
            );
        }
    }
}
