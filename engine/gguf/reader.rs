//! Parsing one GGUF file (v2/v3) from bytes, with every count, length and offset checked
//! before it is trusted.
//!
//! ggus supplies the primitive reads (`GGufReader::read::<T>`, `read_str`, the header struct),
//! which are bounds-checked. Its higher layers are not safe on hostile input: `GGuf::new`
//! preallocates `metadata_kv_count` entries (an allocation abort for a forged count),
//! `GGufReader::skip` unwraps a `Layout` that overflows for forged lengths, `read::<GGmlType>`
//! transmutes unknown type ids into an enum, and `GGmlTypeSize::elements_to_bytes` asserts on
//! ragged rows. So the structure (key/values, arrays, tensor infos) is walked here.

use super::value::{Array, Value, ValueType};
use crate::quant::GgmlType;
use ggus::{GGufReadError, GGufReader};

/// GGUF's default data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The longest tensor name ggml accepts (`GGML_MAX_NAME` − 1 bytes plus the NUL).
pub const MAX_TENSOR_NAME: usize = 64;
/// ggml tensors have at most four dimensions.
pub const MAX_DIMS: usize = 4;
/// Nested arrays deeper than this are refused rather than recursed into (a forged file could
/// otherwise nest millions of levels and overflow the stack). Real files nest at most once.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// Where the header keeps the tensor count and the metadata count.
const N_TENSORS_AT: u64 = 8;
const N_KV_AT: u64 = 16;
/// The smallest key/value pair: an empty key (8-byte length), the value type, a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// The smallest tensor info: an empty name, no dimensions, the type and the offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// What was wrong, without the file name (the caller adds it).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    #[error("not a GGUF file (magic {0:02x?}, expected \"GGUF\")")]
    Magic([u8; 4]),
    #[error("big-endian GGUF files are not supported")]
    BigEndian,
    #[error("GGUF version {0} is not supported (expected 2 or 3)")]
    Version(u32),
    #[error("{what} at byte {at}: file ends early")]
    Truncated { what: String, at: u64 },
    #[error("{what} at byte {at}: {why}")]
    Invalid { what: String, at: u64, why: String },
    #[error("duplicate metadata key {0:?}")]
    DuplicateKey(String),
    #[error("key general.alignment: {0}")]
    Alignment(String),
    #[error("tensor {tensor}: {why}")]
    Tensor { tensor: String, why: String },
}

/// A tensor-info record, validated: known type, whole blocks per row, sizes without overflow,
/// data aligned, inside the file and not overlapping another tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// `ne[0]` first: the contiguous dimension (a row).
    pub shape: Vec<u64>,
    pub ty: GgmlType,
    /// Offset relative to the start of the data section, as stored.
    pub offset: u64,
    /// Absolute byte position in its file.
    pub file_offset: u64,
    pub n_bytes: u64,
    /// Index of the file (shard) that holds the data; 0 for single-file models.
    pub shard: usize,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Elements per row (`ne[0]`), 1 for a scalar.
    pub fn row_len(&self) -> u64 {
        self.shape.first().copied().unwrap_or(1)
    }

    /// Number of rows (`ne[1]·ne[2]·ne[3]`).
    pub fn n_rows(&self) -> u64 {
        self.shape.iter().skip(1).product()
    }

    pub fn row_bytes(&self) -> u64 {
        self.ty.row_bytes(self.row_len()).unwrap_or(0)
    }
}

/// The parsed header, metadata and tensor table of one file.
#[derive(Clone, Debug)]
pub struct Parsed {
    pub version: u32,
    pub alignment: u64,
    /// In file order.
    pub metadata: Vec<(String, Value)>,
    /// In file order.
    pub tensors: Vec<TensorInfo>,
    /// Absolute position of the tensor data section.
    pub data_start: u64,
}

