//! Hostile input past the GGUF parser (issue 22): each case a hostile user once found — a
//! panic, an abort, a hang, a silent wrong answer or a misleading error — now ends in a clear
//! error (or a correct answer), one test per case.
//!
//! Crafted models are copies of a tiny model with the 256-token byte vocabulary (`harness synth
//! --vocab bytes`, Q4_K_M, 0.3 MiB for qwen3, 0.6 MiB for qwen35) with one key or tensor
//! edited, so the whole binary writes a few MB. Settings cases run the load-and-plan path
//! (`Gguf::open` → `DevicePlan::of`, what `Engine::load` does before any GPU work); command-line
//! cases run the `harness` binary; three tests load a model on the GPU (lavapipe in CI).

use fak::gguf::{Gguf, TensorInfo, Value};
use fak::model::DevicePlan;
use fak::runtime::{Engine, SamplingParams};
use fak::tokenizer::{ChatMessage, ChatTemplate, TemplateBudget};
use fak_tests::harness::{fak_bin, harness, synth_model};
use fak_tests::model::{rewrite_gguf, set_key};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hostile_input")
}

/// A fresh folder for one test.
fn folder(name: &str) -> PathBuf {
    let dir = scratch().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The base model of `arch` (`qwen3`: 4 layers, `qwen35`: 8), byte vocabulary, Q4_K_M.
fn base(arch: &str) -> PathBuf {
    let args = [
        "--arch", arch, "--preset", "tiny", "--quant", "q4_k_m", "--vocab", "bytes", "--seed", "7",
    ];
    synth_model(&scratch(), &format!("{arch}-tiny-bytes.gguf"), &args)
}

/// A copy of `arch`'s base model with `key` set to `value`.
fn with_key(arch: &str, name: &str, key: &str, value: Value) -> PathBuf {
    with_edits(arch, name, |keys| set_key(keys, key, value), |_| {})
}

fn with_edits(
    arch: &str,
    name: &str,
    edit_keys: impl FnOnce(&mut Vec<(String, Value)>),
    edit_tensors: impl FnOnce(&mut Vec<(String, &TensorInfo)>),
) -> PathBuf {
    let dst = scratch().join(format!("{name}.gguf"));
    rewrite_gguf(&base(arch), &dst, edit_keys, edit_tensors);
    dst
}

/// What loading `path` up to the device plan says: the error, or the plan.
fn plan(path: &Path, max_context: Option<usize>) -> Result<DevicePlan, String> {
    let gguf = Gguf::open(path).map_err(|e| e.to_string())?;
    DevicePlan::of(&gguf, max_context, 512).map_err(|e| e.to_string())
}

fn plan_error(path: &Path) -> String {
    match plan(path, None) {
        Ok(_) => panic!("{} was accepted", path.display()),
        Err(e) => e,
    }
}

fn assert_contains(text: &str, needle: &str) {
    assert!(text.contains(needle), "{needle:?} not in:\n{text}");
}

/// Runs a harness command to its end (failing the test, not hanging it, past 120 s).
fn run(mut command: Command) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running harness");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("{command:?} still running after 120 s: it hangs");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A command running the `fak` binary (`fak run`, `fak serve`).
fn fak() -> Command {
    Command::new(fak_bin())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A failed command whose stderr has `needle` and no panic.
fn assert_refused(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_contains(&err, needle);
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// A copy of a fixture packet folder (`run` or `scenario`).
fn packet_copy(which: &str, name: &str) -> PathBuf {
    let dir = folder(name);
    let src = fak_tests::fixture(&format!("packet/{which}"));
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    dir.join("packet.json")
}

// --- settings ---------------------------------------------------------------------------

#[test]
fn a_vocab_size_of_2_pow_62_is_refused_naming_the_key() {
    let path = with_key(
        "qwen3",
        "vocab-2p62",
        "qwen3.vocab_size",
        Value::U64(1 << 62),
    );
    assert_contains(
        &plan_error(&path),
        "key qwen3.vocab_size: 4611686018427387904 is outside the supported 1..=4194304 tokens",
    );
}

#[test]
fn block_counts_past_512_are_refused_before_anything_is_sized() {
    // 2^31 once filled 16 GiB for a minute, 2^32 − 1 aborted on a 34 GB allocation, 2^62 and up
    // overflowed the capacity of a per-layer vector.
    for v in [1 << 31, 0xFFFF_FFFF, 1 << 62, i64::MAX as u64, u64::MAX] {
        for arch in ["qwen3", "qwen35"] {
            let key = format!("{arch}.block_count");
            let path = with_key(arch, &format!("{arch}-layers-{v}"), &key, Value::U64(v));
            assert_contains(
                &plan_error(&path),
                &format!("key {key}: {v} is outside the supported 1..=512 layers"),
            );
        }
    }
}

#[test]
fn widths_and_head_counts_of_2_pow_62_are_refused_naming_the_key() {
    for (key, kind) in [
        ("embedding_length", "elements of width"),
        ("feed_forward_length", "elements of width"),
        ("attention.head_count", "heads"),
    ] {
        let full = format!("qwen3.{key}");
        let path = with_key("qwen3", &format!("qwen3-{key}"), &full, Value::U64(1 << 62));
        assert_contains(
            &plan_error(&path),
            &format!("key {full}: 4611686018427387904 is outside the supported 1..="),
        );
        assert_contains(&plan_error(&path), kind);
    }
    let path = with_key(
        "qwen35",
        "qwen35-ssm",
        "qwen35.ssm.state_size",
        Value::U64(1 << 62),
    );
    assert_contains(
        &plan_error(&path),
        "key qwen35.ssm.state_size: 4611686018427387904",
    );
}

#[test]
fn a_context_of_2_pow_62_is_refused_and_a_max_context_past_u32_is_clamped_to_the_model() {
    let path = with_key(
        "qwen3",
        "ctx-2p62",
        "qwen3.context_length",
        Value::U64(1 << 62),
    );
    assert_contains(
        &plan_error(&path),
        "key qwen3.context_length: 4611686018427387904 is outside the supported 1..=16777216",
    );
    // --max-context 4294967296 once wrapped to 0 as u32 ("min > max"); it is the model's.
    let plan = plan(&base("qwen3"), Some(1 << 32)).unwrap();
    assert_eq!(
        plan.max_context, 40_960,
        "the training context of the tiny preset"
    );
    assert_eq!(plan.pages_per_row(), 40_960 / DevicePlan::PAGE_SIZE);
}

#[test]
fn a_block_count_short_of_the_file_is_refused_naming_the_first_unused_tensor() {
    for n in [1u32, 3] {
        let path = with_key(
            "qwen3",
            &format!("qwen3-blocks-{n}"),
            "qwen3.block_count",
            Value::U32(n),
        );
        let err = plan_error(&path);
        assert_contains(&err, &format!("tensor blk.{n}."));
        assert_contains(
            &err,
            &format!("belongs to block {n}, but qwen3.block_count is {n}"),
        );
    }
    // qwen35 lists its layer kinds per block, so the short count is refused there first.
    let path = with_key(
        "qwen35",
        "qwen35-blocks-7",
        "qwen35.block_count",
        Value::U32(7),
    );
    assert_contains(&plan_error(&path), "qwen35.");
}

#[test]
fn a_block_count_past_the_file_is_refused_naming_the_missing_tensor() {
    let path = with_key(
        "qwen3",
        "qwen3-blocks-5",
        "qwen3.block_count",
        Value::U32(5),
    );
    assert_contains(&plan_error(&path), "tensor blk.4.attn_norm.weight: missing");
}

#[test]
fn a_tensor_the_settings_do_not_account_for_is_refused_by_name() {
    let path = with_edits(
        "qwen3",
        "qwen3-stray",
        |_| {},
        |tensors| {
            let norm = tensors
                .iter()
                .find(|t| t.0 == "output_norm.weight")
                .unwrap()
                .1;
            tensors.push(("stray.weight".into(), norm));
        },
    );
    assert_contains(
        &plan_error(&path),
        "tensor stray.weight: is not a tensor of this architecture with these settings",
    );
}

#[test]
fn a_tensor_of_the_wrong_shape_is_refused_naming_it_and_both_shapes() {
    let path = with_edits(
        "qwen3",
        "qwen3-shape",
        |_| {},
        |tensors| {
            let up = tensors
                .iter()
                .find(|t| t.0 == "blk.0.ffn_up.weight")
                .unwrap()
                .1;
            let down = tensors
                .iter_mut()
                .find(|t| t.0 == "blk.0.ffn_down.weight")
                .unwrap();
            down.1 = up;
        },
    );
    assert_contains(
        &plan_error(&path),
        "tensor blk.0.ffn_down.weight: shape [64, 256], expected [256, 64]",
    );
}

#[test]
fn a_tensor_count_of_2_pow_60_is_named_as_a_forged_count_not_a_short_file() {
    let mut bytes = std::fs::read(base("qwen3")).unwrap();
    bytes[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let path = scratch().join("tensor-count-2p60.gguf");
    std::fs::write(&path, bytes).unwrap();
    let err = plan_error(&path);
    assert_contains(
        &err,
        "tensor count at byte 8: 1152921504606846976 tensor infos cannot fit",
    );
    assert!(!err.contains("file ends early"), "{err}");
}

// --- chat templates -----------------------------------------------------------------------

fn render(template: &str) -> Result<String, String> {
    ChatTemplate::new(template, None, None)
        .render(&[ChatMessage::new("user", "Hi")], true, false)
        .map_err(|e| e.to_string())
}

#[test]
fn a_template_looping_ten_billion_times_stops_at_its_budget() {
    let err =
        render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
            .unwrap_err();
    assert_contains(&err, "chat template: rendering used up its budget");
}

#[test]
fn a_template_doubling_a_string_forty_times_stops_at_its_budget() {
    let err = render(
        "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}\
         {% endfor %}{{ ns.s | length }}",
    )
    .unwrap_err();
    assert_contains(&err, "chat template: rendering used up its budget");
}

#[test]
fn a_template_recursing_without_end_stops_at_the_recursion_limit() {
    let err = render("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}").unwrap_err();
    assert_contains(&err, "chat template: ");
    assert_contains(&err, "recursion");
}

#[test]
fn a_template_writing_past_the_output_cap_is_refused() {
    let err = render("{% for i in range(20000) %}{{ 'x' * 100 }}{% endfor %}").unwrap_err();
    assert_contains(&err, "output exceeds the");
}

#[test]
fn the_real_templates_render_within_a_tenth_of_their_budget_and_a_quarter_of_the_nesting() {
    let messages = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi"),
        ChatMessage::new("assistant", "<think>\nhm\n</think>\n\nHello."),
        ChatMessage::new("user", "And now?"),
    ];
    let full = TemplateBudget::for_messages(&messages);
    // Nesting is what the template's structure needs, not what its inputs add: a quarter of
    // the limit is room enough.
    let tenth = TemplateBudget {
        fuel: full.fuel / 10,
        recursion: full.recursion / 4,
        output_bytes: full.output_bytes / 10,
    };
    for name in ["Qwen-Qwen3-0.6B.jinja", "Qwen3.5-4B.jinja"] {
        let source =
            std::fs::read_to_string(fak_tests::fixture(&format!("templates/{name}"))).unwrap();
        let template = ChatTemplate::new(source, None, Some("<|im_end|>"));
        let text = template
            .render_within(&messages, true, false, tenth)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_contains(&text, "<|im_start|>assistant\n");
    }
}

// --- command-line values ------------------------------------------------------------------

#[test]
fn sampling_values_outside_their_ranges_are_refused_with_the_range_before_loading() {
    // The model does not exist: the values are checked before it is looked for, by the one
    // check the server's requests go through too (`SamplingParams::validated`).
    let cases = [
        (
            "--temp",
            "NaN",
            "temperature must be between 0 and 2, got NaN",
        ),
        (
            "--temp",
            "inf",
            "temperature must be between 0 and 2, got inf",
        ),
        (
            "--temp",
            "-1",
            "temperature must be between 0 and 2, got -1",
        ),
        (
            "--top-p",
            "NaN",
            "top_p must be greater than 0 and at most 1, got NaN",
        ),
        (
            "--top-p",
            "0",
            "top_p must be greater than 0 and at most 1, got 0",
        ),
        ("--top-p", "1.5", "got 1.5"),
        ("--min-p", "NaN", "min_p must be between 0 and 1, got NaN"),
        (
            "--repeat-penalty",
            "0",
            "repetition_penalty must be greater than 0 and at most 2, got 0",
        ),
        (
            "--presence-penalty",
            "-inf",
            "presence_penalty must be between -2 and 2, got -inf",
        ),
        (
            "--frequency-penalty",
            "NaN",
            "frequency_penalty must be between -2 and 2, got NaN",
        ),
    ];
    for (flag, value, needle) in cases {
        // `harness run` and `fak run` are the same code; both binaries are asked.
        for mut c in [harness(), fak()] {
            c.args(["run", "--model", "/nonexistent.gguf", "--prompt", "hi"])
                .arg(format!("{flag}={value}"));
            assert_refused(&run(c), needle);
        }
    }
}

#[test]
fn an_n_out_of_u64_max_and_token_ids_past_the_vocabulary_are_refused_by_the_engine() {
    let mut options = fak_tests::model::options(64, Default::default());
    options.max_context = Some(128);
    let mut engine = Engine::load(&base("qwen3"), &options).unwrap();
    let greedy = SamplingParams::greedy();
    let err = engine
        .generate(&[1, 2, 3], usize::MAX, &greedy, true, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        "prompt of 3 tokens plus 18446744073709551615 to generate exceeds the context of 128",
    );
    let n_vocab = engine.n_vocab() as u32;
    for bad in [n_vocab, u32::MAX] {
        let err = engine
            .generate(&[1, bad], 2, &greedy, true, &mut |_| {})
            .unwrap_err()
            .to_string();
        assert_contains(
            &err,
            &format!("token id {bad} is outside the vocabulary of {n_vocab}"),
        );
        let err = engine
            .teacher_forced_logits(&[bad])
            .unwrap_err()
            .to_string();
        assert_contains(&err, &format!("token id {bad} is outside the vocabulary"));
    }
    // Still serves a good request afterwards.
    let stats = engine
        .generate(&[1, 2, 3], 2, &greedy, true, &mut |_| {})
        .unwrap();
    assert_eq!(stats.tokens.len(), 2);
}

#[test]
fn the_cpu_reference_refuses_ids_past_the_vocabulary_and_generations_past_the_context() {
    let dir = folder("reference");
    let model = base("qwen3");
    let reference = |tokens: &str, n_out: &str| {
        let mut c = harness();
        c.args(["reference", "--model"])
            .arg(&model)
            .args(["--tokens", tokens, "--n-out", n_out, "--logits-out"])
            .arg(dir.join("logits.f32"));
        run(c)
    };
    assert_refused(&reference("1 282", "0"), "282");
    assert_refused(
        &reference("1 2", "40959"),
        "--n-out 40959: the prompt's 2 tokens plus 40959 generated exceed the model's context of \
         40960 tokens",
    );
}

#[test]
fn size_flags_past_their_range_are_refused_with_the_range() {
    let model = base("qwen3");
    let model = model.to_str().unwrap();
    let max = "18446744073709551615";
    let run_with = |flag: &str| ["run", "--model", model, "--prompt", "hi", flag].map(String::from);
    let mut cases: Vec<(Vec<String>, String)> = vec![
        (
            run_with("--top-k=-1").to_vec(),
            "-1 is not in 0..=4194304".into(),
        ),
        (
            run_with("--n-out=-5").to_vec(),
            "-5 is not in 0..=16777216".into(),
        ),
        (
            run_with(&format!("--n-out={max}")).to_vec(),
            format!("{max} is not in 0..=16777216"),
        ),
        (
            run_with("--max-context=4294967296").to_vec(),
            "4294967296 is not in 1..=16777216".into(),
        ),
    ];
    for (flag, range) in [("--n-ctx", "1..=16777216"), ("--prompts", "1..=100000")] {
        let args = ["threeway", "--model", model, flag, max].map(String::from);
        cases.push((args.to_vec(), format!("{max} is not in {range}")));
    }
    let reference = [
        "reference",
        "--model",
        model,
        "--tokens",
        "1",
        "--logits-out",
        "/dev/null",
    ];
    let mut args: Vec<String> = reference.map(String::from).to_vec();
    args.push(format!("--n-out={max}"));
    cases.push((args, format!("{max} is not in 0..=16777216")));
    let mut fak_cases: Vec<(Vec<String>, String)> = vec![(
        run_with(&format!("--n-out={max}")).to_vec(),
        format!("{max} is not in 0..=16777216"),
    )];
    // fak serve: --max-context once reached the u32 wrap, and --max-queue of 2^64 − 1 overflowed
    // the count of requests a server holds.
    for (flag, range) in [
        (
            "--max-context=4294967296",
            "4294967296 is not in 1..=16777216",
        ),
        (
            &format!("--max-queue={max}"),
            &format!("{max} is not in 0..=100000"),
        ),
        (
            &format!("--prefill-budget={max}"),
            &format!("{max} is not in 1..=16777216"),
        ),
        ("--prefill-budget=0", "0 is not in 1..=16777216"),
    ] {
        let args = ["serve", "--model", model, flag].map(String::from);
        fak_cases.push((args.to_vec(), range.to_string()));
    }
    let commands = cases
        .into_iter()
        .map(|case| (harness(), case))
        .chain(fak_cases.into_iter().map(|case| (fak(), case)));
    for (mut c, (args, range)) in commands {
        c.args(&args);
        let out = run(c);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "clap's usage error: {err}");
        assert_contains(&err, &range);
    }
    let mut c = harness();
    c.args([
        "threeway",
        "--model",
        model,
        "--prompts",
        "100000",
        "--n-ctx",
        "16000000",
    ])
    .arg("--out")
    .arg(folder("threeway-total"));
    assert_refused(
        &run(c),
        "is 1600006400000 tokens; a run holds at most 67108864",
    );
}

/// Runs `command` with stdout a pipe whose reading end is already closed.
fn with_closed_stdout(mut command: Command) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let child = command
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Ended by SIGPIPE as a Unix filter is (status 141 in a shell), or exited 0; no panic.
fn assert_quiet(out: &Output, what: &str) {
    let err = stderr(out);
    let quiet = out.status.success() || out.status.signal() == Some(libc::SIGPIPE);
    assert!(quiet, "{what}: {:?}\n{err}", out.status);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{what}: {err}"
    );
}

#[test]
fn a_closed_stdout_ends_inspect_and_validate_quietly() {
    let model = base("qwen3");
    let packet = fak_tests::fixture("packet/run/packet.json");
    for args in [
        vec!["inspect", model.to_str().unwrap()],
        vec!["validate", "--json", packet.to_str().unwrap()],
    ] {
        let mut c = harness();
        c.args(&args);
        assert_quiet(&with_closed_stdout(c), &format!("{args:?}"));
    }
}

/// An "error" line in a successful run's stderr (the lavapipe display probe printed one).
fn assert_no_error_line(err: &str) {
    assert!(
        !err.lines().any(|l| l.to_lowercase().contains("error")),
        "an error line on success:\n{err}"
    );
}

#[test]
fn a_successful_run_prints_no_error_line() {
    let mut c = harness();
    c.env_remove("XDG_RUNTIME_DIR")
        .args(["run", "--model"])
        .arg(base("qwen3"))
        .args(["--prompt", "Hi", "--n-out", "2", "--max-context", "64"]);
    let out = run(c);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_no_error_line(&err);
}

#[test]
fn fak_run_into_a_closed_stdout_ends_quietly_without_an_error_line() {
    let mut c = fak();
    c.env_remove("XDG_RUNTIME_DIR")
        .args(["run", "--model"])
        .arg(base("qwen3"))
        .args(["--prompt", "Hi", "--n-out", "2", "--max-context", "64"]);
    let out = with_closed_stdout(c);
    assert_quiet(&out, "fak run");
    assert_no_error_line(&stderr(&out));
}

// --- files --------------------------------------------------------------------------------

#[test]
fn a_directory_or_a_device_as_the_model_is_refused_by_what_it_is() {
    let dir = folder("not-a-file");
    let cases = [
        (
            dir.to_str().unwrap(),
            "the GGUF file is a directory, not a regular file",
        ),
        (
            "/dev/null",
            "/dev/null: the GGUF file is a character device, not a regular file",
        ),
    ];
    for (path, needle) in cases {
        let mut c = harness();
        c.args(["inspect", path]);
        assert_refused(&run(c), needle);
        let mut c = harness();
        c.args(["run", "--model", path, "--prompt", "hi"]);
        assert_refused(&run(c), needle);
    }
}

#[test]
fn a_fifo_as_model_tokenizer_input_or_raw_file_is_refused_without_blocking() {
    let dir = folder("fifo");
    let fifo = dir.join("pipe");
    mkfifo(&fifo);
    let mut c = harness();
    c.arg("inspect").arg(&fifo);
    assert_refused(
        &run(c),
        "the GGUF file is a FIFO (named pipe), not a regular file",
    );
    let mut c = harness();
    c.args(["tokenize", "--model"])
        .arg(base("qwen3"))
        .arg("--file")
        .arg(&fifo);
    assert_refused(&run(c), "the tokenizer input is a FIFO (named pipe)");
    let packet = packet_copy("run", "fifo-raw");
    let raw = packet.with_file_name("mlx-raw.json");
    std::fs::remove_file(&raw).unwrap();
    mkfifo(&raw);
    let mut c = harness();
    c.args(["validate"]).arg(&packet);
    let out = run(c);
    assert_eq!(out.status.code(), Some(2), "unreadable");
    assert_contains(
        &stderr(&out),
        "mlx-raw.json: the listed file is a FIFO (named pipe)",
    );
}

#[test]
fn a_raw_file_linked_to_dev_zero_is_refused_not_read() {
    let packet = packet_copy("run", "dev-zero");
    let raw = packet.with_file_name("llama.cpp-raw.json");
    std::fs::remove_file(&raw).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &raw).unwrap();
    let mut c = harness();
    c.args(["validate"]).arg(&packet);
    let out = run(c);
    assert_eq!(out.status.code(), Some(2), "unreadable");
    assert_contains(
        &stderr(&out),
        "llama.cpp-raw.json: the listed file is a character device",
    );
}

