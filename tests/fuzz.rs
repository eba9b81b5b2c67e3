//! The fuzz targets that reach past the GGUF parser, run by the stable mutation loop
//! (`fak_tests::fuzz`): load-and-plan (parse → tokenizer → settings → device plan, no GPU),
//! tokenizer + chat template, and packet validation (then report and compare). Their corpora
//! (`fuzz/corpus/<target>/`, plus seeds made here: tiny byte-vocabulary models from
//! `harness synth`, the fixture templates and packets) are replayed, then every target gets
//! `FAK_FUZZ_SECONDS` (default 60) of mutants, the three at once.
//!
//! Every input must end in Ok or an error; a panic, an abort, an allocation over 1 GiB or an
//! input running 20 s fails the run with the input saved (see `fak_tests::fuzz`).

use fak::gguf::Gguf;
use fak::model::DevicePlan;
use fak::tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
use fak_harness::packet::validate::validate;
use fak_harness::packet::{FileDigest, MANIFEST_FILE, PACKET_FILE};
use fak_tests::fuzz::{self, CappedAlloc, Shape, Target};
use serde_json::{Value as Json, json};
use std::path::PathBuf;
use std::sync::OnceLock;

#[global_allocator]
static ALLOC: CappedAlloc = CappedAlloc;

const LOAD_PLAN: Target = Target {
    name: "load_plan",
    shape: Shape::Gguf,
    // Keys the seeds do not carry, which the mutator adds with hostile values.
    dictionary: &[
        "qwen3.vocab_size",
        "qwen35.vocab_size",
        "qwen3.attention.key_length",
        "qwen3.attention.value_length",
        "qwen3.rope.dimension_count",
        "qwen35.nextn_predict_layers",
        "qwen35.full_attention_interval",
        "split.count",
        "general.alignment",
    ],
    run: load_plan,
};

const TOKENIZER_CHAT: Target = Target {
    name: "tokenizer_chat",
    shape: Shape::Json,
    dictionary: &[
        "{% for i in range(1000000) %}",
        "{% endfor %}",
        "{{ messages[0].content ~ messages[0].content }}",
        "{% set ns = namespace(s='ab') %}",
        "{% set ns.s = ns.s ~ ns.s %}",
        "{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}",
        "{{ 'x' * 100000000 }}",
        "{{ raise_exception('no') }}",
        "{%- if message.role == 'user' %}",
        "{% endif %}",
        "{{",
        "}}",
        "{%",
        "%}",
        "<|im_start|>",
        "<|im_end|>",
        "<think>",
        "\u{fffd}",
        "\u{1f600}",
        " \n\t",
    ],
    run: tokenizer_chat,
};

const PACKET_VALIDATE: Target = Target {
    name: "packet_validate",
    shape: Shape::Json,
    dictionary: &[
        "../manifest.json",
        "/dev/zero",
        "packet.json",
        "NaN",
        "\u{0}",
    ],
    run: packet_validate,
};

/// Load-and-plan: what `Engine::load` does before it touches a GPU, on a model in memory.
fn load_plan(bytes: &[u8]) {
    let Ok(gguf) = Gguf::from_bytes("fuzz.gguf", bytes) else {
        return;
    };
    if let Ok(tokenizer) = Tokenizer::from_gguf(&gguf) {
        let ids = tokenizer.encode("Hello <|im_start|>user\nwörld 12345<|im_end|>", true);
        assert!(tokenizer.decode(&ids, true).is_ok(), "its own ids decode");
        let _ = tokenizer.apply_chat_template(&[ChatMessage::new("user", "Hi")], true, false);
    }
    for max_context in [None, Some(1), Some(usize::MAX)] {
        let Ok(mut plan) = DevicePlan::of(&gguf, max_context, 512) else {
            continue;
        };
        assert!(plan.max_context >= 1 && plan.max_tokens >= 1 && plan.logit_rows >= 1);
        plan.size_kv_pool(DevicePlan::PAGE_SIZE, 4, 1 << 30, 2);
        assert!(
            plan.kv_pages >= plan.pages_per_row(),
            "a sequence's pages fit the pool"
        );
        assert!(plan.total_bytes() >= plan.weight_bytes);
        std::hint::black_box(plan.describe());
    }
}

/// `{"template", "messages": [{"role", "content"}], "generation_prompt", "thinking", "ids"}`.
#[derive(serde::Deserialize)]
struct ChatInput {
    template: String,
    messages: Vec<Message>,
    #[serde(default)]
    generation_prompt: bool,
    #[serde(default)]
    thinking: bool,
    #[serde(default)]
    ids: Vec<u32>,
}

#[derive(serde::Deserialize)]
struct Message {
    role: String,
    content: String,
}

/// The Qwen2 vocabulary of the fixtures, loaded once.
fn qwen2_tokenizer() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let path = fak_tests::fixture("vocab/ggml-vocab-qwen2.gguf");
        Tokenizer::from_gguf(&Gguf::open(path).unwrap()).unwrap()
    })
}

