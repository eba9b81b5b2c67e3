//! The ids of tokens llama-server's stream withholds, recovered from the stream's own text first
//! and from an untimed replay only where the text cannot name them.
//!
//! What the server does (tools/server/server-context.cpp of llama.cpp 0c1e570, stream mode,
//! `process_token` and `send_partial_response`): each sampled token's piece (`token_to_piece`,
//! control tokens empty unless the server runs with `--special`) is appended to the slot's
//! text; while that text ends inside a UTF-8 character (`validate_utf8`: a lead byte among its
//! last three bytes with fewer bytes after it than its sequence needs) no chunk is sent. The
//! next token that leaves the text complete sends one chunk: `tokens` holds only its own id,
//! `content` every byte since the last chunk (the withheld tokens' pieces, then its own), and
//! `tokens_predicted` counts all of them. After the last token the final chunk (`stop: true`)
//! carries no text and no ids, so a run still withheld at the end has no text at all. The
//! chunk's JSON is written with bad UTF-8 replaced by U+FFFD (`dump_safe`), so a run whose bytes
//! are not valid UTF-8 together with the releasing token's (a random-weight model's lead byte
//! followed by an unrelated token) has lost its bytes too.
//!
//! Where the text is there, the run's bytes are the chunk's content minus its own token's
//! piece, and the run is the one sequence of exactly as many vocabulary entries spelling them in
//! which every withheld token ends inside a character (had one ended on a character boundary
//! the server would have sent it). Entries with an empty piece count as choices too, so a run
//! whose bytes could also be spelled with one entry fewer is ambiguous. Anything else (no text,
//! U+FFFD, no such sequence, more than one) goes to the replay, which must then agree with the
//! stream, text-recovered ids included, at every position it does not fill.

use super::super::Timed;
use anyhow::{Context, Result, bail};
use fak::tokenizer::Tokenizer;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;

/// A token the stream counted but sent no id for (until recovered; one never named stays so).
pub const WITHHELD: u32 = super::super::UNNAMED;

/// Consecutive withheld tokens and the chunk that ended them.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The first withheld position.
    pub start: usize,
    pub len: usize,
    /// The chunk that sent the text again; `None` when the stream ended first.
    pub release: Option<Release>,
}

/// A chunk that carried the text of a run of withheld tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct Release {
    /// Its `content`: the run's pieces, then its own tokens'.
    pub content: String,
    /// Its own token ids (`tokens`).
    pub ids: Vec<u32>,
}

impl Run {
    pub fn positions(&self) -> std::ops::Range<usize> {
        self.start..self.start + self.len
    }
}

/// Every position of `runs`, in order.
pub fn positions(runs: &[Run]) -> Vec<usize> {
    runs.iter().flat_map(Run::positions).collect()
}

/// The model's vocabulary by the bytes each entry prints as in llama-server's stream.
pub struct Pieces {
    /// Each id's piece.
    by_id: Vec<Vec<u8>>,
    /// Ids by non-empty piece.
    by_bytes: HashMap<Vec<u8>, Vec<u32>>,
    /// Ids whose piece is empty (control tokens, unused entries).
    silent: Vec<u32>,
    longest: usize,
}

/// How many vocabulary sequences fit a run's bytes.
#[derive(Debug, PartialEq)]
enum Split {
    None,
    Unique(Vec<u32>),
    Ambiguous,
}

impl Pieces {
    /// The pieces as llama-server prints them: control tokens empty unless it runs with
    /// `--special` (`render_special`).
    pub fn new(tokenizer: &Tokenizer, render_special: bool) -> Result<Self> {
        let mut by_id = Vec::with_capacity(tokenizer.vocab_size());
        let mut by_bytes: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
        let mut silent = Vec::new();
        for id in 0..tokenizer.vocab_size() as u32 {
            let piece = tokenizer.piece(id, render_special)?.to_vec();
            if piece.is_empty() {
                silent.push(id);
            } else {
                by_bytes.entry(piece.clone()).or_default().push(id);
            }
            by_id.push(piece);
        }
        let longest = by_id.iter().map(Vec::len).max().unwrap_or(0);
        Ok(Pieces {
            by_id,
            by_bytes,
            silent,
            longest,
        })
    }

    /// The vocabulary of the GGUF at `model`.
    pub fn load(model: &Path, render_special: bool) -> Result<Self> {
        let gguf = fak::gguf::Gguf::open(model)?;
        Self::new(&Tokenizer::from_gguf(&gguf)?, render_special)
    }

