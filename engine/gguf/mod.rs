//! GGUF: read (mmap, typed metadata, tensor table, checks; split files) and write (streaming).
//!
//! [`Gguf::open`] maps a file, parses it with every count and offset checked ([`reader`]), and
//! for a `-0000N-of-0000M.gguf` name opens all shards and takes the union of their tensors.
//! Nothing in a file is trusted before it is checked: a truncated, forged or fuzzed file gives
//! an error naming the file and the key or tensor, never a panic or an out-of-bounds read.

mod metadata;
pub mod reader;
mod split;
mod value;
pub mod writer;

pub use metadata::{MAX_LAYERS, Metadata};
pub use reader::{ParseError, Parsed, TensorInfo, parse};
pub use value::{Array, Value, ValueType};
pub use writer::{GgufWriter, TensorSource};

use memmap2::Mmap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Everything that can go wrong opening or querying a GGUF file; each variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    // The cause is part of the message and deliberately not a `source`: `{:#}` would print it twice.
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// Not a regular file, or unreadable (the path and what it is are in the message).
    #[error(transparent)]
    File(#[from] crate::files::FileError),
    #[error("{}: {error}", path.display())]
    Parse { path: PathBuf, error: ParseError },
    #[error("{}: key {key}: {why}", path.display())]
    Key {
        path: PathBuf,
        key: String,
        why: String,
    },
    #[error("{}: tensor {tensor}: {why}", path.display())]
    Tensor {
        path: PathBuf,
        tensor: String,
        why: String,
    },
    #[error("{}: split model: {why}", path.display())]
    Split { path: PathBuf, why: String },
}

/// One mapped file of a model.
struct Shard {
    path: PathBuf,
    map: Mmap,
    parsed: Parsed,
}

/// An opened GGUF model: one file, or all shards of a split model.
pub struct Gguf {
    shards: Vec<Shard>,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    /// Which tensors [`Gguf::tensor`] has handed out: what a model bound, so that a tensor its
    /// settings do not account for (a layer past `block_count`) is found and refused, as
    /// llama.cpp's loader refuses a file with the wrong number of tensors.
    looked_up: Vec<AtomicBool>,
}

impl Gguf {
    /// Opens a GGUF file; a shard name (`…-00001-of-00003.gguf`) opens every shard.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref();
        match split::shard_paths(path) {
            Some(paths) => split::open_shards(path, &paths),
            None => Self::from_shards(vec![open_shard(path)?]),
        }
    }

    fn from_shards(shards: Vec<Shard>) -> Result<Self, GgufError> {
        let first = &shards[0];
        let metadata = Metadata::new(first.path.clone(), first.parsed.metadata.clone());
        let mut tensors = Vec::new();
        let mut by_name = HashMap::new();
        for (i, shard) in shards.iter().enumerate() {
            for t in &shard.parsed.tensors {
                if by_name.insert(t.name.clone(), tensors.len()).is_some() {
                    return Err(GgufError::Tensor {
                        path: shard.path.clone(),
                        tensor: t.name.clone(),
                        why: "appears in more than one shard".into(),
                    });
                }
                tensors.push(TensorInfo {
                    shard: i,
                    ..t.clone()
                });
            }
        }
        let looked_up = tensors.iter().map(|_| AtomicBool::new(false)).collect();
        Ok(Self {
            shards,
            metadata,
            tensors,
            by_name,
            looked_up,
        })
    }

    /// A model held in memory (fuzzing, crafted inputs), parsed and checked exactly as a file
    /// is; `name` stands for its path in errors.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: &[u8]) -> Result<Self, GgufError> {
        let path = name.into();
        let parsed = parse(bytes).map_err(|error| GgufError::Parse {
            path: path.clone(),
            error,
        })?;
        let io = |error| GgufError::Io {
            path: path.clone(),
            error,
        };
        // A parsed file is at least a header long, so the anonymous map is never empty.
        let mut map = memmap2::MmapMut::map_anon(bytes.len()).map_err(io)?;
        map.copy_from_slice(bytes);
        let map = map.make_read_only().map_err(io)?;
        Self::from_shards(vec![Shard { path, map, parsed }])
    }

    /// The path the model was opened from (the first shard).
    pub fn path(&self) -> &Path {
        &self.shards[0].path
    }

    /// All shard paths, in order.
    pub fn paths(&self) -> Vec<&Path> {
        self.shards.iter().map(|s| s.path.as_path()).collect()
    }

    pub fn version(&self) -> u32 {
        self.shards[0].parsed.version
    }

    pub fn alignment(&self) -> u64 {
        self.shards[0].parsed.alignment
    }

    /// Metadata of the first shard (where llama.cpp reads it from too).
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Tensors of all shards, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`; it counts as used by the model from now on
    /// ([`Gguf::unused_tensors`]).
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        let &i = self.by_name.get(name)?;
        self.looked_up[i].store(true, Ordering::Relaxed);
        Some(&self.tensors[i])
    }

    /// Tensors nothing has asked for by name: after a model has bound its tensors, the ones
    /// its settings do not account for.
    pub fn unused_tensors(&self) -> impl Iterator<Item = &TensorInfo> {
        self.tensors
            .iter()
            .zip(&self.looked_up)
            .filter(|(_, used)| !used.load(Ordering::Relaxed))
            .map(|(t, _)| t)
    }

    /// The tensor's info, or an error naming the file and the missing tensor.
    pub fn require_tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensor(name).ok_or_else(|| GgufError::Tensor {
            path: self.path().to_owned(),
            tensor: name.into(),
            why: "missing".into(),
        })
    }

    /// The tensor's bytes, straight from the mapping (checked at open to lie inside the file).
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let map = &self.shards[t.shard].map;
        &map[t.file_offset as usize..(t.file_offset + t.n_bytes) as usize]
    }

    /// An error about `tensor` naming the file it lives in.
    pub fn tensor_error(&self, t: &TensorInfo, why: impl Into<String>) -> GgufError {
        GgufError::Tensor {
            path: self.shards[t.shard].path.clone(),
            tensor: t.name.clone(),
            why: why.into(),
        }
    }
}

fn open_shard(path: &Path) -> Result<Shard, GgufError> {
    let io = |error| GgufError::Io {
        path: path.to_owned(),
        error,
    };
    // By type first: a FIFO would block `open`, a directory or a device cannot be a model.
    let file = crate::files::open_regular(path, "GGUF file")?;
    // SAFETY: the mapping is read-only; a file truncated by another process while mapped would
    // fault, which no reader of mmapped files can prevent (llama.cpp has the same contract).
    let map = unsafe { Mmap::map(&file) }.map_err(io)?;
    let parsed = parse(&map).map_err(|error| GgufError::Parse {
        path: path.to_owned(),
        error,
    })?;
    Ok(Shard {
        path: path.to_owned(),
        map,
        parsed,
    })
}
