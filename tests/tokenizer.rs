//! The tokenizer against llama.cpp: its own test vectors for the vocab GGUFs in
//! `fixtures/vocab`, and `llama-tokenize` from the peer build on strings of our own; chat
//! templates against Python jinja2.

use fak::gguf::{Gguf, GgufWriter, Value};
use fak::tokenizer::{CHATML_TEMPLATE, ChatMessage, ChatTemplate, Tokenizer, TokenizerError};
use fak_tests::{fixture, llama_cpp_tool, python};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const VOCABS: [&str; 3] = ["qwen2", "qwen35", "llama-bpe"];

fn vocab_path(name: &str) -> PathBuf {
    fixture(&format!("vocab/ggml-vocab-{name}.gguf"))
}

fn load(name: &str) -> Tokenizer {
    let model = Gguf::open(vocab_path(name)).expect("fixture opens");
    Tokenizer::from_gguf(&model).expect("fixture tokenizer loads")
}

/// The cases of `<vocab>.inp`/`.out`, read as llama.cpp's tests/test-tokenizer-0.cpp reads
/// them: inputs are separated by `\n__ggml_vocab_test__\n` (so each input's last newline
/// belongs to the separator), outputs are one line of space-separated ids per input.
fn vocab_cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let inp = std::fs::read_to_string(format!("{}.inp", vocab_path(name).display())).unwrap();
    let out = std::fs::read_to_string(format!("{}.out", vocab_path(name).display())).unwrap();
    const SEP: &str = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find(SEP) {
            Some(at) => {
                inputs.push(rest[..at].to_owned());
                rest = &rest[at + SEP.len()..];
            }
            None => {
                inputs.push(rest.to_owned());
                rest = "";
            }
        }
    }
    let outputs: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|id| id.parse().unwrap()).collect())
        .collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{name}: .inp and .out disagree on the case count"
    );
    inputs.into_iter().zip(outputs).collect()
}

fn matches_llama_cpp_test_vectors(name: &str) {
    let tok = load(name);
    let cases = vocab_cases(name);
    assert!(cases.len() > 20, "{name}: only {} cases read", cases.len());
    for (text, expected) in cases {
        // test-tokenizer-0 tokenizes with add_special = false, parse_special = false.
        assert_eq!(
            tok.encode_plain(&text, false),
            expected,
            "{name}: input {text:?}"
        );
    }
}

#[test]
fn qwen2_matches_llama_cpp_test_vectors() {
    matches_llama_cpp_test_vectors("qwen2");
}

#[test]
fn qwen35_matches_llama_cpp_test_vectors() {
    matches_llama_cpp_test_vectors("qwen35");
}

#[test]
fn llama_bpe_matches_llama_cpp_test_vectors() {
    matches_llama_cpp_test_vectors("llama-bpe");
}

/// The converter's pre-tokenizer fingerprint string (`chktxt` in convert_hf_to_gguf.py).
const CHKTXT: &str = "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\u{1F680} (normal) \
    \u{1F636}\u{200D}\u{1F32B}\u{FE0F} (multiple emojis concatenated) \u{2705} \u{1F999}\u{1F999} \
    3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 \
    \u{1780}\u{17B6}\u{1793}\u{17CB}\u{178F}\u{17C2}\u{1796}\u{17B7}\u{179F}\u{17C1}\u{179F}\u{17A2}\u{17B6}\u{1785}\u{1F601} \
    ?\u{6211}\u{60F3}\u{5728}apple\u{5DE5}\u{4F5C}1314151\u{5929}\u{FF5E} ------======= \
    \u{43D}\u{435}\u{449}\u{43E} \u{43D}\u{430} \u{411}\u{44A}\u{43B}\u{433}\u{430}\u{440}\u{441}\u{43A}\u{438} \
    ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? \
    'M not sure I'll make it, 'D you like some tea? We'Ve a'lL";