#[test]
fn a_raw_file_larger_than_its_manifest_entry_is_not_read_past_it() {
    let packet = packet_copy("run", "grown-raw");
    let raw = packet.with_file_name("mlx-raw.json");
    let listed = std::fs::metadata(&raw).unwrap().len();
    let mut bytes = std::fs::read(&raw).unwrap();
    bytes.extend(std::iter::repeat_n(b' ', 1 << 20));
    std::fs::write(&raw, bytes).unwrap();
    let mut c = harness();
    c.args(["validate"]).arg(&packet);
    let out = run(c);
    assert_eq!(out.status.code(), Some(2), "unreadable");
    assert_contains(
        &stderr(&out),
        &format!("more than the {listed} bytes manifest.json lists"),
    );
}

// --- packets ------------------------------------------------------------------------------

#[test]
fn report_and_compare_refuse_a_packet_that_does_not_validate_unless_unvalidated() {
    let packet = packet_copy("run", "invalid-report");
    std::fs::remove_file(packet.with_file_name("mlx-raw.json")).unwrap();
    let out_dir = packet.with_file_name("report");
    let report = |extra: &[&str]| {
        let mut c = harness();
        c.arg("report")
            .arg(&packet)
            .arg("--out")
            .arg(&out_dir)
            .args(extra);
        run(c)
    };
    assert_refused(&report(&[]), "does not validate (1 error");
    assert!(!out_dir.join("report.md").exists());
    let out = report(&["--unvalidated"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert_contains(&md, "NOT VALID");

    let good = fak_tests::fixture("packet/run/packet.json");
    let compare = |extra: &[&str]| {
        let mut c = harness();
        c.arg("compare").arg(&good).arg(&packet).args(extra);
        run(c)
    };
    assert_refused(&compare(&[]), "does not validate (1 error");
    let out = compare(&["--unvalidated"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    assert_contains(
        &md,
        &format!("**NOT VALID**: {} (1 error)", packet.display()),
    );
    assert!(
        !md.contains(&format!("**NOT VALID**: {}", good.display())),
        "{md}"
    );
}
