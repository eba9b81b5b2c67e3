//! GGUF reader and writer: agreement with gguf-py, split models, typed metadata errors, and
//! hostile input (every truncation, forged counts, lengths, shapes and offsets).

use fak::gguf::{Array, Gguf, GgufWriter, Value, parse};
use fak::quant::GgmlType;
use fak_tests::{fixture, python};
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::Command;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fak-gguf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// gguf-py's view of a file (tests/scripts/gguf_dump.py).
fn gguf_py_dump(path: &Path) -> Json {
    let script = fixture("../scripts/gguf_dump.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(path)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "gguf-py failed on {} (is it installed? pip install gguf): {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// One metadata value of every type, including nested arrays and an empty array.
fn every_value_type() -> Vec<(String, Value)> {
    vec![
        ("t.u8".into(), Value::U8(200)),
        ("t.i8".into(), Value::I8(-100)),
        ("t.u16".into(), Value::U16(60000)),
        ("t.i16".into(), Value::I16(-30000)),
        ("t.u32".into(), Value::U32(4_000_000_000)),
        ("t.i32".into(), Value::I32(-2_000_000_000)),
        ("t.f32".into(), Value::F32(0.15625)),
        ("t.bool".into(), Value::Bool(true)),
        ("t.string".into(), Value::String("Grüße, 世界 🦙".into())),
        ("t.u64".into(), Value::U64(u64::MAX - 7)),
        ("t.i64".into(), Value::I64(i64::MIN + 3)),
        ("t.f64".into(), Value::F64(-1.0e300)),
        ("t.arr.i32".into(), Value::Array(Array::I32(vec![1, -2, 3]))),
        (
            "t.arr.str".into(),
            Value::Array(Array::String(vec!["a".into(), "".into(), "Ġb".into()])),
        ),
        ("t.arr.empty".into(), Value::Array(Array::F32(vec![]))),
        (
            "t.arr.bool".into(),
            Value::Array(Array::Bool(vec![true, false, true])),
        ),
        (
            "t.arr.nested".into(),
            Value::Array(Array::Array(vec![
                Array::U16(vec![7, 8]),
                Array::U16(vec![9]),
            ])),
        ),
    ]
}

/// Deterministic bytes for a tensor (content is irrelevant to the container tests).
fn pattern(n: u64, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

/// (name, type, shape) of the sample tensors: every block geometry the engine uses.
fn sample_tensors() -> Vec<(&'static str, GgmlType, Vec<u64>)> {
    vec![
        ("a.f32", GgmlType::F32, vec![8, 3]),
        ("b.f16", GgmlType::F16, vec![16]),
        ("c.q8_0", GgmlType::Q8_0, vec![64, 2]),
        ("d.q4_k", GgmlType::Q4_K, vec![256, 2, 1]),
        ("e.q6_k", GgmlType::Q6_K, vec![256, 1, 2, 1]),
        ("f.bf16", GgmlType::BF16, vec![5]),
    ]
}

fn write_sample(path: &Path, alignment: Option<u32>, extra: &[(String, Value)]) {
    let mut w = GgufWriter::new();
    if let Some(a) = alignment {
        w.set("general.alignment", Value::U32(a)).unwrap();
    }
    for (k, v) in every_value_type().into_iter().chain(extra.iter().cloned()) {
        w.set(&k, v).unwrap();
    }
    for (i, (name, ty, shape)) in sample_tensors().into_iter().enumerate() {
        let n = ty.row_bytes(shape[0]).unwrap() * shape[1..].iter().product::<u64>();
        let bytes = pattern(n, i as u8);
        w.add_tensor(name, ty, &shape, Box::new(move |out| out.write_all(&bytes)))
            .unwrap();
    }
    w.write(path, |_| {}).unwrap();
}

/// Our value flattened the way gguf-py's `contents()` reports it.
fn flatten(v: &Value) -> Json {
    fn arr(a: &Array) -> Vec<Json> {
        match a {
            Array::Array(inner) => inner.iter().flat_map(arr).collect(),
            Array::String(v) => v.iter().map(|s| Json::from(s.as_str())).collect(),
            Array::Bool(v) => v.iter().map(|&b| Json::from(b)).collect(),
            Array::F32(v) => v.iter().map(|&x| Json::from(f64::from(x))).collect(),
            Array::F64(v) => v.iter().map(|&x| Json::from(x)).collect(),
            a => a
                .integers()
                .unwrap()
                .into_iter()
                .map(|i| serde_json::from_str(&i.to_string()).unwrap())
                .collect(),
        }
    }
    match v {
        Value::Array(a) => Json::Array(arr(a)),
        Value::String(s) => Json::from(s.as_str()),
        Value::Bool(b) => Json::from(*b),
        Value::F32(x) => Json::from(f64::from(*x)),
        Value::F64(x) => Json::from(*x),
        v => serde_json::from_str(&v.as_integer().unwrap().to_string()).unwrap(),
    }
}

/// Checks that fak and gguf-py read the one file `path` identically: keys, types, values,
/// tensors, offsets.
fn assert_matches_gguf_py(path: &Path) {
    let ours = parse(&std::fs::read(path).unwrap()).unwrap();
    let py = gguf_py_dump(path);
    assert_eq!(py["version"], Json::from(ours.version));
    assert_eq!(py["alignment"], Json::from(ours.alignment));
    assert_eq!(py["data_offset"], Json::from(ours.data_start));

    let fields = py["fields"].as_array().unwrap();
    let entries = &ours.metadata;
    assert_eq!(
        fields.len(),
        entries.len(),
        "metadata count in {}",
        path.display()
    );
    for ((key, value), f) in entries.iter().zip(fields) {
        assert_eq!(f["name"], Json::from(key.as_str()));
        let types: Vec<u64> = f["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        assert_eq!(types[0], value.value_type() as u64, "type of {key}");
        if let Value::Array(a) = value
            && !a.is_empty()
        {
            assert_eq!(
                *types.last().unwrap(),
                innermost(a) as u64,
                "element type of {key}"
            );
        }
        assert_eq!(f["value"], flatten(value), "value of {key}");
    }

    let tensors = py["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), ours.tensors.len());
    for (t, p) in ours.tensors.iter().zip(tensors) {
        assert_eq!(p["name"], Json::from(t.name.as_str()));
        assert_eq!(p["shape"], Json::from(t.shape.clone()));
        assert_eq!(p["type"], Json::from(t.ty.id()));
        assert_eq!(p["n_bytes"], Json::from(t.n_bytes), "bytes of {}", t.name);
        assert_eq!(
            p["data_offset"],
            Json::from(t.file_offset),
            "offset of {}",
            t.name
        );
    }
}

fn innermost(a: &Array) -> fak::gguf::ValueType {
    match a {
        Array::Array(inner) => inner.first().map_or(a.elem_type(), innermost),
        _ => a.elem_type(),
    }
}

#[test]
fn writer_output_reads_back_in_fak_and_gguf_py() {
    let dir = temp_dir("roundtrip");
    for alignment in [None, Some(64), Some(4096)] {
        let path = dir.join(format!("sample-{alignment:?}.gguf"));
        write_sample(&path, alignment, &[]);
        let model = Gguf::open(&path).unwrap();
        let mut expected = every_value_type();
        if let Some(a) = alignment {
            expected.insert(0, ("general.alignment".into(), Value::U32(a)));
        }
        assert_eq!(model.metadata().entries(), &expected[..]);
        for (i, (name, ty, shape)) in sample_tensors().into_iter().enumerate() {
            let t = model.require_tensor(name).unwrap();
            assert_eq!((t.ty, &t.shape), (ty, &shape));
            assert_eq!(t.file_offset % u64::from(alignment.unwrap_or(32)), 0);
            assert_eq!(model.tensor_data(t), pattern(t.n_bytes, i as u8));
        }
        assert_matches_gguf_py(&path);
    }
}

#[test]
fn vocab_fixtures_parse_like_gguf_py() {
    for name in [
        "ggml-vocab-qwen2.gguf",
        "ggml-vocab-qwen35.gguf",
        "ggml-vocab-llama-bpe.gguf",
    ] {
        let path = fixture(&format!("vocab/{name}"));
        assert_matches_gguf_py(&path);
        let model = Gguf::open(&path).unwrap();
        let tokens = model.metadata().str_array("tokenizer.ggml.tokens").unwrap();
        assert!(tokens.len() > 100_000, "{name}: {} tokens", tokens.len());
    }
}

#[test]
fn typed_metadata_errors_name_the_file_key_and_types() {
    let dir = temp_dir("typed");
    let path = dir.join("typed.gguf");
    write_sample(
        &path,
        None,
        &[("qwen3.block_count".into(), Value::String("28".into()))],
    );
    let model = Gguf::open(&path).unwrap();
    let meta = model.metadata();
    let err = meta.u32("qwen3.block_count").unwrap_err().to_string();
    assert!(
        err.ends_with("key qwen3.block_count: expected u32, found string")
            && err.contains("typed.gguf"),
        "{err}"
    );
    let err = meta.u32("t.arr.i32").unwrap_err().to_string();
    assert!(
        err.ends_with("key t.arr.i32: expected u32, found array of i32"),
        "{err}"
    );
    let err = meta.u32("absent.key").unwrap_err().to_string();
    assert!(err.ends_with("key absent.key: missing"), "{err}");
    let err = meta.u32("t.i64").unwrap_err().to_string();
    assert!(err.contains("does not fit u32"), "{err}");
    // Any integer type holding the value is accepted for integer keys, as llama.cpp does.
    assert_eq!(meta.u64("t.u16").unwrap(), 60000);
    assert_eq!(meta.usize("t.u8").unwrap(), 200);
    assert_eq!(meta.f32("t.f32").unwrap(), 0.15625);
    assert_eq!(meta.opt_u32("absent.key").unwrap(), None);
    assert_eq!(meta.usize_per_layer("t.u8", 3).unwrap(), vec![200; 3]);
    let err = meta
        .usize_per_layer("t.arr.i32", 4)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("3 entries, expected one per layer (4)"),
        "{err}"
    );
}

fn write_shards(dir: &Path, count: u16, lie_about: Option<u16>) -> Vec<PathBuf> {
    let all = sample_tensors();
    let per = all.len().div_ceil(usize::from(count));
    (0..count)
        .map(|i| {
            let path = dir.join(format!("model-{:05}-of-{count:05}.gguf", i + 1));
            let mut w = GgufWriter::new();
            let no = if lie_about == Some(i) { i + 1 } else { i };
            w.set("split.no", Value::U16(no)).unwrap();
            w.set("split.count", Value::U16(count)).unwrap();
            w.set("split.tensors.count", Value::I32(all.len() as i32))
                .unwrap();
            if i == 0 {
                w.set("general.architecture", Value::String("qwen3".into()))
                    .unwrap();
            }
            for (name, ty, shape) in all.iter().skip(usize::from(i) * per).take(per) {
                let n = ty.row_bytes(shape[0]).unwrap() * shape[1..].iter().product::<u64>();
                let bytes = pattern(n, i as u8);
                w.add_tensor(name, *ty, shape, Box::new(move |o| o.write_all(&bytes)))
                    .unwrap();
            }
            w.write(&path, |_| {}).unwrap();
            path
        })
        .collect()
}

#[test]
fn split_model_opens_as_the_union_of_its_shards() {
    let dir = temp_dir("split");
    let paths = write_shards(&dir, 3, None);
    for given in &paths {
        let model = Gguf::open(given).unwrap();
        assert_eq!(model.paths().len(), 3);
        assert_eq!(model.tensors().len(), sample_tensors().len());
        assert_eq!(
            model.metadata().str("general.architecture").unwrap(),
            "qwen3"
        );
        for t in model.tensors() {
            let shard_bytes = pattern(t.n_bytes, t.shard as u8);
            assert_eq!(
                model.tensor_data(t),
                shard_bytes,
                "{} from shard {}",
                t.name,
                t.shard
            );
        }
    }
    for p in &paths {
        assert_matches_gguf_py(p);
    }
}

#[test]
fn split_model_errors_name_the_missing_or_inconsistent_shard() {
    let dir = temp_dir("split-bad");
    let paths = write_shards(&dir, 3, None);
    std::fs::remove_file(&paths[1]).unwrap();
    let err = Gguf::open(&paths[0]).err().unwrap().to_string();
    assert!(
        err.contains("model-00002-of-00003.gguf") && err.contains("missing"),
        "{err}"
    );

    let dir = temp_dir("split-lie");
    let paths = write_shards(&dir, 2, Some(1));
    let err = Gguf::open(&paths[0]).err().unwrap().to_string();
    assert!(
        err.contains("split.no") && err.contains("model-00002-of-00002.gguf"),
        "{err}"
    );
}

/// Hand-built GGUF bytes for forging headers the writer would never produce.
#[derive(Default)]
struct Forge(Vec<u8>);

impl Forge {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut f = Forge(b"GGUF".to_vec());
        f.u32(version).u64(n_tensors).u64(n_kv);
        f
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(4).u32(v)
    }
    fn tensor(&mut self, name: &str, shape: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(shape.len() as u32);
        for &d in shape {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    fn pad_to(&mut self, alignment: usize) -> &mut Self {
        while !self.0.len().is_multiple_of(alignment) {
            self.0.push(0);
        }
        self
    }
    fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.extend(std::iter::repeat_n(0u8, n));
        self
    }
}

fn parse_error(bytes: &[u8]) -> String {
    match parse(bytes) {
        Ok(_) => panic!("forged input parsed"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let dir = temp_dir("trunc");
    let path = dir.join("t.gguf");
    write_sample(&path, None, &[]);
    let bytes = std::fs::read(&path).unwrap();
    assert!(parse(&bytes).is_ok());
    for len in 0..bytes.len() {
        assert!(
            parse(&bytes[..len]).is_err(),
            "prefix of {len} bytes parsed"
        );
    }
    // And through the file API, with the path in the message.
    let cut = dir.join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let err = Gguf::open(&cut).err().unwrap().to_string();
    assert!(err.contains("cut.gguf"), "{err}");
    std::fs::write(&cut, b"").unwrap();
    assert!(Gguf::open(&cut).is_err());
}

#[test]
fn forged_headers_are_rejected_with_errors_that_name_the_problem() {
    type Case = (&'static str, Vec<u8>, &'static str);
    let ok_tensor = |f: &mut Forge| {
        f.pad_to(32).zeros(64);
    };
    let mut cases: Vec<Case> = Vec::new();
    let mut f = Forge(b"GGML".to_vec());
    f.u32(3).u64(0).u64(0);
    cases.push(("magic", f.0, "not a GGUF file"));
    cases.push(("version 1", Forge::header(1, 0, 0).0, "version 1"));
    cases.push((
        "big endian",
        Forge::header(3u32.swap_bytes(), 0, 0).0,
        "big-endian",
    ));
    cases.push((
        "kv count",
        Forge::header(3, 0, u64::MAX).0,
        "metadata count at byte 16: 18446744073709551615 key/value pairs cannot fit",
    ));
    let mut f = Forge::header(3, 0, 1);
    f.u64(u64::MAX - 1).zeros(8);
    cases.push(("key length", f.0, "metadata key #0"));
    let mut f = Forge::header(3, 0, 1);
    f.str("k").u32(9).u32(4).u64(u64::MAX / 2);
    cases.push(("array count", f.0, "cannot fit"));
    let mut f = Forge::header(3, 0, 1);
    f.str("deep").u32(9);
    for _ in 0..100_000 {
        f.u32(9).u64(1);
    }
    cases.push(("nesting", f.0, "nested deeper"));
    let mut f = Forge::header(3, 0, 1);
    f.str("k").u32(13).u32(0);
    cases.push(("value type", f.0, "unknown value type 13"));
    let mut f = Forge::header(3, 0, 1);
    f.str("k").u32(7);
    f.0.push(2);
    cases.push(("bool", f.0, "bool byte is 2"));
    let mut f = Forge::header(3, 0, 1);
    f.u64(2);
    f.0.extend_from_slice(&[0xff, 0xfe]);
    f.u32(8).u64(0);
    cases.push(("utf8", f.0, "not UTF-8"));
    let mut f = Forge::header(3, 0, 2);
    f.kv_u32("k", 1).kv_u32("k", 2);
    cases.push(("duplicate key", f.0, "duplicate metadata key \"k\""));
    let mut f = Forge::header(3, 0, 1);
    f.kv_u32("general.alignment", 48);
    cases.push((
        "alignment",
        f.0,
        "general.alignment: 48 is not a power of two",
    ));
    let mut f = Forge::header(3, 0, 1);
    f.str("general.alignment").u32(8).str("32");
    cases.push(("alignment type", f.0, "expected u32, found string"));
    let mut f = Forge::header(3, u64::MAX, 0);
    f.tensor("w", &[16], 0, 0);
    cases.push((
        "tensor count",
        f.0,
        "tensor count at byte 8: 18446744073709551615 tensor infos cannot fit",
    ));
    let mut f = Forge::header(3, 1, 0);
    f.tensor(&"x".repeat(65), &[16], 0, 0);
    cases.push(("long name", f.0, "longer than 64"));
    let mut f = Forge::header(3, 1, 0);
    f.tensor("w", &[1, 1, 1, 1, 1], 0, 0);
    cases.push(("dims", f.0, "tensor w: 5 dimensions"));
    let mut f = Forge::header(3, 1, 0);
    f.tensor("w", &[1 << 32, 1 << 32], 0, 0);
    cases.push(("overflow", f.0, "tensor w: element count"));
    let mut f = Forge::header(3, 1, 0);
    f.tensor("w", &[1 << 62, 1 << 1], 0, 0);
    cases.push(("i64 overflow", f.0, "tensor w: element count"));
    let mut f = Forge::header(3, 1, 0);
    f.tensor("w", &[300, 2], 12, 0);
    cases.push((
        "ragged",
        f.0,
        "row length 300 is not a multiple of the Q4_K block size 256",
    ));
    let mut f = Forge::header(3, 1, 0);
    f.tensor("w", &[32], 4, 0);
    cases.push(("type", f.0, "unknown ggml type id 4"));
    let mut f = Forge::header(3, 1, 0);
    f.tensor("w", &[4], 0, 8);
    ok_tensor(&mut f);
    cases.push((
        "misaligned",
        f.0,
        "offset 8 is not a multiple of the alignment 32",
    ));
    let mut f = Forge::header(3, 1, 0);
    f.tensor("w", &[4], 0, 1 << 20);
    ok_tensor(&mut f);
    cases.push(("outside", f.0, "runs past the end of the file"));
    let mut f = Forge::header(3, 1, 0);
    f.tensor("w", &[4], 0, u64::MAX - 31);
    ok_tensor(&mut f);
    cases.push(("offset overflow", f.0, "runs past the end of the file"));
    let mut f = Forge::header(3, 2, 0);
    f.tensor("a", &[16], 0, 0).tensor("b", &[4], 0, 32);
    ok_tensor(&mut f);
    cases.push(("overlap", f.0, "overlaps tensor \"a\""));
    let mut f = Forge::header(3, 2, 0);
    f.tensor("a", &[4], 0, 0).tensor("a", &[4], 0, 32);
    ok_tensor(&mut f);
    cases.push(("duplicate tensor", f.0, "tensor a: duplicate tensor name"));

    for (label, bytes, expected) in cases {
        let err = parse_error(&bytes);
        assert!(
            err.contains(expected),
            "{label}: {err:?} lacks {expected:?}"
        );
    }
}

#[test]
fn version_2_files_are_accepted() {
    let dir = temp_dir("v2");
    let path = dir.join("v3.gguf");
    write_sample(&path, None, &[]);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(parse(&bytes).unwrap().version, 2);
}

/// Replays the committed fuzz corpus (fuzz/corpus/gguf_parse: seeds from gguf-py plus what
/// `cargo fuzz` found, minimised): every input parses or fails cleanly, and accepted inputs
/// place every tensor inside the input.
#[test]
fn fuzz_corpus_replays_without_panics() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/gguf_parse");
    let mut inputs = 0;
    let mut accepted = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz corpus directory") {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        inputs += 1;
        if let Ok(parsed) = parse(&bytes) {
            accepted += 1;
            for t in &parsed.tensors {
                assert!(
                    t.file_offset + t.n_bytes <= bytes.len() as u64,
                    "{}",
                    t.name
                );
            }
        }
    }
    // The seeds alone are 4 valid files; a corpus that lost them would test nothing.
    assert!(
        inputs >= 4 && accepted >= 4,
        "{inputs} inputs, {accepted} accepted"
    );
}