/// A chat template rendered under its budget, its output tokenized, and the text and ids
/// decoded back: plain-text encoding must round-trip exactly.
fn tokenizer_chat(bytes: &[u8]) {
    let Ok(input) = serde_json::from_slice::<ChatInput>(bytes) else {
        return;
    };
    let tokenizer = qwen2_tokenizer();
    let messages: Vec<ChatMessage> = input
        .messages
        .iter()
        .map(|m| ChatMessage::new(m.role.as_str(), m.content.as_str()))
        .collect();
    let template = ChatTemplate::new(input.template, Some("<|endoftext|>"), Some("<|im_end|>"));
    if let Ok(text) = template.render(&messages, input.generation_prompt, input.thinking) {
        std::hint::black_box(tokenizer.encode(&text, true));
    }
    for m in &messages {
        let ids = tokenizer.encode_plain(&m.content, false);
        let back = tokenizer.decode(&ids, true).expect("its own ids decode");
        assert_eq!(back, m.content, "plain-text encoding round-trips");
    }
    let decoded = tokenizer.decode(&input.ids, true);
    let in_range = input
        .ids
        .iter()
        .all(|&id| (id as usize) < tokenizer.vocab_size());
    assert_eq!(
        decoded.is_ok(),
        in_range,
        "ids outside the vocabulary are refused"
    );
    let mut stream = tokenizer.stream_decoder(false);
    for &id in &input.ids {
        let _ = stream.push(id);
    }
    std::hint::black_box(stream.finish());
}

/// `{"refresh": bool, "files": {name: contents}}`: a packet folder; with `refresh`, the digests
/// of the manifest and the packet are recomputed first, so mutants get past the digest checks to
/// the figures.
#[derive(serde::Deserialize)]
struct PacketBundle {
    #[serde(default)]
    refresh: bool,
    files: std::collections::BTreeMap<String, String>,
}

/// A folder of this thread's own.
fn scratch_folder() -> PathBuf {
    thread_local! {
        static DIR: PathBuf = {
            let dir = std::env::temp_dir().join(format!(
                "fak-fuzz-packet-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            dir
        };
    }
    DIR.with(Clone::clone)
}

/// Validation, then what report and compare build from the same packet.
fn packet_validate(bytes: &[u8]) {
    let Ok(mut bundle) = serde_json::from_slice::<PacketBundle>(bytes) else {
        return;
    };
    if bundle.refresh {
        refresh_digests(&mut bundle.files);
    }
    let dir = scratch_folder();
    for entry in std::fs::read_dir(&dir).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    for (name, contents) in &bundle.files {
        let plain = !name.is_empty() && !name.contains(['/', '\\', '\0']) && name != "..";
        if plain && name != "." {
            std::fs::write(dir.join(name), contents).unwrap();
        }
    }
    let path = dir.join(PACKET_FILE);
    let validation = validate(&path);
    assert_eq!(validation.valid, validation.errors.is_empty());
    if let Ok((packet, raws)) = fak_harness::report::load(&path) {
        let report = fak_harness::report::build(&path, &packet, &raws, &validation);
        std::hint::black_box(report.markdown);
        let c = fak_harness::report::compare::compare(&packet, &packet);
        std::hint::black_box(fak_harness::report::compare::markdown(&c, &path, &path));
    }
}

/// The packet's digests of its raw and quality files, and the manifest's of every file.
fn refresh_digests(files: &mut std::collections::BTreeMap<String, String>) {
    let digest = |files: &std::collections::BTreeMap<String, String>, name: &str| {
        let bytes = files.get(name).map_or(&[][..], |s| s.as_bytes());
        serde_json::to_value(FileDigest::of(name, bytes)).unwrap()
    };
    if let Some(mut packet) = files
        .get(PACKET_FILE)
        .and_then(|p| serde_json::from_str::<Json>(p).ok())
    {
        let refresh = |v: Option<&mut Json>| {
            if let Some(v) = v
                && let Some(name) = v["name"].as_str().map(str::to_owned)
            {
                *v = digest(files, &name);
            }
        };
        for arm in packet["arms"].as_array_mut().into_iter().flatten() {
            refresh(arm.get_mut("raw_file"));
        }
        for q in packet["quality"].as_array_mut().into_iter().flatten() {
            refresh(q.get_mut("file"));
        }
        if let Some(arms) = packet
            .pointer_mut("/scenario/arms")
            .and_then(Json::as_array_mut)
        {
            for arm in arms {
                refresh(arm.get_mut("raw_file"));
            }
        }
        files.insert(PACKET_FILE.into(), packet.to_string());
    }
    if let Some(mut manifest) = files
        .get(MANIFEST_FILE)
        .and_then(|m| serde_json::from_str::<Json>(m).ok())
    {
        for f in manifest["files"].as_array_mut().into_iter().flatten() {
            if let Some(name) = f["name"].as_str().map(str::to_owned) {
                *f = digest(files, &name);
            }
        }
        files.insert(MANIFEST_FILE.into(), manifest.to_string());
    }
}

// --- seeds ----------------------------------------------------------------------------------

/// Tiny models of both architectures with the byte vocabulary (Q4_K_M, 0.3 and 0.6 MiB),
/// written once per process (both tests ask for them at once).
fn model_seeds() -> Vec<Vec<u8>> {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(write_model_seeds).clone()
}

fn write_model_seeds() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz-seeds");
    std::fs::create_dir_all(&dir).unwrap();
    ["qwen3", "qwen35"]
        .iter()
        .map(|arch| {
            let out = dir.join(format!("{arch}-tiny-bytes.gguf"));
            let status = fak_tests::harness::harness()
                .args([
                    "synth", "--arch", arch, "--preset", "tiny", "--quant", "q4_k_m",
                ])
                .args(["--vocab", "bytes", "--seed", "7", "--out"])
                .arg(&out)
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "harness synth {arch}");
            std::fs::read(&out).unwrap()
        })
        .collect()
}

