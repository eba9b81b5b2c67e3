//! Streaming GGUF v3 writer on ggus's `GGufWriter`.
//!
//! The header, metadata and tensor table are known up front (shapes and types fix every
//! offset), so they are written first; then each tensor's [`TensorSource`] is called in order
//! and streams its bytes straight to the file. Only the tensor being produced is ever in
//! memory, so a 27B-shape model writes with a few hundred MB of RAM. The file is written under
//! a temporary name and renamed at the end, so an interrupted write leaves no truncated model.

use super::GgufError;
use super::reader::{DEFAULT_ALIGNMENT, MAX_DIMS, MAX_TENSOR_NAME, align_up};
use super::value::{Value, encode_str};
use crate::quant::GgmlType;
use ggus::{GGufFileHeader, GGufWriter as RawWriter};
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

/// Produces one tensor's bytes (exactly `row_bytes · rows` of them) into the writer.
pub type TensorSource = Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send>;

struct PendingTensor {
    name: String,
    ty: GgmlType,
    shape: Vec<u64>,
    n_bytes: u64,
    source: TensorSource,
}

pub struct GgufWriter {
    alignment: u64,
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

/// A writer-side mistake (a bad key or tensor), reported before any byte is written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("key {key}: {why}")]
    Key { key: String, why: String },
    #[error("tensor {tensor}: {why}")]
    Tensor { tensor: String, why: String },
}