    /// The run's ids from its releasing chunk's text, or why the text cannot name them.
    pub fn name_run(&self, run: &Run) -> Result<Vec<u32>, String> {
        let Some(release) = &run.release else {
            return Err("the stream ended on them: no chunk carried their text".into());
        };
        let content = &release.content;
        if content.contains(char::REPLACEMENT_CHARACTER) {
            return Err(format!(
                "their chunk's text {content:?} holds U+FFFD: llama-server writes bytes that \
                 are not UTF-8 as U+FFFD, so the text no longer holds their bytes"
            ));
        }
        let mut own = Vec::new();
        for &id in &release.ids {
            match self.by_id.get(id as usize) {
                Some(piece) => own.extend_from_slice(piece),
                None => return Err(format!("their chunk's token {id} is not in the vocabulary")),
            }
        }
        let Some(len) = content
            .len()
            .checked_sub(own.len())
            .filter(|&len| content.as_bytes()[len..] == own[..])
        else {
            return Err(format!(
                "their chunk's text {content:?} does not end with its own token's {}",
                hex(&own)
            ));
        };
        let bytes = hex(&content.as_bytes()[..len]);
        match self.split(content, len, run.len) {
            Split::Unique(ids) => Ok(ids),
            Split::None => Err(format!(
                "no {} vocabulary entries spell {bytes}, each ending inside a character",
                run.len
            )),
            Split::Ambiguous => Err(format!(
                "{} vocabulary entries spell {bytes} in more than one way",
                run.len
            )),
        }
    }

    /// The sequences of exactly `count` entries whose pieces spell the first `len` bytes of
    /// `text`, each entry ending inside a character of `text` (not on a boundary): counted up
    /// to two, and the one when there is one.
    fn split(&self, text: &str, len: usize, count: usize) -> Split {
        let bytes = &text.as_bytes()[..len];
        let inside = |end: usize| !text.is_char_boundary(end);
        // ways[end][n]: sequences of n entries spelling bytes[..end], at most 2.
        let mut ways = vec![vec![0usize; count + 1]; len + 1];
        ways[0][0] = 1;
        for n in 0..count {
            for start in 0..=len {
                let w = ways[start][n];
                if w == 0 {
                    continue;
                }
                for (end, choices) in self.entries_from(bytes, start, &inside) {
                    let cell = &mut ways[end][n + 1];
                    *cell = (*cell + w * choices).min(2);
                }
            }
        }
        match ways[len][count] {
            0 => Split::None,
            1 => {
                // The one sequence, walked back from its end: at each step exactly one
                // predecessor has a way in and exactly one entry leads on from it.
                let mut ids = vec![0; count];
                let mut end = len;
                for n in (0..count).rev() {
                    let (start, id) = (end.saturating_sub(self.longest)..=end)
                        .filter(|&start| ways[start][n] > 0)
                        .find_map(|start| {
                            self.ids_spelling(bytes, start, end, &inside)
                                .first()
                                .map(|&id| (start, id))
                        })
                        .expect("a counted sequence has a predecessor");
                    ids[n] = id;
                    end = start;
                }
                Split::Unique(ids)
            }
            _ => Split::Ambiguous,
        }
    }

    /// Where an entry starting at `start` can end, and how many entries do.
    fn entries_from<'a>(
        &'a self,
        bytes: &'a [u8],
        start: usize,
        inside: &'a dyn Fn(usize) -> bool,
    ) -> impl Iterator<Item = (usize, usize)> + 'a {
        let last = bytes.len().min(start + self.longest);
        (start..=last)
            .map(move |end| (end, self.ids_spelling(bytes, start, end, inside).len()))
            .filter(|&(_, n)| n > 0)
    }

    /// The entries whose piece is `bytes[start..end]` and that may end a withheld token there.
    fn ids_spelling(
        &self,
        bytes: &[u8],
        start: usize,
        end: usize,
        inside: &dyn Fn(usize) -> bool,
    ) -> &[u32] {
        if !inside(end) {
            return &[];
        }
        if start == end {
            return &self.silent;
        }
        self.by_bytes
            .get(&bytes[start..end])
            .map_or(&[], Vec::as_slice)
    }
}

fn hex(bytes: &[u8]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("[{}]", hex.join(" "))
}

