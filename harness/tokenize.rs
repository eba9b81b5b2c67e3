//! `harness tokenize`: token ids of texts, as fak's tokenizer (and llama.cpp's) produce them.
//!
//! Each input prints one line of space-separated ids; an empty input prints an empty line (no
//! BOS either, where `llama-tokenize` would print the BOS alone: there is nothing to begin). Special
//! tokens written in the text (`<|im_start|>`, …) are parsed by default, as `llama-tokenize`
//! does; `--no-parse-special` encodes them as plain text. BOS/EOS are added where the file's
//! `add_bos_token`/`add_eos_token` ask for them, as `llama-tokenize` adds them by default.
//! `--file` takes the file's bytes as they are (no trailing newline is dropped), like
//! `llama-tokenize -f … --no-escape`.

use anyhow::{Context, Result};
use fak::tokenizer::Tokenizer;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file whose tokenizer to use.
    #[arg(long)]
    pub model: PathBuf,
    /// A text to tokenize; repeat for several.
    #[arg(long, required_unless_present = "file", conflicts_with = "file")]
    pub text: Vec<String>,
    /// A UTF-8 file to tokenize whole; repeat for several.
    #[arg(long)]
    pub file: Vec<PathBuf>,
    /// Treat special-token text as plain text (default: parse it, like llama-tokenize).
    #[arg(long)]
    pub no_parse_special: bool,
    /// Print one JSON object instead of lines of ids.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let model = fak::gguf::Gguf::open(&args.model)?;
    let tokenizer = Tokenizer::from_gguf(&model)?;
    let inputs = read_inputs(&args)?;
    print!(
        "{}",
        render(&tokenizer, &inputs, !args.no_parse_special, args.json)
    );
    Ok(())
}

/// What the command prints for `inputs`: a line of ids per input, or one JSON object.
fn render(tokenizer: &Tokenizer, inputs: &[String], parse_special: bool, json: bool) -> String {
    let ids: Vec<Vec<u32>> = inputs
        .iter()
        .map(|text| {
            if text.is_empty() {
                Vec::new()
            } else {
                tokenizer.encode(text, parse_special)
            }
        })
        .collect();
    if json {
        let inputs: Vec<_> = ids
            .iter()
            .map(|ids| serde_json::json!({"n_tokens": ids.len(), "ids": ids}))
            .collect();
        let report = serde_json::json!({
            "parse_special": parse_special,
            "add_bos": tokenizer.adds_bos(),
            "inputs": inputs,
        });
        return format!("{report}\n");
    }
    ids.iter()
        .map(|ids| {
            let line: Vec<String> = ids.iter().map(u32::to_string).collect();
            line.join(" ") + "\n"
        })
        .collect()
}

/// The largest `--file` read (a text of 256 MiB is about 64 M tokens, far past any context).
const MAX_INPUT_BYTES: u64 = 256 << 20;

fn read_inputs(args: &Args) -> Result<Vec<String>> {
    if args.file.is_empty() {
        return Ok(args.text.clone());
    }
    args.file
        .iter()
        .map(|path| {
            let bytes = fak::files::read_capped(
                path,
                "tokenizer input",
                MAX_INPUT_BYTES,
                "bytes tokenize reads from a file",
            )?;
            String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8", path.display()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_vocab(name: &str) -> Tokenizer {
        let path = format!(
            "{}/../tests/fixtures/vocab/ggml-vocab-{name}.gguf",
            env!("CARGO_MANIFEST_DIR")
        );
        Tokenizer::from_gguf(&fak::gguf::Gguf::open(path).unwrap()).unwrap()
    }

    fn qwen2() -> Tokenizer {
        fixture_vocab("qwen2")
    }

    #[test]
    fn one_line_of_ids_per_input_and_an_empty_line_for_empty_input() {
        let tok = qwen2();
        let inputs = [
            "Hello world".to_string(),
            String::new(),
            "<|im_end|>".to_string(),
        ];
        let out = render(&tok, &inputs, true, false);
        let lines: Vec<&str> = out.split_terminator('\n').collect();
        assert_eq!(lines.len(), 3, "{out:?}");
        for (line, text) in lines.iter().zip(&inputs) {
            let ids: Vec<u32> = line
                .split(' ')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect();
            assert_eq!(ids, tok.encode(text, true), "{text:?}");
        }
        assert_eq!(lines[1], "");
    }

    #[test]
    fn empty_input_is_an_empty_line_even_where_bos_is_added() {
        let tok = fixture_vocab("llama-bpe");
        assert!(tok.adds_bos());
        let out = render(&tok, &[String::new(), "x".to_string()], true, false);
        let x = tok.encode("x", true);
        assert_eq!(
            x.first().copied(),
            tok.bos(),
            "a non-empty input does get BOS"
        );
        let x: Vec<String> = x.iter().map(u32::to_string).collect();
        assert_eq!(out, format!("\n{}\n", x.join(" ")));
    }

    #[test]
    fn json_holds_the_ids_and_the_parse_mode() {
        let tok = qwen2();
        let out = render(&tok, &["<|im_end|>".to_string()], false, true);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["parse_special"], false);
        let ids: Vec<u32> = serde_json::from_value(v["inputs"][0]["ids"].clone()).unwrap();
        assert_eq!(ids, tok.encode("<|im_end|>", false));
        assert_eq!(v["inputs"][0]["n_tokens"], ids.len());
    }
}