/// Parses and validates a whole GGUF file held in `bytes`.
pub fn parse(bytes: &[u8]) -> Result<Parsed, ParseError> {
    let mut c = Cursor::new(bytes);
    let (version, n_tensors, n_kv) = read_header(&mut c)?;

    // A forged count is refused as what it is, not as a file that ends early thousands of
    // records later (a key/value pair takes at least 13 bytes, a tensor info 24).
    c.check_count(
        "metadata count",
        N_KV_AT,
        n_kv,
        MIN_KV_BYTES,
        "key/value pairs",
    )?;
    let mut metadata = Vec::with_capacity(c.bounded_capacity(n_kv, MIN_KV_BYTES));
    let mut seen = std::collections::HashSet::new();
    for i in 0..n_kv {
        let key = c.string(|| format!("metadata key #{i}"))?;
        let what = format!("metadata key {key:?}");
        let ty = c.value_type(&what)?;
        let value = c.value(ty, &what, 0)?;
        if !seen.insert(key.clone()) {
            return Err(ParseError::DuplicateKey(key));
        }
        metadata.push((key, value));
    }
    let alignment = alignment_of(&metadata)?;

    c.check_count(
        "tensor count",
        N_TENSORS_AT,
        n_tensors,
        MIN_TENSOR_INFO_BYTES,
        "tensor infos",
    )?;
    let mut tensors = Vec::with_capacity(c.bounded_capacity(n_tensors, MIN_TENSOR_INFO_BYTES));
    for i in 0..n_tensors {
        tensors.push(read_tensor_info(&mut c, i)?);
    }

    // Aligned even when there are no tensors (and then possibly past the end of the file), as
    // llama.cpp and gguf-py place it.
    let data_start =
        align_up(c.pos(), alignment).ok_or_else(|| ParseError::Alignment("overflow".into()))?;
    check_tensor_data(&mut tensors, data_start, alignment, bytes.len() as u64)?;
    Ok(Parsed {
        version,
        alignment,
        metadata,
        tensors,
        data_start,
    })
}

fn read_header(c: &mut Cursor) -> Result<(u32, u64, u64), ParseError> {
    let magic: [u8; 4] = c.read("magic")?;
    if &magic != b"GGUF" {
        return Err(ParseError::Magic(magic));
    }
    let version: u32 = c.read("version")?;
    if version.swap_bytes() <= 3 && version > 3 {
        return Err(ParseError::BigEndian);
    }
    if !(2..=3).contains(&version) {
        return Err(ParseError::Version(version));
    }
    let n_tensors: u64 = c.read("tensor count")?;
    let n_kv: u64 = c.read("metadata count")?;
    Ok((version, n_tensors, n_kv))
}

fn alignment_of(metadata: &[(String, Value)]) -> Result<u64, ParseError> {
    match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some((_, Value::U32(a))) if a.is_power_of_two() => Ok(u64::from(*a)),
        Some((_, Value::U32(a))) => {
            Err(ParseError::Alignment(format!("{a} is not a power of two")))
        }
        Some((_, v)) => Err(ParseError::Alignment(format!(
            "expected u32, found {}",
            v.type_description()
        ))),
    }
}

fn read_tensor_info(c: &mut Cursor, index: u64) -> Result<TensorInfo, ParseError> {
    let name = c.string(|| format!("tensor info #{index} name"))?;
    let fail = |why: String| ParseError::Tensor {
        tensor: name.clone(),
        why,
    };
    if name.len() > MAX_TENSOR_NAME {
        return Err(fail(format!(
            "name is {} bytes, longer than {MAX_TENSOR_NAME}",
            name.len()
        )));
    }
    let what = format!("tensor {name:?} info");
    let n_dims: u32 = c.read(&what)?;
    if n_dims as usize > MAX_DIMS {
        return Err(fail(format!(
            "{n_dims} dimensions, at most {MAX_DIMS} allowed"
        )));
    }
    let mut shape = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        let ne: u64 = c.read(&what)?;
        if ne > i64::MAX as u64 {
            return Err(fail(format!("dimension {ne} is negative as ggml's int64")));
        }
        shape.push(ne);
    }
    let type_id: u32 = c.read(&what)?;
    let offset: u64 = c.read(&what)?;
    let ty = GgmlType::from_id(type_id)
        .ok_or_else(|| fail(format!("unknown ggml type id {type_id}")))?;

    let n_elements = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| fail(format!("element count of shape {shape:?} overflows")))?;
    let row_len = shape.first().copied().unwrap_or(1);
    let row_bytes = ty.row_bytes(row_len).ok_or_else(|| {
        fail(format!(
            "row length {row_len} is not a multiple of the {ty} block size {}",
            ty.block_elems()
        ))
    })?;
    let n_rows = n_elements.checked_div(row_len).unwrap_or(0);
    let n_bytes = row_bytes
        .checked_mul(n_rows)
        .ok_or_else(|| fail("byte size overflows".into()))?;
    Ok(TensorInfo {
        name,
        shape,
        ty,
        offset,
        file_offset: 0,
        n_bytes,
        shard: 0,
    })
}