/// Puts the replay's ids at `positions`; every other position must already hold the replay's
/// id (greedy on one slot with the prompt cache off repeats itself where the engine's numerics
/// do). Leaves `tokens` as it was when the replay disagrees.
pub fn fill_from_replay(tokens: &mut [u32], positions: &[usize], replay: &[u32]) -> Result<()> {
    if replay.len() != tokens.len() {
        bail!(
            "llama.cpp: the replay gave {} tokens, the stream counted {}",
            replay.len(),
            tokens.len()
        );
    }
    let differs = (0..tokens.len()).find(|&i| !positions.contains(&i) && tokens[i] != replay[i]);
    if let Some(i) = differs {
        bail!(Disagreement {
            at: i,
            replay: replay[i],
            stream: tokens[i],
        });
    }
    for &i in positions {
        tokens[i] = replay[i];
    }
    Ok(())
}

/// A replay's first id that is not the stream's.
#[derive(Debug)]
struct Disagreement {
    at: usize,
    replay: u32,
    stream: u32,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Disagreement { at, replay, stream } = self;
        write!(
            f,
            "llama.cpp: the replay differs from the stream at token {at}: {replay} vs {stream}"
        )
    }
}

impl std::error::Error for Disagreement {}

/// Replays tried before the ids are given up. llama.cpp's numerics on some models vary from
/// run to run: on the H100 (2026-12-06 #12) llama.cpp 7e4c0a9's Vulkan backend answered the
/// Qwen3.5-27B's same greedy request differently at token 0 or 1 on its replay, with both
/// matrix paths, so a replay that disagrees may be followed by one that agrees.
pub const REPLAYS: usize = 3;

/// What [`recover`] does with the ids the stream's text cannot name.
pub enum Fallback<F> {
    /// Nothing needs them (scripted replies): they stay unnamed and no replay runs.
    Unnamed,
    /// A later prompt holds the answer: a replay that agrees with the stream names them (up
    /// to [`REPLAYS`] tries), or the request fails.
    Replay(F),
    /// The ids are recorded but nothing reads them (the envelope): a replay that agrees with
    /// the stream names them; where none of [`REPLAYS`] does, they stay unnamed and the record
    /// keeps each replay's disagreement.
    ReplayOrUnnamed(F),
}