fn chat_seeds() -> Vec<Vec<u8>> {
    let templates = [
        std::fs::read_to_string(fak_tests::fixture("templates/Qwen-Qwen3-0.6B.jinja")).unwrap(),
        std::fs::read_to_string(fak_tests::fixture("templates/Qwen3.5-4B.jinja")).unwrap(),
        fak::tokenizer::CHATML_TEMPLATE.to_owned(),
    ];
    templates
        .into_iter()
        .map(|template| {
            serde_json::to_vec(&json!({
                "template": template,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi <think> there, wörld 😀"},
                    {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello."},
                    {"role": "user", "content": "And now?"}
                ],
                "generation_prompt": true,
                "thinking": false,
                "ids": [0, 151643, 151644, 9707, 1879]
            }))
            .unwrap()
        })
        .collect()
}

fn packet_seeds() -> Vec<Vec<u8>> {
    ["packet/run", "packet/scenario"]
        .iter()
        .map(|dir| {
            let dir = fak_tests::fixture(dir);
            let files: std::collections::BTreeMap<String, String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| {
                    let path = e.unwrap().path();
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    (name, std::fs::read_to_string(&path).unwrap())
                })
                .collect();
            serde_json::to_vec(&json!({"refresh": true, "files": files})).unwrap()
        })
        .collect()
}

/// Inputs with where they came from (a file, or a seed made here).
type Inputs = Vec<(PathBuf, Vec<u8>)>;

/// The seeds made here, then the committed corpus.
fn inputs(target: &Target, seeds: Vec<Vec<u8>>) -> Inputs {
    let made = seeds
        .into_iter()
        .enumerate()
        .map(|(i, s)| (PathBuf::from(format!("<seed {i} of {}>", target.name)), s));
    made.chain(fuzz::corpus(target.name)).collect()
}

fn all_inputs() -> Vec<(Target, Inputs)> {
    vec![
        (LOAD_PLAN, inputs(&LOAD_PLAN, model_seeds())),
        (TOKENIZER_CHAT, inputs(&TOKENIZER_CHAT, chat_seeds())),
        (PACKET_VALIDATE, inputs(&PACKET_VALIDATE, packet_seeds())),
    ]
}

#[test]
fn seeds_and_corpora_replay_without_panics() {
    fuzz::install_failure_dump();
    for (target, inputs) in all_inputs() {
        fuzz::replay(&target, &inputs);
    }
}

/// The three targets at once, each for the budget: on CI's two cores the run takes the budget
/// once, not three times.
#[test]
fn mutants_never_panic_abort_or_hang() {
    let (budget, seed) = (fuzz::budget(), fuzz::seed());
    eprintln!(
        "fuzz: {} s per target, FAK_FUZZ_SEED={seed}",
        budget.as_secs()
    );
    let runs: Vec<_> = all_inputs()
        .into_iter()
        .map(|(target, inputs)| {
            std::thread::spawn(move || {
                let seeds: Vec<Vec<u8>> = inputs.into_iter().map(|(_, b)| b).collect();
                let stats = fuzz::run_mutations(&target, &seeds, budget, seed);
                (target.name, stats)
            })
        })
        .collect();
    let mut failures = Vec::new();
    for run in runs {
        let (name, stats) = run.join().expect("a fuzz thread");
        eprintln!(
            "fuzz: {name}: {} executions, {} failing",
            stats.executions,
            stats.failures.len()
        );
        failures.extend(stats.failures);
    }
    assert!(
        failures.is_empty(),
        "inputs that panicked (add each to fuzz/corpus/<target>/ once fixed): {failures:#?}"
    );
}