/// Places every tensor's data: aligned, inside the file, no two overlapping, names unique.
fn check_tensor_data(
    tensors: &mut [TensorInfo],
    data_start: u64,
    alignment: u64,
    file_len: u64,
) -> Result<(), ParseError> {
    let mut names = std::collections::HashSet::new();
    for t in tensors.iter_mut() {
        let fail = |why: String| ParseError::Tensor {
            tensor: t.name.clone(),
            why,
        };
        if !names.insert(t.name.clone()) {
            return Err(fail("duplicate tensor name".into()));
        }
        if t.offset % alignment != 0 {
            return Err(fail(format!(
                "data offset {} is not a multiple of the alignment {alignment}",
                t.offset
            )));
        }
        let start = data_start.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes));
        match (start, end) {
            (Some(s), Some(e)) if e <= file_len => t.file_offset = s,
            _ => {
                return Err(fail(format!(
                    "data [{} + {}, {} bytes) runs past the end of the file ({file_len} bytes)",
                    data_start, t.offset, t.n_bytes
                )));
            }
        }
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| tensors[i].file_offset);
    for pair in order.windows(2) {
        let (a, b) = (&tensors[pair[0]], &tensors[pair[1]]);
        if a.file_offset + a.n_bytes > b.file_offset {
            return Err(ParseError::Tensor {
                tensor: b.name.clone(),
                why: format!("data overlaps tensor {:?}", a.name),
            });
        }
    }
    Ok(())
}

pub(crate) fn align_up(x: u64, alignment: u64) -> Option<u64> {
    x.checked_add((alignment - x % alignment) % alignment)
}