/// Fills every withheld position of `timed`: from the releasing chunk's text where `pieces`
/// (the model's vocabulary, if it could be read) names the run, and the rest as `fallback`
/// says ([`Fallback`]; its replay gives the whole answer's ids from an untimed request and
/// runs only if some run is left). The engine record's `withheld_ids` says which positions
/// came from where, why the text could not serve the others, and which stayed unnamed.
pub fn recover(
    pieces: Option<&Pieces>,
    runs: &[Run],
    timed: &mut Timed,
    fallback: Fallback<impl FnMut() -> Result<Vec<u32>>>,
) -> Result<()> {
    let (mut from_text, mut from_replay, mut unusable) = (Vec::new(), Vec::new(), Vec::new());
    for run in runs {
        let found = match pieces {
            Some(pieces) => pieces.name_run(run),
            None => Err("fak's tokenizer could not read the model's vocabulary".into()),
        };
        match found {
            Ok(ids) => {
                timed.tokens[run.positions()].copy_from_slice(&ids);
                from_text.extend(run.positions());
            }
            Err(why) => {
                from_replay.extend(run.positions());
                unusable
                    .push(json!({"positions": run.positions().collect::<Vec<_>>(), "why": why}));
            }
        }
    }
    let mut record = json!({
        "positions": positions(runs),
        "from_text": from_text,
        "from_replay": from_replay,
        "text_unusable": unusable,
        "how": "llama-server streams no id for a token whose text ends inside a UTF-8 character \
                (it counts it in tokens_predicted); the chunk that completes the character \
                carries the withheld tokens' bytes before its own: from_text ids are the one \
                sequence of vocabulary entries spelling them, from_replay ids came from an \
                untimed non-streamed replay of the same greedy request, which gave the stream's \
                ids (from_text ones included) at every other position; each token's timestamp \
                is the chunk that released its text (the stream's end when none did)",
    });
    let (mut replay, required) = match fallback {
        _ if from_replay.is_empty() => (None, false),
        Fallback::Unnamed => (None, false),
        Fallback::Replay(replay) => (Some(replay), true),
        Fallback::ReplayOrUnnamed(replay) => (Some(replay), false),
    };
    let mut unnamed = from_replay.clone();
    if let Some(replay) = replay.as_mut() {
        let start = super::super::process::now_ns();
        let context = || {
            format!(
                "llama.cpp: withheld ids at {from_replay:?} need a replay (the stream's text named \
                 {from_text:?}; {})",
                unusable[0]["why"].as_str().unwrap_or_default()
            )
        };
        let mut disagreements = Vec::new();
        while disagreements.len() < REPLAYS {
            let ids = replay().with_context(context)?;
            match fill_from_replay(&mut timed.tokens, &from_replay, &ids) {
                Ok(()) => {
                    unnamed.clear();
                    break;
                }
                Err(e) => match e.downcast::<Disagreement>() {
                    Ok(d) => disagreements.push(d),
                    Err(e) => return Err(e.context(context())),
                },
            }
        }
        if !unnamed.is_empty() && required {
            let last = disagreements.pop().expect("a replay ran");
            return Err(anyhow::Error::new(last)
                .context(format!("{REPLAYS} replays, none agreeing with the stream"))
                .context(context()));
        }
        record["replay_s"] = json!((super::super::process::now_ns() - start) as f64 * 1e-9);
        if !disagreements.is_empty() {
            record["replays_disagreeing"] = json!(
                disagreements
                    .iter()
                    .map(|d| json!({"at": d.at, "replay": d.replay, "stream": d.stream}))
                    .collect::<Vec<_>>()
            );
        }
    }
    if !unnamed.is_empty() {
        record["unnamed"] = json!(unnamed);
        record["from_replay"] = json!([]);
        let why = match replay {
            None => "Not replayed here (no later prompt holds this answer)",
            Some(_) => {
                "None of the replays agreed with the stream at the positions it named (the \
                 engine's numerics vary from run to run here: replays_disagreeing)"
            }
        };
        record["how"] = json!(format!(
            "{} {why}: the unnamed positions keep no id.",
            record["how"].as_str().unwrap_or_default()
        ));
    }
    timed.engine["withheld_ids"] = record;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    /// The Qwen2 vocabulary (151 936 entries; every byte an entry, multi-byte characters and
    /// their prefixes entries too, three control tokens that print nothing).
    fn qwen2() -> &'static Pieces {
        static PIECES: OnceLock<Pieces> = OnceLock::new();
        PIECES.get_or_init(|| {
            let path = format!(
                "{}/../tests/fixtures/vocab/ggml-vocab-qwen2.gguf",
                env!("CARGO_MANIFEST_DIR")
            );
            Pieces::load(Path::new(&path), false).unwrap()
        })
    }

    /// The id of the one entry printing `bytes`.
    fn id(bytes: &[u8]) -> u32 {
        let ids = &qwen2().by_bytes[bytes];
        assert_eq!(ids.len(), 1, "{bytes:?}");
        ids[0]
    }

    fn run(start: usize, len: usize, content: &str, own: &[u8]) -> Run {
        let release = Release {
            content: content.into(),
            ids: vec![id(own)],
        };
        Run {
            start,
            len,
            release: Some(release),
        }
    }

    fn timed(tokens: Vec<u32>) -> Timed {
        let n = tokens.len() as u64;
        Timed::streamed(
            "test",
            (tokens, (1..=n).collect()),
            (0, n + 1),
            0.0,
            json!({}),
        )
        .unwrap()
    }

    /// "é" is C3 A9, each byte an entry: the lead byte is withheld and the chunk of A9 carries
    /// both; the one entry printing C3 is the withheld id.
    #[test]
    fn a_withheld_lead_byte_is_named_by_the_text() {
        let p = qwen2();
        assert_eq!(p.name_run(&run(3, 1, "é", b"\xa9")), Ok(vec![id(b"\xc3")]));
        // The text must end with the releasing token's piece.
        let err = p.name_run(&run(3, 1, "éx", b"\xa9")).unwrap_err();
        assert!(err.contains("does not end with"), "{err}");
    }

    /// U+0880 is E0 A2 80 and no entry prints E0 A2: two withheld byte entries, one way to
    /// spell them (each ending inside the character).
    #[test]
    fn a_run_of_two_withheld_tokens_splits_uniquely() {
        let p = qwen2();
        assert!(!p.by_bytes.contains_key(&b"\xe0\xa2"[..]));
        let ids = p.name_run(&run(0, 2, "\u{880}", b"\x80")).unwrap();
        assert_eq!(ids, [id(b"\xe0"), id(b"\xa2")]);
        // One entry cannot spell both bytes.
        let err = p.name_run(&run(0, 1, "\u{880}", b"\x80")).unwrap_err();
        assert!(err.contains("no 1 vocabulary entries"), "{err}");
        // Three can, with a control token (printing nothing) after either byte: ambiguous. It
        // cannot come first: the text was complete there, so the server would have sent it.
        let err = p.name_run(&run(0, 3, "\u{880}", b"\x80")).unwrap_err();
        assert!(err.contains("more than one way"), "{err}");
    }

    /// "一" is E4 B8 80, and E4 B8 is an entry too: E4 then B8, or E4 B8 then a control token
    /// (which prints nothing), are both two tokens spelling E4 B8: the text cannot tell them
    /// apart, so the replay must.
    #[test]
    fn an_ambiguous_split_falls_back_to_the_replay() {
        let p = qwen2();
        let err = p.name_run(&run(0, 2, "一", b"\x80")).unwrap_err();
        assert!(err.contains("more than one way"), "{err}");
        // One token: E4 B8 alone.
        assert_eq!(
            p.name_run(&run(0, 1, "一", b"\x80")),
            Ok(vec![id(b"\xe4\xb8")])
        );
    }

    /// A lead byte followed by an unrelated token is not UTF-8: llama-server writes U+FFFD in
    /// its place, and the bytes are gone.
    #[test]
    fn replaced_bytes_fall_back_to_the_replay() {
        let err = qwen2().name_run(&run(0, 1, "\u{FFFD}A", b"A")).unwrap_err();
        assert!(err.contains("U+FFFD"), "{err}");
    }

    /// Runs named by their text are filled without a replay; the answer ending on a withheld
    /// token (no text) and an ambiguous run come from the replay, which must agree with the
    /// stream at every other position, text-recovered ones included; the record says which
    /// position came from where.
    #[test]
    fn recovery_takes_the_text_first_and_replays_only_the_rest() {
        let (a, c3, a9) = (id(b"A"), id(b"\xc3"), id(b"\xa9"));
        let (e4, b8, x80) = (id(b"\xe4"), id(b"\xb8"), id(b"\x80"));
        let w = WITHHELD;
        let runs = [
            run(1, 1, "é", b"\xa9"),
            Run {
                start: 4,
                len: 1,
                release: None,
            },
        ];
        // Only the text: no replay.
        let mut t = timed(vec![a, w, a9, a]);
        recover(
            Some(qwen2()),
            &runs[..1],
            &mut t,
            Fallback::Replay(|| panic!("no replay")),
        )
        .unwrap();
        assert_eq!(t.tokens, [a, c3, a9, a]);
        assert_eq!(t.engine["withheld_ids"]["from_text"], json!([1]));
        assert_eq!(t.engine["withheld_ids"]["from_replay"], json!([]));

        // The answer ends on a withheld token: that one from the replay.
        let mut t = timed(vec![a, w, a9, a, w]);
        recover(
            Some(qwen2()),
            &runs,
            &mut t,
            Fallback::Replay(|| Ok(vec![a, c3, a9, a, e4])),
        )
        .unwrap();
        assert_eq!(t.tokens, [a, c3, a9, a, e4]);
        let record = &t.engine["withheld_ids"];
        assert_eq!(record["positions"], json!([1, 4]));
        assert_eq!(record["from_text"], json!([1]));
        assert_eq!(record["from_replay"], json!([4]));
        assert_eq!(record["text_unusable"][0]["positions"], json!([4]));
        assert!(record["replay_s"].is_number(), "{record}");

        // A replay that disagrees with a text-recovered id fails; so does one that disagrees
        // with a streamed id.
        let mut t = timed(vec![a, w, a9, a, w]);
        let err = recover(
            Some(qwen2()),
            &runs,
            &mut t,
            Fallback::Replay(|| Ok(vec![a, e4, a9, a, e4])),
        );
        let err = format!("{:#}", err.unwrap_err());
        assert!(err.contains("at token 1"), "{err}");
        assert!(err.contains("at [4] need a replay"), "{err}");
        assert!(err.contains("the stream ended on them"), "{err}");
        let mut t = timed(vec![a, w, a9, a, w]);
        let err = recover(
            Some(qwen2()),
            &runs,
            &mut t,
            Fallback::Replay(|| Ok(vec![b8, c3, a9, a, e4])),
        );
        assert!(format!("{:#}", err.unwrap_err()).contains("at token 0"));

        // An ambiguous run, and no vocabulary at all: the replay fills them.
        let ambiguous = [run(0, 2, "一", b"\x80")];
        let mut t = timed(vec![w, w, x80]);
        recover(
            Some(qwen2()),
            &ambiguous,
            &mut t,
            Fallback::Replay(|| Ok(vec![e4, b8, x80])),
        )
        .unwrap();
        assert_eq!(t.tokens, [e4, b8, x80]);
        assert_eq!(t.engine["withheld_ids"]["from_replay"], json!([0, 1]));
        let mut t = timed(vec![a, w, a9, a]);
        recover(
            None,
            &runs[..1],
            &mut t,
            Fallback::Replay(|| Ok(vec![a, c3, a9, a])),
        )
        .unwrap();
        assert_eq!(t.engine["withheld_ids"]["from_replay"], json!([1]));

        // A replay that disagrees is tried again: the second agrees and names the ids, the
        // record keeps the first's disagreement.
        let mut replays = [vec![a, c3, a9, b8, e4], vec![a, c3, a9, a, e4]].into_iter();
        let mut t = timed(vec![a, w, a9, a, w]);
        recover(
            Some(qwen2()),
            &runs,
            &mut t,
            Fallback::Replay(|| Ok(replays.next().unwrap())),
        )
        .unwrap();
        assert_eq!(t.tokens, [a, c3, a9, a, e4]);
        let record = &t.engine["withheld_ids"];
        assert_eq!(record["from_replay"], json!([4]));
        assert_eq!(
            record["replays_disagreeing"],
            json!([{"at": 3, "replay": b8, "stream": a}])
        );
        assert!(record.get("unnamed").is_none(), "{record}");

        // None of REPLAYS agrees: where the ids are only recorded they stay unnamed (the
        // request stands, the record says why); where a later prompt needs them it fails.
        let (mut calls, mut t) = (0, timed(vec![a, w, a9, a, w]));
        let disagreeing = || {
            calls += 1;
            Ok(vec![b8, c3, a9, a, e4])
        };
        recover(
            Some(qwen2()),
            &runs,
            &mut t,
            Fallback::ReplayOrUnnamed(disagreeing),
        )
        .unwrap();
        assert_eq!(calls, REPLAYS);
        assert_eq!(t.tokens, [a, c3, a9, a, w]);
        let record = &t.engine["withheld_ids"];
        assert_eq!(record["unnamed"], json!([4]));
        assert_eq!(record["from_replay"], json!([]));
        assert_eq!(
            record["replays_disagreeing"].as_array().unwrap().len(),
            REPLAYS
        );
        assert!(
            record["how"]
                .as_str()
                .unwrap()
                .contains("vary from run to run")
        );
        let err = recover(
            Some(qwen2()),
            &runs,
            &mut timed(vec![a, w, a9, a, w]),
            Fallback::Replay(|| Ok(vec![b8, c3, a9, a, e4])),
        );
        let err = format!("{:#}", err.unwrap_err());
        assert!(err.contains("3 replays, none agreeing"), "{err}");
        assert!(err.contains("at token 0"), "{err}");
        // A replay of the wrong length is not a disagreement: it fails at once, either way.
        let (mut calls, mut t) = (0, timed(vec![a, w, a9, a, w]));
        let short = || {
            calls += 1;
            Ok(vec![a])
        };
        let err = recover(
            Some(qwen2()),
            &runs,
            &mut t,
            Fallback::ReplayOrUnnamed(short),
        );
        assert!(format!("{:#}", err.unwrap_err()).contains("the replay gave 1 tokens"));
        assert_eq!(calls, 1);

        // No replay wanted: the text names what it can, the answer's last token stays unnamed.
        let no_replay = Fallback::<fn() -> Result<Vec<u32>>>::Unnamed;
        let mut t = timed(vec![a, w, a9, a, w]);
        recover(Some(qwen2()), &runs, &mut t, no_replay).unwrap();
        assert_eq!(t.tokens, [a, c3, a9, a, w]);
        let record = &t.engine["withheld_ids"];
        assert_eq!(record["from_text"], json!([1]));
        assert_eq!(record["from_replay"], json!([]));
        assert_eq!(record["unnamed"], json!([4]));
        assert!(record.get("replay_s").is_none(), "{record}");
    }
}