/// Strings of our own, each aimed at a corner of the pre-tokenizers or of BPE.
fn corpus() -> Vec<String> {
    let mut strings: Vec<String> = [
        // code with tabs, indentation and trailing spaces
        "fn main() {\n\tlet x = 42;\n\t\tif x > 3 { println!(\"{x}\"); }\n}\n",
        "def f(a, b):\n    return a**2 + b  \n\n\n    # comment\t\n",
        // emoji: ZWJ sequences, skin tones, flags, a variation selector
        "\u{1F469}\u{200D}\u{1F469}\u{200D}\u{1F467}\u{200D}\u{1F466} family, \
         \u{1F3F3}\u{FE0F}\u{200D}\u{1F308} flag, \u{1F44D}\u{1F3FD} ok \u{1F999}\u{1F999}\u{1F999}",
        // CJK, kana, hangul, fullwidth
        "我想在apple工作1314151天～ 日本語のテキスト、カタカナ。한국어 텍스트ＡＢＣ１２３",
        // Devanagari and Thai: combining marks (where qwen35 differs from qwen2)
        "नमस्ते दुनिया, क्षत्रिय हिन्दी। ",
        "สวัสดีครับ ภาษาไทย น้ำ ที่นี่ ๑๒๓",
        // a combining mark after a space, after punctuation, at the start
        "\u{0301}a e\u{0301} !\u{0301} x \u{0308}\u{0308}y",
        // long whitespace runs, mixed with tabs and line endings
        &format!("a{}b\n\n\n\n   \t\t  \n{}", " ".repeat(40), " ".repeat(17)),
        "line1\r\nline2\r\n\r\n  \r\r\n\t\n",
        // non-ASCII whitespace (NBSP, NEL, ideographic space) and a zero-width space
        "x\u{00A0}y\u{0085}z\u{3000}w \u{200B}v  \u{00A0} u",
        // digit runs in several scripts
        "3333333 1234567890 \u{0661}\u{0662}\u{0663}\u{0664}\u{0665} 12.50$ 0x1F 1e-9",
        // contractions in mixed case
        "I'LL we'Re YOU'VE he'D she'S it'M they'll don't CAN'T 'tis o'clock ''s",
        // private use and unassigned code points
        "\u{E000}\u{10FFFD} \u{0378}! \u{E000}a",
        // long words: BPE on hundreds of symbols
        &"a".repeat(300),
        &"\u{1F600}".repeat(40),
        &"ab".repeat(150),
        // edge cases
        "",
        " ",
        "\n",
        "'",
        " 's",
        CHKTXT,
    ]
    .map(String::from)
    .to_vec();
    strings.extend(special_corpus());
    strings
}

/// Strings with special-token text in them: where `parse_special` matters.
fn special_corpus() -> Vec<String> {
    [
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        // </s> is an ordinary token in Qwen's vocabulary that llama.cpp makes a control token.
        "a</s>b <|im_end|><|im_end|>x[PAD151700] [PAD151646][PAD151646]",
        "<|im_start|<|im_start|>> <<|eot_id|>|>",
    ]
    .map(String::from)
    .to_vec()
}

static TMP_COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A fresh path in the temp dir for this test process.
fn temp_path(ext: &str) -> PathBuf {
    let n = TMP_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("fak-tokenizer-{}-{n}.{ext}", std::process::id()))
}

/// `llama-tokenize` on the exact bytes of `text` (from a file, escapes off), ids only.
fn peer_tokenize(vocab: &Path, text: &str, parse_special: bool, bos: bool) -> Vec<u32> {
    let file = temp_path("txt");
    std::fs::write(&file, text).unwrap();
    let mut cmd = Command::new(llama_cpp_tool("llama-tokenize"));
    cmd.arg("-m").arg(vocab).arg("-f").arg(&file);
    cmd.args(["--ids", "--log-disable", "--no-escape"]);
    if !parse_special {
        cmd.arg("--no-parse-special");
    }
    if !bos {
        cmd.arg("--no-bos");
    }
    let out = cmd.output().expect("llama-tokenize runs");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "llama-tokenize failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let list = stdout
        .lines()
        .last()
        .expect("llama-tokenize printed the ids");
    let inner = list.trim().trim_start_matches('[').trim_end_matches(']');
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect()
}

