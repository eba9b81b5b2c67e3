//! Prints load time and encode time of `engine/tokenizer` (compiled in directly, with the GGUF
//! reader it needs). Each encode figure is the best of 5 runs; results go in
//! `../tokenizer-speed.md`.

#[path = "../../../engine/gguf/mod.rs"]
#[allow(dead_code, unused_imports)]
mod gguf;
#[path = "../../../engine/quant/mod.rs"]
#[allow(dead_code)]
mod quant;
#[path = "../../../engine/tokenizer/mod.rs"]
#[allow(dead_code)]
mod tokenizer;

use std::time::Instant;

fn best_of_5(mut f: impl FnMut()) -> f64 {
    f();
    (0..5)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (vocab, texts) = args.split_first().expect("usage: tokenizer-bench <vocab.gguf> <text file>...");
    let t = Instant::now();
    let model = gguf::Gguf::open(vocab).expect("GGUF opens");
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let tok = tokenizer::Tokenizer::from_gguf(&model).expect("tokenizer loads");
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    println!("{vocab}: open {open_ms:.1} ms, tokenizer load {load_ms:.1} ms, {} tokens", tok.vocab_size());
    for path in texts {
        let text = std::fs::read_to_string(path).expect("UTF-8 text file");
        let n = tok.encode_plain(&text, true).len();
        let secs = best_of_5(|| {
            std::hint::black_box(tok.encode_plain(&text, true));
        });
        println!(
            "{path}: {} bytes → {n} tokens in {:.2} ms ({:.1} Mtok/s)",
            text.len(),
            secs * 1e3,
            n as f64 / secs / 1e6
        );
    }
}
