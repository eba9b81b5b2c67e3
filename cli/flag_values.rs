//! Values the commands' flags take beyond clap's own: byte counts (`--cache-mem`) and token-id
//! lists (`--tokens`).

use anyhow::{Context, Result};

/// `--tokens`: ids separated by commas or whitespace.
pub fn parse_token_ids(list: &str) -> Result<Vec<u32>> {
    list.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>()
                .with_context(|| format!("--tokens: {s:?} is not a token id"))
        })
        .collect()
}

/// A byte count: digits with an optional K, M or G (×1024ⁿ; `KiB`, `MB` and the like read the
/// same) suffix.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count (e.g. 1073741824, 512M, 2G)"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (use K, M or G)")),
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} overflows 64 bits"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("0"), Ok(0));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("2g"), Ok(2 << 30));
        assert_eq!(parse_bytes("3 KiB"), Ok(3 << 10));
        assert!(parse_bytes("1.5G").is_err());
        assert!(parse_bytes("12X").is_err());
        assert!(parse_bytes("99999999999G").is_err());
    }

    #[test]
    fn token_lists_take_commas_and_spaces() {
        assert_eq!(parse_token_ids("1, 2 3,,4").unwrap(), vec![1, 2, 3, 4]);
        assert!(parse_token_ids("1,x").is_err());
    }
}