/// The peer's tokens for each of `strings`, from one `llama-tokenize` run: the strings joined
/// by the EOS token's text, a control token, so that with special tokens parsed each string is a
/// fragment of its own and tokenizes exactly as it would alone.
fn peer_tokenize_each(name: &str, tok: &Tokenizer, strings: &[String]) -> Vec<Vec<u32>> {
    let sep_id = tok.eos().expect("fixture has an EOS token");
    let sep = tok.token_text(sep_id).unwrap();
    for s in strings {
        assert!(
            !s.contains(sep),
            "{name}: corpus string {s:?} contains the separator {sep:?}"
        );
    }
    let ids = peer_tokenize(&vocab_path(name), &strings.join(sep), true, false);
    let parts: Vec<Vec<u32>> = ids.split(|&id| id == sep_id).map(<[u32]>::to_vec).collect();
    assert_eq!(parts.len(), strings.len(), "{name}: separator count");
    parts
}

fn matches_llama_tokenize_on_own_strings(name: &str) {
    let tok = load(name);
    let strings = corpus();
    let peer = peer_tokenize_each(name, &tok, &strings);
    for (s, expected) in strings.iter().zip(peer) {
        assert_eq!(
            tok.encode_plain(s, true),
            expected,
            "{name}, parse_special: {s:?}"
        );
    }
    for s in special_corpus() {
        let expected = peer_tokenize(&vocab_path(name), &s, false, false);
        assert_eq!(
            tok.encode_plain(&s, false),
            expected,
            "{name}, no parse_special: {s:?}"
        );
    }
    // BOS exactly where llama-tokenize puts it by default.
    let text = "Hello world";
    assert_eq!(
        tok.encode(text, true),
        peer_tokenize(&vocab_path(name), text, true, true),
        "{name}: BOS"
    );
}

#[test]
fn qwen2_matches_llama_tokenize_on_own_strings() {
    matches_llama_tokenize_on_own_strings("qwen2");
}

#[test]
fn qwen35_matches_llama_tokenize_on_own_strings() {
    matches_llama_tokenize_on_own_strings("qwen35");
}

#[test]
fn llama_bpe_matches_llama_tokenize_on_own_strings() {
    matches_llama_tokenize_on_own_strings("llama-bpe");
}

/// The last line of llama.cpp's vocabulary summary (`llama_vocab::print_info`), printed after
/// the BOS, EOS and every EOG line.
const VOCAB_SUMMARY_END: &str = "print_info: max token length";

/// How long the peer may take to load a vocabulary and print its summary.
const PEER_LOG_TIMEOUT: Duration = Duration::from_secs(120);

/// The peer's verbose load log up to the end of its vocabulary summary.
///
/// llama.cpp's log lines go through a queue that a worker thread prints, and the logger is
/// leaked at exit by design (common/log.cpp `common_log_main`: "logs may be lost if not flushed
/// before the program exits"): once `main` returns, whatever the worker has not printed yet is
/// gone. On a loaded machine that can be the whole summary, EOG lines included. So the peer
/// must not exit until the lines are read: with `--stdin`, llama-tokenize loads the vocabulary
/// (printing the summary) and then blocks reading its input, and the log is read up to the
/// summary's last line before that input is closed and the process let go.
fn peer_vocab_log(vocab: &Path) -> String {
    let mut child = Command::new(llama_cpp_tool("llama-tokenize"))
        .arg("-m")
        .arg(vocab)
        .args(["--stdin", "--ids", "-v"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("llama-tokenize starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let (send, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + PEER_LOG_TIMEOUT;
    let mut log = String::new();
    let complete = loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                let end = line.contains(VOCAB_SUMMARY_END);
                log += &line;
                log.push('\n');
                if end {
                    break true;
                }
            }
            // Stderr closed (the peer exited) or the deadline passed.
            Err(_) => break false,
        }
    };
    if !complete {
        let _ = child.kill();
    }
    // The summary is read: let the peer tokenize its (empty) input and exit.
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("llama-tokenize ends");
    reader.join().expect("the log reader ends");
    assert!(
        complete,
        "{}: llama-tokenize printed no {VOCAB_SUMMARY_END:?} line within {} s ({}):\n{log}",
        vocab.display(),
        PEER_LOG_TIMEOUT.as_secs(),
        out.status
    );
    assert!(
        out.status.success(),
        "{}: llama-tokenize failed ({}):\n{log}",
        vocab.display(),
        out.status
    );
    log
}

