//! GGUF metadata values: the thirteen value types, typed arrays (nested allowed), and the
//! serialisation both the reader and the writer share.

use std::fmt;

/// The type tag of a metadata value (GGUF `gguf_metadata_value_type`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Bytes of a value of this type when it has a fixed size.
    pub fn fixed_size(self) -> Option<u64> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// The fewest bytes one value of this type can occupy in a file: bounds element counts
    /// against the bytes left before anything is allocated.
    pub fn min_size(self) -> u64 {
        match self {
            ValueType::String => 8,    // u64 length, empty string
            ValueType::Array => 4 + 8, // element type + count, empty array
            t => t.fixed_size().unwrap_or(1),
        }
    }

    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A typed array; nested arrays hold their own element type each.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// `string`, `u32`, or `array of i32` — what an error message says was found.
    pub fn type_description(&self) -> String {
        match self {
            Value::Array(a) => format!("array of {}", a.elem_type()),
            v => v.value_type().to_string(),
        }
    }

    /// The value as a signed integer when it is one of the eight integer types.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The value as f64 when it is a float or an integer.
    pub fn as_float(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_integer().map(|i| i as f64),
        }
    }
}

impl Array {
    pub fn elem_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Integer elements widened to i128, or `None` if the elements are not integers.
    pub fn integers(&self) -> Option<Vec<i128>> {
        fn widen<T: Copy + Into<i128>>(v: &[T]) -> Vec<i128> {
            v.iter().map(|&x| x.into()).collect()
        }
        Some(match self {
            Array::U8(v) => widen(v),
            Array::I8(v) => widen(v),
            Array::U16(v) => widen(v),
            Array::I16(v) => widen(v),
            Array::U32(v) => widen(v),
            Array::I32(v) => widen(v),
            Array::U64(v) => widen(v),
            Array::I64(v) => widen(v),
            _ => return None,
        })
    }

    /// Float (or integer) elements as f64.
    pub fn floats(&self) -> Option<Vec<f64>> {
        match self {
            Array::F32(v) => Some(v.iter().map(|&x| x.into()).collect()),
            Array::F64(v) => Some(v.clone()),
            a => a
                .integers()
                .map(|v| v.into_iter().map(|x| x as f64).collect()),
        }
    }

    /// Serialises the array body (element type, count, elements) as GGUF stores it.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.elem_type() as u32).to_le_bytes());
        out.extend_from_slice(&(self.len() as u64).to_le_bytes());
        fn fixed<T: Copy, const N: usize>(out: &mut Vec<u8>, v: &[T], f: fn(T) -> [u8; N]) {
            for &x in v {
                out.extend_from_slice(&f(x));
            }
        }
        match self {
            Array::U8(v) => out.extend_from_slice(v),
            Array::I8(v) => fixed(out, v, i8::to_le_bytes),
            Array::U16(v) => fixed(out, v, u16::to_le_bytes),
            Array::I16(v) => fixed(out, v, i16::to_le_bytes),
            Array::U32(v) => fixed(out, v, u32::to_le_bytes),
            Array::I32(v) => fixed(out, v, i32::to_le_bytes),
            Array::F32(v) => fixed(out, v, f32::to_le_bytes),
            Array::Bool(v) => out.extend(v.iter().map(|&b| b as u8)),
            Array::String(v) => v.iter().for_each(|s| encode_str(out, s)),
            Array::Array(v) => v.iter().for_each(|a| a.encode(out)),
            Array::U64(v) => fixed(out, v, u64::to_le_bytes),
            Array::I64(v) => fixed(out, v, i64::to_le_bytes),
            Array::F64(v) => fixed(out, v, f64::to_le_bytes),
        }
    }
}

impl Value {
    /// Serialises the value body (without its type tag) as GGUF stores it.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::U8(v) => out.push(*v),
            Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::Bool(v) => out.push(*v as u8),
            Value::String(s) => encode_str(out, s),
            Value::Array(a) => a.encode(out),
            Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
}

pub(crate) fn encode_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl fmt::Display for Value {
    /// Scalars as themselves; arrays summarised when long, so `inspect` stays readable.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => write!(f, "{s:?}"),
            Value::Array(a) => write!(f, "{a}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
        }
    }
}

impl fmt::Display for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 8;
        fn list<T: fmt::Debug>(f: &mut fmt::Formatter<'_>, v: &[T]) -> fmt::Result {
            let head: Vec<String> = v.iter().take(SHOWN).map(|x| format!("{x:?}")).collect();
            if v.len() > SHOWN {
                write!(f, "[{}, … ({} in all)]", head.join(", "), v.len())
            } else {
                write!(f, "[{}]", head.join(", "))
            }
        }
        match self {
            Array::U8(v) => list(f, v),
            Array::I8(v) => list(f, v),
            Array::U16(v) => list(f, v),
            Array::I16(v) => list(f, v),
            Array::U32(v) => list(f, v),
            Array::I32(v) => list(f, v),
            Array::F32(v) => list(f, v),
            Array::Bool(v) => list(f, v),
            Array::String(v) => list(f, v),
            Array::Array(v) => {
                let head: Vec<String> = v.iter().take(SHOWN).map(|a| a.to_string()).collect();
                if v.len() > SHOWN {
                    write!(f, "[{}, … ({} in all)]", head.join(", "), v.len())
                } else {
                    write!(f, "[{}]", head.join(", "))
                }
            }
            Array::U64(v) => list(f, v),
            Array::I64(v) => list(f, v),
            Array::F64(v) => list(f, v),
        }
    }
}
