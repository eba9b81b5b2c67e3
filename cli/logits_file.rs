//! The logits file `fak run --logits-out` (`harness run`) and `harness reference` write: raw little-endian
//! f32 `[rows, n_vocab]` with a JSON sidecar `<file>.json` (`{"n_vocab", "rows", "token_ids"}`:
//! row i holds the logits after `token_ids[i]`).

use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;

/// Writes `logits` (row i: after `ids[i]`) as raw f32 with the JSON sidecar `<file>.json`.
pub fn write_logits_file(logits: &[Vec<f32>], ids: &[u32], path: &PathBuf) -> Result<()> {
    let n_vocab = logits.first().map_or(0, Vec::len);
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    for row in logits {
        for v in row {
            file.write_all(&v.to_le_bytes())?;
        }
    }
    file.flush()?;
    let sidecar = serde_json::json!({ "n_vocab": n_vocab, "rows": logits.len(), "token_ids": ids });
    let meta = path.with_extension(format!(
        "{}json",
        path.extension()
            .map_or(String::new(), |e| format!("{}.", e.to_string_lossy()))
    ));
    std::fs::write(&meta, serde_json::to_vec_pretty(&sidecar)?)
        .with_context(|| format!("writing {}", meta.display()))?;
    Ok(())
}
