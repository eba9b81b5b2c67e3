//! Generated text as the API returns it, a piece at a time (streaming) or whole: stop strings cut
//! it, Qwen3's `<think>…</think>` block becomes `reasoning_content` apart from the content, and
//! Qwen's `<tool_call>{json}</tool_call>` blocks become `tool_calls`. Each stage holds back the
//! end of its input that could still be the start of what it looks for, so a stop string or tag
//! split across tokens is found all the same and never half-sent.

use serde_json::{Value, json};

/// The longest suffix of `text` that is a proper prefix of `tag`, as a byte index into `text`.
fn partial_tag_start(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .map(|n| text.len() - n)
        .find(|&at| text.is_char_boundary(at) && tag.starts_with(&text[at..]))
        .unwrap_or(text.len())
}

/// Cuts the text at the first stop string (which is not returned).
pub struct StopStrings {
    stops: Vec<String>,
    held: String,
}

impl StopStrings {
    pub fn new(stops: Vec<String>) -> Self {
        StopStrings {
            stops,
            held: String::new(),
        }
    }

    /// The text that is certain now, and whether a stop string ended it.
    pub fn push(&mut self, text: &str) -> (String, bool) {
        self.held.push_str(text);
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            let out = self.held[..at].to_string();
            self.held.clear();
            return (out, true);
        }
        let keep = self
            .stops
            .iter()
            .map(|s| partial_tag_start(&self.held, s))
            .min()
            .unwrap_or(self.held.len());
        let rest = self.held.split_off(keep);
        (std::mem::replace(&mut self.held, rest), false)
    }

    /// Whatever is held at the end of the generation.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// Which part of a chat answer a piece of text belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Reasoning,
    Content,
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// Splits a Qwen3 answer into reasoning (inside `<think>…</think>`) and content. The block is
/// open from the start when the prompt ended inside it (the template opened it); otherwise an
/// answer that begins with `<think>` opens it. Newlines next to the tags are dropped, as
/// Qwen's template writes them around the reasoning it renders back.
pub struct Reasoning {
    part: Part,
    held: String,
    /// Nothing of the current part was sent yet (its leading newlines are dropped).
    at_start: bool,
    /// Content may still open a think block (nothing but whitespace came yet).
    may_open: bool,
}

impl Reasoning {
    pub fn new(prompt_opened_think: bool) -> Self {
        Reasoning {
            part: match prompt_opened_think {
                true => Part::Reasoning,
                false => Part::Content,
            },
            held: String::new(),
            at_start: true,
            may_open: !prompt_opened_think,
        }
    }

    /// Whether a rendered prompt ends inside a think block the model is to continue.
    pub fn prompt_opens_think(prompt: &str) -> bool {
        prompt.trim_end().ends_with(THINK_OPEN)
    }

    pub fn push(&mut self, text: &str) -> Vec<(Part, String)> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            if self.may_open {
                let trimmed = self.held.trim_start();
                if let Some(rest) = trimmed.strip_prefix(THINK_OPEN) {
                    self.held = rest.to_string();
                    self.part = Part::Reasoning;
                    self.may_open = false;
                    self.at_start = true;
                    continue;
                }
                if THINK_OPEN.starts_with(trimmed) {
                    return out; // whitespace, or the tag's start: wait for more
                }
                self.may_open = false;
            }
            if self.part == Part::Reasoning
                && let Some(at) = self.held.find(THINK_CLOSE)
            {
                let reasoning = self.held[..at].trim_end_matches('\n').to_string();
                self.send(&mut out, reasoning);
                self.held = self.held[at + THINK_CLOSE.len()..].to_string();
                self.part = Part::Content;
                self.at_start = true;
                continue;
            }
            break;
        }
        // Hold a possible closing tag's start and, in reasoning, trailing newlines (dropped if
        // the tag follows).
        let mut keep = match self.part {
            Part::Reasoning => partial_tag_start(&self.held, THINK_CLOSE),
            Part::Content => self.held.len(),
        };
        if self.part == Part::Reasoning {
            keep = self.held[..keep].trim_end_matches('\n').len();
        }
        let rest = self.held.split_off(keep);
        let ready = std::mem::replace(&mut self.held, rest);
        self.send(&mut out, ready);
        out
    }

    fn send(&mut self, out: &mut Vec<(Part, String)>, text: String) {
        let text = match self.at_start {
            true => text.trim_start_matches('\n').to_string(),
            false => text,
        };
        if !text.is_empty() {
            self.at_start = false;
            out.push((self.part, text));
        }
    }

    pub fn finish(&mut self) -> Vec<(Part, String)> {
        let held = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        let held = match self.part {
            Part::Reasoning => held.trim_end_matches('\n').to_string(),
            Part::Content => held,
        };
        self.send(&mut out, held);
        out
    }
}

const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";

/// One parsed call, as OpenAI's `tool_calls` entry writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as a JSON text (OpenAI sends a string).
    pub arguments: String,
}

impl ToolCall {
    /// The `tool_calls` entry; `index` orders the calls and names the id.
    pub fn to_json(&self, request_id: &str, index: usize) -> Value {
        json!({
            "index": index,
            "id": format!("call_{request_id}_{index}"),
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }
}

/// Content until the first `<tool_call>`; from there on everything is held and parsed at the
/// end into calls (text that is not a well-formed call is returned as content after all).
pub struct ToolCalls {
    held: String,
    calling: bool,
}

impl ToolCalls {
    pub fn new() -> Self {
        ToolCalls {
            held: String::new(),
            calling: false,
        }
    }

    /// Content that is certainly not part of a call.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        if self.calling {
            return String::new();
        }
        if let Some(at) = self.held.find(CALL_OPEN) {
            self.calling = true;
            let rest = self.held.split_off(at);
            return std::mem::replace(&mut self.held, rest);
        }
        let keep = partial_tag_start(&self.held, CALL_OPEN);
        let rest = self.held.split_off(keep);
        std::mem::replace(&mut self.held, rest)
    }

