//! Typed access to GGUF metadata, with errors of the form
//! `model.gguf: key qwen3.block_count: expected u32, found string`.
//!
//! Integer hyperparameters are accepted in any integer type that holds the value (the spec
//! allows u64 where writers use u32), and any hyperparameter may be a scalar or a per-layer
//! array (llama.cpp's `get_key_or_arr`).

use super::GgufError;
use super::value::{Array, Value};
use std::collections::HashMap;
use std::path::PathBuf;

/// The most layers a per-layer value may describe: llama.cpp's `LLAMA_MAX_LAYERS` (no file it
/// loads has more), so a forged `block_count` never sizes an allocation.
pub const MAX_LAYERS: usize = 512;

pub struct Metadata {
    path: PathBuf,
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    pub fn new(path: PathBuf, entries: Vec<(String, Value)>) -> Self {
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        Self {
            path,
            entries,
            index,
        }
    }

    /// Key/value pairs in file order.
    pub fn entries(&self) -> &[(String, Value)] {
        &self.entries
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// An error about `key`, naming the file.
    pub fn error(&self, key: &str, why: impl Into<String>) -> GgufError {
        GgufError::Key {
            path: self.path.clone(),
            key: key.into(),
            why: why.into(),
        }
    }

    fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| self.error(key, "missing"))
    }

    fn mismatch(&self, key: &str, expected: &str, found: &Value) -> GgufError {
        self.error(
            key,
            format!("expected {expected}, found {}", found.type_description()),
        )
    }

    fn integer<T: TryFrom<i128>>(
        &self,
        key: &str,
        v: &Value,
        expected: &str,
    ) -> Result<T, GgufError> {
        let i = v
            .as_integer()
            .ok_or_else(|| self.mismatch(key, expected, v))?;
        T::try_from(i).map_err(|_| self.error(key, format!("value {i} does not fit {expected}")))
    }

    pub fn u32(&self, key: &str) -> Result<u32, GgufError> {
        self.integer(key, self.require(key)?, "u32")
    }

    pub fn u64(&self, key: &str) -> Result<u64, GgufError> {
        self.integer(key, self.require(key)?, "u64")
    }

    pub fn i64(&self, key: &str) -> Result<i64, GgufError> {
        self.integer(key, self.require(key)?, "i64")
    }

    pub fn usize(&self, key: &str) -> Result<usize, GgufError> {
        self.integer(key, self.require(key)?, "an unsigned integer")
    }

    pub fn f32(&self, key: &str) -> Result<f32, GgufError> {
        let v = self.require(key)?;
        v.as_float()
            .map(|f| f as f32)
            .ok_or_else(|| self.mismatch(key, "f32", v))
    }

    pub fn bool(&self, key: &str) -> Result<bool, GgufError> {
        match self.require(key)? {
            Value::Bool(b) => Ok(*b),
            v => Err(self.mismatch(key, "bool", v)),
        }
    }

    pub fn str(&self, key: &str) -> Result<&str, GgufError> {
        match self.require(key)? {
            Value::String(s) => Ok(s),
            v => Err(self.mismatch(key, "string", v)),
        }
    }

    pub fn array(&self, key: &str) -> Result<&Array, GgufError> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            v => Err(self.mismatch(key, "array", v)),
        }
    }

    pub fn str_array(&self, key: &str) -> Result<&[String], GgufError> {
        match self.require(key)? {
            Value::Array(Array::String(v)) => Ok(v),
            v => Err(self.mismatch(key, "array of string", v)),
        }
    }

    /// An integer array (any integer element type) as i64.
    pub fn int_array(&self, key: &str) -> Result<Vec<i64>, GgufError> {
        let a = self.array(key)?;
        let ints = a.integers().ok_or_else(|| {
            self.error(
                key,
                format!(
                    "expected array of integers, found array of {}",
                    a.elem_type()
                ),
            )
        })?;
        ints.into_iter()
            .map(|i| {
                i64::try_from(i)
                    .map_err(|_| self.error(key, format!("element {i} does not fit i64")))
            })
            .collect()
    }

    pub fn f32_array(&self, key: &str) -> Result<Vec<f32>, GgufError> {
        let a = self.array(key)?;
        a.floats()
            .map(|v| v.into_iter().map(|x| x as f32).collect())
            .ok_or_else(|| {
                self.error(
                    key,
                    format!(
                        "expected array of numbers, found array of {}",
                        a.elem_type()
                    ),
                )
            })
    }

    pub fn bool_array(&self, key: &str) -> Result<&[bool], GgufError> {
        match self.require(key)? {
            Value::Array(Array::Bool(v)) => Ok(v),
            v => Err(self.mismatch(key, "array of bool", v)),
        }
    }

    /// Optional variants: `Ok(None)` when the key is absent, an error when it has the wrong type.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>, GgufError> {
        self.opt(key, Self::u32)
    }

    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>, GgufError> {
        self.opt(key, Self::usize)
    }

    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>, GgufError> {
        self.opt(key, Self::f32)
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.opt(key, Self::bool)
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.opt(key, Self::str)
    }

    fn opt<'a, T>(
        &'a self,
        key: &str,
        f: impl FnOnce(&'a Self, &str) -> Result<T, GgufError>,
    ) -> Result<Option<T>, GgufError> {
        if self.contains(key) {
            f(self, key).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A per-layer integer: a scalar repeated `n_layers` times, or an array of exactly that
    /// length (llama.cpp's `get_key_or_arr`). `n_layers` is at most [`MAX_LAYERS`].
    pub fn usize_per_layer(&self, key: &str, n_layers: usize) -> Result<Vec<usize>, GgufError> {
        if n_layers > MAX_LAYERS {
            return Err(self.error(
                key,
                format!("{n_layers} layers, more than the {MAX_LAYERS} a model may have"),
            ));
        }
        match self.require(key)? {
            Value::Array(_) => {
                let v = self.int_array(key)?;
                if v.len() != n_layers {
                    return Err(self.error(
                        key,
                        format!(
                            "array has {} entries, expected one per layer ({n_layers})",
                            v.len()
                        ),
                    ));
                }
                v.into_iter()
                    .map(|x| {
                        usize::try_from(x)
                            .map_err(|_| self.error(key, format!("entry {x} is negative")))
                    })
                    .collect()
            }
            _ => Ok(vec![self.usize(key)?; n_layers]),
        }
    }
}
