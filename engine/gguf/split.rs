//! Split models (`<name>-00001-of-00003.gguf`, as `llama-gguf-split` writes them): every shard
//! is a complete GGUF file carrying `split.no` (0-based), `split.count` and, in practice,
//! `split.tensors.count`; the model is the union of their tensors.
//!
//! The shard suffix is parsed here rather than with `ggus::GGufFileName`, which unwraps a
//! `NonZero` and panics on a name like `x-00000-of-00002.gguf`.

use super::{Gguf, GgufError, open_shard};
use std::path::{Path, PathBuf};

/// Parses `<stem>-NNNNN-of-MMMMM.gguf` into (stem, N, M), N and M 1-based.
fn parse_shard_name(name: &str) -> Option<(&str, u32, u32)> {
    let body = name.strip_suffix(".gguf")?;
    let (rest, count) = body.rsplit_once("-of-")?;
    let (stem, index) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(index) || !digits(count) {
        return None;
    }
    Some((stem, index.parse().ok()?, count.parse().ok()?))
}

/// All shard paths of the split model `path` belongs to, or `None` if its name is not a
/// shard name. Any shard of the set may be given.
pub(super) fn shard_paths(path: &Path) -> Option<Vec<PathBuf>> {
    let name = path.file_name()?.to_str()?;
    let (stem, _, count) = parse_shard_name(name)?;
    let dir = path.parent().unwrap_or(Path::new(""));
    Some(
        (1..=count)
            .map(|i| dir.join(format!("{stem}-{i:05}-of-{count:05}.gguf")))
            .collect(),
    )
}

pub(super) fn open_shards(given: &Path, paths: &[PathBuf]) -> Result<Gguf, GgufError> {
    let split_err = |why: String| GgufError::Split {
        path: given.to_owned(),
        why,
    };
    if paths.is_empty() {
        return Err(split_err("shard count 00000 in the file name".into()));
    }
    if let Some((_, index, count)) = given
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_shard_name)
        && (index == 0 || index > count)
    {
        return Err(split_err(format!(
            "shard {index} of {count} in the file name"
        )));
    }
    let mut shards = Vec::with_capacity(paths.len());
    for (i, p) in paths.iter().enumerate() {
        if !p.exists() {
            return Err(split_err(format!("shard {} is missing", p.display())));
        }
        let shard = open_shard(p)?;
        let meta = super::Metadata::new(p.clone(), shard.parsed.metadata.clone());
        let no = meta.usize("split.no")?;
        let count = meta.usize("split.count")?;
        if no != i || count != paths.len() {
            return Err(meta.error(
                "split.no",
                format!(
                    "file says shard {no} of {count}, its name says {} of {}",
                    i,
                    paths.len()
                ),
            ));
        }
        shards.push(shard);
    }
    let model = Gguf::from_shards(shards)?;
    if let Some(expected) = model.metadata().opt_usize("split.tensors.count")?
        && expected != model.tensors().len()
    {
        return Err(split_err(format!(
            "split.tensors.count is {expected}, the shards hold {} tensors",
            model.tensors().len()
        )));
    }
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_parse_and_others_do_not() {
        assert_eq!(parse_shard_name("m-00002-of-00003.gguf"), Some(("m", 2, 3)));
        assert_eq!(
            parse_shard_name("a-b-00001-of-00001.gguf"),
            Some(("a-b", 1, 1))
        );
        assert_eq!(parse_shard_name("m.gguf"), None);
        assert_eq!(parse_shard_name("m-2-of-3.gguf"), None);
        assert_eq!(parse_shard_name("m-0000a-of-00003.gguf"), None);
        let paths = shard_paths(Path::new("/d/m-00002-of-00003.gguf")).unwrap();
        assert_eq!(paths[0], Path::new("/d/m-00001-of-00003.gguf"));
        assert_eq!(paths.len(), 3);
    }
}
