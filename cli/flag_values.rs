//! Values the commands' flags take beyond clap's own: byte counts (`--cache-mem`), token-id
//! lists (`--tokens`), and token and request counts bounded so that nothing is sized from
//! `--n-out 18446744073709551615`.

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

/// A token-count flag (a context, a prompt or output length): `min` up to the longest context a
/// model may declare ([`fak::model::bounds::Size::Context`]), so nothing is sized from
/// `--n-out 18446744073709551615` and sums of counts cannot overflow.
pub fn tokens(min: u64) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync {
    ranged(min, *fak::model::bounds::Size::Context.range().end() as u64)
}

/// A count of requests, prompts, agents, turns or steps: `min` to 100 000.
pub fn count(min: u64) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync {
    ranged(min, 100_000)
}

/// A whole number in `min..=max`; anything else (negative, too large, not a number) is refused
/// with the range.
pub fn ranged(min: u64, max: u64) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync {
    move |text: &str| {
        let v: i128 = text
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a whole number in {min}..={max}"))?;
        match u64::try_from(v) {
            Ok(v) if (min..=max).contains(&v) => Ok(v as usize),
            _ => Err(format!("{v} is not in {min}..={max}")),
        }
    }
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
    fn ranged_counts_refuse_negative_oversized_and_non_numbers_with_the_range() {
        let parse = ranged(1, 10);
        assert_eq!(parse(" 10"), Ok(10));
        assert_eq!(parse("0"), Err("0 is not in 1..=10".into()));
        assert_eq!(parse("-3"), Err("-3 is not in 1..=10".into()));
        assert_eq!(
            parse("18446744073709551616"),
            Err("18446744073709551616 is not in 1..=10".into())
        );
        assert!(
            parse("1e3")
                .unwrap_err()
                .contains("not a whole number in 1..=10")
        );
    }

    #[test]
    fn token_lists_take_commas_and_spaces() {
        assert_eq!(parse_token_ids("1, 2 3,,4").unwrap(), vec![1, 2, 3, 4]);
        assert!(parse_token_ids("1,x").is_err());
    }
}