impl GgufWriter {
    pub fn new() -> Self {
        Self {
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Sets a metadata key (replacing an earlier value in place). `general.alignment` must be a
    /// u32 power of two and changes the data alignment.
    pub fn set(&mut self, key: &str, value: Value) -> Result<(), WriteError> {
        if key == "general.alignment" {
            match value {
                Value::U32(a) if a.is_power_of_two() => self.alignment = a.into(),
                ref v => {
                    return Err(WriteError::Key {
                        key: key.into(),
                        why: format!("must be a u32 power of two, got {v}"),
                    });
                }
            }
        }
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.metadata.push((key.into(), value)),
        }
        Ok(())
    }

    /// Queues a tensor; its bytes come from `source` when the file is written.
    pub fn add_tensor(
        &mut self,
        name: &str,
        ty: GgmlType,
        shape: &[u64],
        source: TensorSource,
    ) -> Result<(), WriteError> {
        let fail = |why: String| WriteError::Tensor {
            tensor: name.into(),
            why,
        };
        if name.len() > MAX_TENSOR_NAME {
            return Err(fail(format!("name longer than {MAX_TENSOR_NAME} bytes")));
        }
        if shape.len() > MAX_DIMS {
            return Err(fail(format!(
                "{} dimensions, at most {MAX_DIMS}",
                shape.len()
            )));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(fail("added twice".into()));
        }
        let row_len = shape.first().copied().unwrap_or(1);
        let row_bytes = ty.row_bytes(row_len).ok_or_else(|| {
            fail(format!(
                "row length {row_len} is not a multiple of the {ty} block size {}",
                ty.block_elems()
            ))
        })?;
        let n_bytes = shape
            .iter()
            .skip(1)
            .try_fold(row_bytes, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| fail("byte size overflows".into()))?;
        self.tensors.push(PendingTensor {
            name: name.into(),
            ty,
            shape: shape.to_vec(),
            n_bytes,
            source,
        });
        Ok(())
    }

    /// Bytes of tensor data the file will hold (for a progress bar).
    pub fn data_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_bytes).sum()
    }

    /// Writes the file; `progress` is told each time tensor bytes are written. Returns the file size.
    pub fn write(self, path: &Path, progress: impl FnMut(u64)) -> Result<u64, GgufError> {
        self.write_file(path, Data::Stream, progress)
    }

    /// Writes the header, metadata and tensor table and leaves the tensor data a hole: the file
    /// has its full size but is sparse (the data reads as zeros and takes no disk), so the layout
    /// of a model of any size is written at once, for tools that read no weights. The tensor
    /// sources are not called. Returns the file size.
    pub fn write_layout(self, path: &Path) -> Result<u64, GgufError> {
        self.write_file(path, Data::Hole, |_| {})
    }

    fn write_file(
        self,
        path: &Path,
        data: Data,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, GgufError> {
        let tmp = path.with_extension("gguf.partial");
        let io = |error| GgufError::Io {
            path: path.to_owned(),
            error,
        };
        let mut file = Latched {
            file: File::create(&tmp).map_err(io)?,
            error: None,
        };
        let size = self.write_to(&mut file, path, data, &mut progress);
        match size {
            Ok(size) => {
                std::fs::rename(&tmp, path).map_err(io)?;
                Ok(size)
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    fn write_to(
        self,
        out: &mut Latched,
        path: &Path,
        data: Data,
        progress: &mut dyn FnMut(u64),
    ) -> Result<u64, GgufError> {
        let io = |error| GgufError::Io {
            path: path.to_owned(),
            error,
        };
        let header = GGufFileHeader::new(3, self.tensors.len() as u64, self.metadata.len() as u64);
        let mut w = RawWriter::new(&mut *out);
        w.write_header(header).map_err(io)?;

        let mut table = Vec::new();
        for (key, value) in &self.metadata {
            encode_str(&mut table, key);
            table.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            value.encode(&mut table);
        }
        let (mut offset, mut data_end) = (0u64, 0u64);
        for t in &self.tensors {
            encode_str(&mut table, &t.name);
            table.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for d in &t.shape {
                table.extend_from_slice(&d.to_le_bytes());
            }
            table.extend_from_slice(&t.ty.id().to_le_bytes());
            table.extend_from_slice(&offset.to_le_bytes());
            data_end = offset + t.n_bytes;
            offset =
                align_up(offset + t.n_bytes, self.alignment).expect("sizes checked in add_tensor");
        }
        w.write_data(&table).map_err(io)?;

        let alignment = self.alignment as usize;
        if let Data::Hole = data {
            w.write_padding(alignment).map_err(io)?;
            let size = w.written_bytes() as u64 + data_end;
            drop(w);
            if let Some(e) = out.error.take() {
                return Err(io(e));
            }
            out.file.set_len(size).map_err(io)?;
            return Ok(size);
        }
        for t in self.tensors {
            w.write_padding(alignment).map_err(io)?;
            let mut sink = Sink {
                w: &mut w,
                written: 0,
                progress: &mut *progress,
            };
            (t.source)(&mut sink).map_err(|e| GgufError::Tensor {
                path: path.to_owned(),
                tensor: t.name.clone(),
                why: format!("writing data: {e}"),
            })?;
            if sink.written != t.n_bytes {
                return Err(GgufError::Tensor {
                    path: path.to_owned(),
                    tensor: t.name,
                    why: format!(
                        "source wrote {} bytes, expected {}",
                        sink.written, t.n_bytes
                    ),
                });
            }
        }
        let size = w.written_bytes() as u64;
        drop(w); // flushes ggus's internal BufWriter into `out`, which keeps any error
        match out.error.take() {
            Some(e) => Err(io(e)),
            None => Ok(size),
        }
    }
}

/// The output file, remembering a write error: ggus's writer buffers internally and flushes on
/// drop, where an error (a full disk) would otherwise be lost.
/// What follows the tensor table.
enum Data {
    /// Every tensor's bytes, from its source.
    Stream,
    /// Nothing: the file is extended to its size, leaving a hole.
    Hole,
}

struct Latched {
    file: File,
    error: Option<io::Error>,
}

impl Write for Latched {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write_all(buf).map_err(|e| {
            let kept = io::Error::new(e.kind(), e.to_string());
            self.error.get_or_insert(e);
            kept
        })?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Counts what a tensor source writes, so a source that writes too little or too much is caught.
struct Sink<'a, W: Write> {
    w: &'a mut RawWriter<W>,
    written: u64,
    progress: &'a mut dyn FnMut(u64),
}

impl<W: Write> Write for Sink<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.w.write_data(buf)?;
        self.written += buf.len() as u64;
        (self.progress)(buf.len() as u64);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