/// A ggus reader plus the context an error message needs.
struct Cursor<'a> {
    reader: GGufReader<'a>,
    len: u64,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self {
            reader: GGufReader::new(bytes),
            len: bytes.len() as u64,
        }
    }

    fn pos(&self) -> u64 {
        self.len - self.reader.remaining().len() as u64
    }

    fn remaining(&self) -> u64 {
        self.reader.remaining().len() as u64
    }

    /// Refuses a header count of records (each at least `min_size` bytes) that the rest of
    /// the file cannot hold.
    fn check_count(
        &self,
        what: &str,
        at: u64,
        count: u64,
        min_size: u64,
        records: &str,
    ) -> Result<(), ParseError> {
        if count <= self.remaining() / min_size {
            return Ok(());
        }
        Err(ParseError::Invalid {
            what: what.into(),
            at,
            why: format!(
                "{count} {records} cannot fit in the {} bytes left (each takes at least {min_size})",
                self.remaining()
            ),
        })
    }

    /// A capacity for `count` records of at least `min_size` bytes each that the rest of the
    /// file could actually hold: forged counts never turn into huge allocations.
    fn bounded_capacity(&self, count: u64, min_size: u64) -> usize {
        count.min(self.remaining() / min_size) as usize
    }

    fn error(&self, what: impl Into<String>, e: GGufReadError) -> ParseError {
        let (what, at) = (what.into(), self.pos());
        match e {
            GGufReadError::Eos => ParseError::Truncated { what, at },
            GGufReadError::Utf8(u) => ParseError::Invalid {
                what,
                at,
                why: format!("string is not UTF-8 ({u})"),
            },
            GGufReadError::Bool(b) => ParseError::Invalid {
                what,
                at,
                why: format!("bool byte is {b}, expected 0 or 1"),
            },
        }
    }

    /// A plain little-endian scalar (only integer, float and byte-array types are read this
    /// way, so every bit pattern is a valid value).
    fn read<T: Copy + Plain>(&mut self, what: &str) -> Result<T, ParseError> {
        self.reader.read::<T>().map_err(|e| self.error(what, e))
    }

    fn string(&mut self, what: impl Fn() -> String) -> Result<String, ParseError> {
        match self.reader.read_str() {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(self.error(what(), e)),
        }
    }

    fn value_type(&mut self, what: &str) -> Result<ValueType, ParseError> {
        let at = self.pos();
        let id: u32 = self.read(what)?;
        ValueType::from_id(id).ok_or_else(|| ParseError::Invalid {
            what: what.into(),
            at,
            why: format!("unknown value type {id}"),
        })
    }

    fn bool(&mut self, what: &str) -> Result<bool, ParseError> {
        self.reader.read_bool().map_err(|e| self.error(what, e))
    }

    fn value(&mut self, ty: ValueType, what: &str, depth: usize) -> Result<Value, ParseError> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.read(what)?),
            ValueType::I8 => Value::I8(self.read(what)?),
            ValueType::U16 => Value::U16(self.read(what)?),
            ValueType::I16 => Value::I16(self.read(what)?),
            ValueType::U32 => Value::U32(self.read(what)?),
            ValueType::I32 => Value::I32(self.read(what)?),
            ValueType::F32 => Value::F32(self.read(what)?),
            ValueType::Bool => Value::Bool(self.bool(what)?),
            ValueType::String => Value::String(self.string(|| what.to_owned())?),
            ValueType::Array => Value::Array(self.array(what, depth)?),
            ValueType::U64 => Value::U64(self.read(what)?),
            ValueType::I64 => Value::I64(self.read(what)?),
            ValueType::F64 => Value::F64(self.read(what)?),
        })
    }

    fn array(&mut self, what: &str, depth: usize) -> Result<Array, ParseError> {
        let at = self.pos();
        if depth >= MAX_ARRAY_DEPTH {
            return Err(ParseError::Invalid {
                what: what.into(),
                at,
                why: format!("arrays nested deeper than {MAX_ARRAY_DEPTH}"),
            });
        }
        let elem = self.value_type(what)?;
        let count: u64 = self.read(what)?;
        // Every element takes at least min_size bytes, so a count the rest of the file cannot
        // hold is refused before anything is allocated for it.
        if count > self.remaining() / elem.min_size() {
            return Err(ParseError::Invalid {
                what: what.into(),
                at,
                why: format!(
                    "array of {count} {elem} elements cannot fit in the {} bytes left",
                    self.remaining()
                ),
            });
        }
        let n = count as usize;
        fn many<T>(
            n: usize,
            mut f: impl FnMut() -> Result<T, ParseError>,
        ) -> Result<Vec<T>, ParseError> {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(f()?);
            }
            Ok(v)
        }
        Ok(match elem {
            ValueType::U8 => Array::U8(many(n, || self.read(what))?),
            ValueType::I8 => Array::I8(many(n, || self.read(what))?),
            ValueType::U16 => Array::U16(many(n, || self.read(what))?),
            ValueType::I16 => Array::I16(many(n, || self.read(what))?),
            ValueType::U32 => Array::U32(many(n, || self.read(what))?),
            ValueType::I32 => Array::I32(many(n, || self.read(what))?),
            ValueType::F32 => Array::F32(many(n, || self.read(what))?),
            ValueType::Bool => Array::Bool(many(n, || self.bool(what))?),
            ValueType::String => Array::String(many(n, || self.string(|| what.to_owned()))?),
            ValueType::Array => Array::Array(many(n, || self.array(what, depth + 1))?),
            ValueType::U64 => Array::U64(many(n, || self.read(what))?),
            ValueType::I64 => Array::I64(many(n, || self.read(what))?),
            ValueType::F64 => Array::F64(many(n, || self.read(what))?),
        })
    }
}

/// Types whose every bit pattern is a valid value, the only ones read with `read_unaligned`.
trait Plain {}
impl Plain for u8 {}
impl Plain for i8 {}
impl Plain for u16 {}
impl Plain for i16 {}
impl Plain for u32 {}
impl Plain for i32 {}
impl Plain for u64 {}
impl Plain for i64 {}
impl Plain for f32 {}
impl Plain for f64 {}
impl Plain for [u8; 4] {}