/// The peer's BOS, EOS and end-of-generation ids, from its verbose load log
/// (`print_info: EOG token = <id> '<text>'`).
fn peer_special_ids(name: &str) -> (Option<u32>, Option<u32>, Vec<u32>) {
    let log = peer_vocab_log(&vocab_path(name));
    let ids_after = |label: &str| -> Vec<u32> {
        log.lines()
            .filter_map(|l| {
                l.split_once(&format!("print_info: {label}"))?
                    .1
                    .split_once('=')?
                    .1
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .collect()
    };
    let eog = ids_after("EOG token");
    assert!(
        !eog.is_empty(),
        "{name}: no EOG lines in the peer's vocabulary summary:\n{log}"
    );
    (
        ids_after("BOS token").first().copied(),
        ids_after("EOS token").first().copied(),
        eog,
    )
}

#[test]
fn special_ids_and_end_of_generation_match_llama_cpp() {
    for name in VOCABS {
        let tok = load(name);
        let (bos, eos, mut eog) = peer_special_ids(name);
        eog.sort_unstable();
        assert_eq!(tok.bos(), bos, "{name}: BOS");
        assert_eq!(tok.eos(), eos, "{name}: EOS");
        assert_eq!(tok.eog_ids(), eog.as_slice(), "{name}: EOG set");
        for &id in &eog {
            assert!(tok.is_eog(id), "{name}: {id}");
        }
        let not_eog = tok.encode_plain("Hello", false);
        assert!(
            not_eog.iter().all(|&id| !tok.is_eog(id)),
            "{name}: ordinary text is not EOG"
        );
    }
}

#[test]
fn user_defined_tokens_are_parsed_even_without_parse_special() {
    let tok = load("qwen2");
    // [PAD151700] is a user-defined token of this vocabulary (token type 4).
    let id = 151700;
    assert_eq!(tok.token_text(id), Some("[PAD151700]"));
    assert_eq!(tok.encode_plain("[PAD151700]", false), [id]);
    let control = tok.eos().unwrap();
    let control_text = tok.token_text(control).unwrap();
    assert_eq!(tok.encode_plain(control_text, true), [control]);
    assert!(
        tok.encode_plain(control_text, false).len() > 1,
        "control text is plain text here"
    );
}

#[test]
fn decoding_round_trips_the_text() {
    for name in VOCABS {
        let tok = load(name);
        for s in corpus() {
            let parsed = tok.encode_plain(&s, true);
            assert_eq!(tok.decode(&parsed, true).unwrap(), s, "{name}: {s:?}");
            let plain = tok.encode_plain(&s, false);
            assert_eq!(
                tok.decode(&plain, false).unwrap(),
                s,
                "{name}, no parse_special: {s:?}"
            );
        }
    }
}

#[test]
fn control_tokens_are_printed_only_when_asked() {
    let tok = load("qwen2");
    let text = "<|im_start|>user\nHi<|im_end|>";
    let ids = tok.encode_plain(text, true);
    assert_eq!(tok.decode(&ids, true).unwrap(), text);
    assert_eq!(tok.decode(&ids, false).unwrap(), "user\nHi");
}

#[test]
fn decoding_an_id_outside_the_vocabulary_is_an_error() {
    let tok = load("qwen2");
    let n = tok.vocab_size() as u32;
    match tok.decode(&[9707, n], false) {
        Err(TokenizerError::TokenOutOfRange { id, vocab_size }) => {
            assert_eq!((id, vocab_size), (n, n as usize));
        }
        other => panic!("expected TokenOutOfRange, got {other:?}"),
    }
    assert!(tok.stream_decoder(false).push(n).is_err());
}

#[test]
fn stream_decoder_holds_characters_split_across_tokens() {
    let text = "\u{1F999} नमस्ते \u{1F636}\u{200D}\u{1F32B}\u{FE0F} 我想 ok";
    for name in VOCABS {
        let tok = load(name);
        let ids = tok.encode_plain(text, false);
        let mut stream = tok.stream_decoder(false);
        let mut out = String::new();
        let mut first_held = None;
        for (i, &id) in ids.iter().enumerate() {
            match stream.push(id).unwrap() {
                Some(chunk) => {
                    assert!(
                        !chunk.contains('\u{FFFD}'),
                        "{name}: chunk {chunk:?} has a broken character"
                    );
                    out.push_str(&chunk);
                }
                None => {
                    first_held.get_or_insert(i);
                }
            }
        }
        out.push_str(&stream.finish());
        assert_eq!(out, text, "{name}");
        let held =
            first_held.expect("some token ends inside a character, or the test lost its point");
        // Decoding the ids up to there in one go cuts that character: lossy, unlike the stream.
        let cut = tok.decode(&ids[..=held], false).unwrap();
        assert!(cut.ends_with('\u{FFFD}'), "{name}: {cut:?}");
    }
}

/// A copy of the qwen2 vocab with `key` set to `value` (or removed, with `None`).
fn vocab_with(key: &str, value: Option<Value>) -> PathBuf {
    let model = Gguf::open(vocab_path("qwen2")).unwrap();
    let mut writer = GgufWriter::new();
    for (k, v) in model.metadata().entries() {
        if k != key {
            writer.set(k, v.clone()).unwrap();
        }
    }
    if let Some(v) = value {
        writer.set(key, v).unwrap();
    }
    let path = temp_path("gguf");
    writer.write(&path, |_| {}).unwrap();
    path
}

fn load_error(key: &str, value: Option<Value>) -> String {
    let path = vocab_with(key, value);
    let model = Gguf::open(&path).unwrap();
    let err = Tokenizer::from_gguf(&model)
        .err()
        .expect("tokenizer refuses the file");
    let _ = std::fs::remove_file(&path);
    err.to_string()
}

#[test]
fn unsupported_tokenizer_metadata_is_an_error_naming_the_key() {
    let err = load_error("tokenizer.ggml.pre", Some(Value::String("gpt-4o".into())));
    assert!(
        err.contains("tokenizer.ggml.pre") && err.contains("gpt-4o"),
        "{err}"
    );
    let err = load_error("tokenizer.ggml.pre", None);
    assert!(
        err.contains("tokenizer.ggml.pre") && err.contains("missing"),
        "{err}"
    );
    let err = load_error("tokenizer.ggml.model", Some(Value::String("llama".into())));
    assert!(
        err.contains("tokenizer.ggml.model") && err.contains("llama"),
        "{err}"
    );
    let err = load_error("tokenizer.ggml.merges", None);
    assert!(
        err.contains("tokenizer.ggml.merges") && err.contains("missing"),
        "{err}"
    );
    let err = load_error(
        "tokenizer.ggml.add_bos_token",
        Some(Value::String("yes".into())),
    );
    assert!(err.contains("tokenizer.ggml.add_bos_token"), "{err}");
}

/// One rendering to compare: messages, add_generation_prompt, enable_thinking.
type RenderCase = (Vec<ChatMessage>, bool, bool);

/// Renders `template` for each case with Python jinja2, the way Hugging Face
/// `apply_chat_template` does (tests/scripts/render_chat_template.py), in one Python run.
fn jinja2_render(template: &str, cases: &[RenderCase]) -> Vec<String> {
    let cases: Vec<serde_json::Value> = cases
        .iter()
        .map(|(messages, add_generation_prompt, enable_thinking)| {
            let messages: Vec<_> = messages
                .iter()
                .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
                .collect();
            serde_json::json!({
                "messages": messages,
                "add_generation_prompt": add_generation_prompt,
                "enable_thinking": enable_thinking,
            })
        })
        .collect();
    let request = serde_json::json!({
        "template": template,
        "bos_token": BOS_TEXT,
        "eos_token": EOS_TEXT,
        "cases": cases,
    });
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/render_chat_template.py");
    let mut child = Command::new(python())
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "jinja2 oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the oracle prints a JSON list of strings")
}

fn conversations() -> Vec<Vec<ChatMessage>> {
    let m = ChatMessage::new;
    vec![
        vec![m("system", "You are terse."), m("user", "What is 2+2?")],
        vec![m("user", "Hello!")],
        vec![
            m("system", "Answer in French."),
            m("user", "Name a colour."),
            m(
                "assistant",
                "<think>\nThe user wants French.\n</think>\n\nBleu.",
            ),
            m("user", "Another one?"),
        ],
        vec![
            m("user", "Write a haiku\nabout tabs\t."),
            m("assistant", "Tabs align the code"),
            m("user", "  Again, with   spaces  "),
            m("assistant", "<think>\n\n</think>\n\nSpaces drift apart"),
        ],
    ]
}

/// The special-token strings both renderers give the templates.
const BOS_TEXT: &str = "<|endoftext|>";
const EOS_TEXT: &str = "<|im_end|>";

fn template_matches_jinja2(template: &str) {
    let t = ChatTemplate::new(template, Some(BOS_TEXT), Some(EOS_TEXT));
    let cases: Vec<RenderCase> = conversations()
        .into_iter()
        .flat_map(|messages| {
            [(true, true), (true, false), (false, true)]
                .map(|(prompt, think)| (messages.clone(), prompt, think))
        })
        .collect();
    let oracle = jinja2_render(template, &cases);
    assert_eq!(oracle.len(), cases.len());
    for ((messages, add_generation_prompt, enable_thinking), expected) in cases.iter().zip(oracle) {
        let ours = t
            .render(messages, *add_generation_prompt, *enable_thinking)
            .unwrap();
        assert_eq!(
            ours, expected,
            "messages {messages:?}, add_generation_prompt {add_generation_prompt}, enable_thinking {enable_thinking}"
        );
    }
}

#[test]
fn qwen3_template_renders_as_jinja2_does() {
    template_matches_jinja2(
        &std::fs::read_to_string(fixture("templates/Qwen-Qwen3-0.6B.jinja")).unwrap(),
    );
}

#[test]
fn qwen35_template_renders_as_jinja2_does() {
    template_matches_jinja2(
        &std::fs::read_to_string(fixture("templates/Qwen3.5-4B.jinja")).unwrap(),
    );
}

#[test]
fn embedded_and_fallback_templates_render_as_jinja2_does() {
    let tok = load("qwen2");
    assert!(tok.has_chat_template());
    template_matches_jinja2(tok.chat_template().source());
    template_matches_jinja2(CHATML_TEMPLATE);
    let without = vocab_with("tokenizer.chat_template", None);
    let tok = Tokenizer::from_gguf(&Gguf::open(&without).unwrap()).unwrap();
    let _ = std::fs::remove_file(&without);
    assert!(!tok.has_chat_template());
    assert_eq!(tok.chat_template().source(), CHATML_TEMPLATE);
}

#[test]
fn qwen3_generation_prompt_follows_enable_thinking() {
    let template = std::fs::read_to_string(fixture("templates/Qwen-Qwen3-0.6B.jinja")).unwrap();
    let t = ChatTemplate::new(template, None, None);
    let msgs = [ChatMessage::new("user", "Hi")];
    let on = t.render(&msgs, true, true).unwrap();
    let off = t.render(&msgs, true, false).unwrap();
    assert!(on.ends_with("<|im_start|>assistant\n"), "{on:?}");
    assert!(
        off.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
        "{off:?}"
    );
}