    /// The calls, and content left over (held text that was not a call).
    pub fn finish(&mut self) -> (Vec<ToolCall>, String) {
        parse_tool_calls(&std::mem::take(&mut self.held))
    }
}

/// Every `<tool_call>{"name": …, "arguments": {…}}</tool_call>` block of `text` as a call; the
/// rest (outside the blocks, or a block that does not parse) as content.
pub fn parse_tool_calls(text: &str) -> (Vec<ToolCall>, String) {
    let mut calls = Vec::new();
    let mut content = String::new();
    let mut rest = text;
    while let Some(open) = rest.find(CALL_OPEN) {
        let after = &rest[open + CALL_OPEN.len()..];
        let Some(close) = after.find(CALL_CLOSE) else {
            break;
        };
        match parse_call(&after[..close]) {
            Some(call) => {
                content.push_str(&rest[..open]);
                calls.push(call);
            }
            None => content.push_str(&rest[..open + CALL_OPEN.len() + close + CALL_CLOSE.len()]),
        }
        rest = &after[close + CALL_CLOSE.len()..];
    }
    content.push_str(rest);
    let content = match calls.is_empty() {
        true => content,
        false => content.trim().to_string(),
    };
    (calls, content)
}

fn parse_call(body: &str) -> Option<ToolCall> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = match value.get("arguments") {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "{}".into(),
    };
    Some(ToolCall { name, arguments })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` one at a time and concatenates what comes out, per part.
    fn split(opened: bool, pieces: &[&str]) -> (String, String) {
        let mut r = Reasoning::new(opened);
        let mut out: Vec<(Part, String)> = Vec::new();
        for p in pieces {
            out.extend(r.push(p));
        }
        out.extend(r.finish());
        let of = |part| {
            out.iter()
                .filter(|(p, _)| *p == part)
                .map(|(_, t)| t.as_str())
                .collect::<String>()
        };
        (of(Part::Reasoning), of(Part::Content))
    }

    #[test]
    fn stop_strings_cut_across_pieces_and_hold_only_what_could_match() {
        let mut s = StopStrings::new(vec!["END".into(), "xyz".into()]);
        assert_eq!(s.push("abc E"), ("abc ".into(), false));
        assert_eq!(s.push("N"), (String::new(), false));
        assert_eq!(s.push("Dtail"), (String::new(), true));
        let mut s = StopStrings::new(vec!["END".into()]);
        assert_eq!(s.push("abE"), ("ab".into(), false));
        assert_eq!(s.push("x"), ("Ex".into(), false));
        assert_eq!(s.push("E"), (String::new(), false));
        assert_eq!(s.finish(), "E");
        // Multi-byte characters: a held suffix starts on a character boundary.
        let mut s = StopStrings::new(vec!["é!".into()]);
        assert_eq!(s.push("café"), ("caf".into(), false));
        assert_eq!(s.push("!"), (String::new(), true));
        let mut none = StopStrings::new(Vec::new());
        assert_eq!(none.push("all of it"), ("all of it".into(), false));
    }

    #[test]
    fn reasoning_is_split_from_content_whichever_way_the_tags_arrive() {
        let whole = ["<think>\nI should say hi.\n</think>\n\nHello!"];
        let want = ("I should say hi.".to_string(), "Hello!".to_string());
        assert_eq!(split(false, &whole), want);
        let pieces = [
            "<th", "ink>", "\n", "I should", " say hi.", "\n", "</", "think", ">\n\n", "Hello", "!",
        ];
        assert_eq!(split(false, &pieces), want);
        // The prompt opened the block (Qwen3.5 with thinking on).
        assert_eq!(
            split(true, &["\nI should say hi.\n</think>\n\nHello!"]),
            want
        );
        // No think block at all, or thinking switched off (an empty block in the prompt).
        assert_eq!(split(false, &["Hello!"]), (String::new(), "Hello!".into()));
        assert_eq!(
            split(false, &["", "Hi", " <think> later"]).1,
            "Hi <think> later"
        );
        // Cut off inside the reasoning (max_tokens): it is all reasoning.
        assert_eq!(
            split(false, &["<think>\nstill thinking\n"]),
            ("still thinking".into(), String::new())
        );
        assert!(Reasoning::prompt_opens_think(
            "<|im_start|>assistant\n<think>\n"
        ));
        assert!(!Reasoning::prompt_opens_think(
            "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        ));
    }

    #[test]
    fn tool_calls_are_parsed_and_malformed_ones_stay_content() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
                    {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\"}\n\
                    </tool_call>";
        let (calls, content) = parse_tool_calls(text);
        assert_eq!(content, "Let me check.");
        assert_eq!(
            calls,
            [
                ToolCall {
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into()
                },
                ToolCall {
                    name: "now".into(),
                    arguments: "{}".into()
                }
            ]
        );
        let bad = "<tool_call>\nnot json\n</tool_call>";
        assert_eq!(parse_tool_calls(bad), (Vec::new(), bad.to_string()));

        let mut held = ToolCalls::new();
        let mut content = String::new();
        for piece in [
            "Sure",
            ". <tool",
            "_call>\n{\"name\": \"now\"}",
            "\n</tool_call>",
        ] {
            content.push_str(&held.push(piece));
        }
        assert_eq!(content, "Sure. ");
        let (calls, rest) = held.finish();
        assert_eq!(calls.len(), 1);
        assert_eq!(rest, "");
    }
}
