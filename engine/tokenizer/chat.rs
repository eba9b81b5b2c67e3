//! Chat templates: the GGUF's `tokenizer.chat_template` (Jinja) rendered with minijinja the way
//! Hugging Face `apply_chat_template` renders it with jinja2.
//!
//! Hugging Face uses a sandboxed jinja2 environment with `trim_blocks` and `lstrip_blocks` on,
//! a `raise_exception(message)` global, and passes `messages`, `add_generation_prompt`, the
//! special-token strings (`bos_token`, `eos_token`) and extra keyword arguments such as
//! `enable_thinking`. The environment here is set up the same, with `minijinja-contrib`'s
//! pycompat layer for the Python string methods the Qwen templates call (`startswith`, `split`,
//! `lstrip`, `strip('\n')`, …). Loop controls (`{% break %}`) and `strftime_now` are not
//! provided: no template fak renders uses them. A server's conversation (messages with tool
//! calls and reasoning, tool definitions) comes as JSON ([`ChatTemplate::render_json`]); maps
//! keep the client's key order, as jinja2's `tojson` writes them.
//!
//! A template comes from the model file, so it is hostile input: every render runs under a
//! budget ([`TemplateBudget`]) — minijinja's fuel (instructions executed and bytes of data
//! created), a recursion limit and a cap on the output — and a template that exceeds it fails
//! with an error saying which limit, rather than looping for hours or allocating until the
//! process aborts.

use super::TokenizerError;
use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, Error, ErrorKind, Value, context};

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` (or `tool`).
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// ChatML, for a file without a template: each message as
/// `<|im_start|>{role}\n{content}<|im_end|>\n`, then `<|im_start|>assistant\n` when a generation
/// prompt is asked for (llama.cpp's fallback too).
pub const CHATML_TEMPLATE: &str = "{%- for message in messages -%}\
    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\
    {%- endfor -%}\
    {%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

/// What one render may spend. Real templates (Qwen3's, Qwen3.5's) use a few thousand fuel per
/// message and a recursion depth of 2; the limits leave them orders of magnitude of room while
/// a template that loops 10^10 times or doubles a string 40 times stops within a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TemplateBudget {
    /// minijinja fuel: about one per instruction and one per 64 bytes of data created.
    pub fuel: u64,
    /// Nested macro calls, includes and blocks.
    pub recursion: usize,
    /// Bytes of rendered output.
    pub output_bytes: usize,
}

impl TemplateBudget {
    /// Fuel and output any conversation gets, on top of what its size adds.
    const BASE_FUEL: u64 = 2_000_000;
    const BASE_OUTPUT: usize = 1 << 20;
    /// Deep enough for any real template's macros, shallow enough for a 2 MiB thread stack.
    const RECURSION: usize = 64;

    /// The budget for rendering `messages`: [`for_input`](Self::for_input) of their roles' and
    /// contents' bytes.
    pub fn for_messages(messages: &[ChatMessage]) -> Self {
        let input: usize = messages
            .iter()
            .map(|m| m.role.len() + m.content.len())
            .sum();
        Self::for_input(input)
    }

    /// The budget for a conversation of `input` bytes (text, or JSON with its tools): a base,
    /// plus one fuel per byte of input (64 bytes of data created per input byte) and four bytes
    /// of output per byte of input.
    pub fn for_input(input: usize) -> Self {
        TemplateBudget {
            fuel: Self::BASE_FUEL.saturating_add(input as u64),
            recursion: Self::RECURSION,
            output_bytes: Self::BASE_OUTPUT.saturating_add(input.saturating_mul(4)),
        }
    }
}

/// A chat template with the special-token strings it may refer to.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// A template from its Jinja source; `bos_token`/`eos_token` are the texts the template
    /// sees under those names (empty when the vocabulary has none).
    pub fn new(
        source: impl Into<String>,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Self {
        Self {
            source: source.into(),
            bos_token: bos_token.unwrap_or_default().into(),
            eos_token: eos_token.unwrap_or_default().into(),
        }
    }

    /// The Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders a conversation under [`TemplateBudget::for_messages`]. `enable_thinking = false`
    /// is what Qwen3's templates read to emit an empty `<think>` block after the generation
    /// prompt.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: bool,
    ) -> Result<String, TokenizerError> {
        let budget = TemplateBudget::for_messages(messages);
        self.render_within(messages, add_generation_prompt, enable_thinking, budget)
    }

    /// [`render`](Self::render) under an explicit budget.
    pub fn render_within(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: bool,
        budget: TemplateBudget,
    ) -> Result<String, TokenizerError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                Value::from_pairs([
                    ("role", Value::from(m.role.as_str())),
                    ("content", Value::from(m.content.as_str())),
                ])
            })
            .collect();
        self.render_values(
            Value::from(messages),
            Value::UNDEFINED,
            add_generation_prompt,
            enable_thinking,
            budget,
        )
    }

    /// Renders a conversation given as JSON: `messages` an array of objects (`role`, `content`,
    /// and whatever else the template reads: `tool_calls`, `reasoning_content`, …), `tools` an
    /// array of tool definitions (OpenAI's `{"type": "function", "function": {…}}`) or None.
    /// The budget is [`TemplateBudget::for_input`] of the JSON's bytes.
    pub fn render_json(
        &self,
        messages: &str,
        tools: Option<&str>,
        add_generation_prompt: bool,
        enable_thinking: bool,
    ) -> Result<String, TokenizerError> {
        let parse = |what: &str, json: &str| {
            serde_json::from_str::<Value>(json).map_err(|e| TokenizerError::ChatTemplate {
                why: format!("the {what} are not JSON: {e}"),
            })
        };
        let budget = TemplateBudget::for_input(messages.len() + tools.map_or(0, str::len));
        let messages = parse("messages", messages)?;
        let tools = match tools {
            Some(json) => parse("tools", json)?,
            None => Value::UNDEFINED,
        };
        self.render_values(
            messages,
            tools,
            add_generation_prompt,
            enable_thinking,
            budget,
        )
    }

    fn render_values(
        &self,
        messages: Value,
        tools: Value,
        add_generation_prompt: bool,
        enable_thinking: bool,
        budget: TemplateBudget,
    ) -> Result<String, TokenizerError> {
        let mut env = Environment::new();
        env.set_fuel(Some(budget.fuel));
        env.set_recursion_limit(budget.recursion);
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(template_error)?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        let template = env
            .template_from_str(&self.source)
            .map_err(template_error)?;
        let mut out = CappedOutput::new(budget.output_bytes);
        let rendered = template.render_captured_to(
            context! {
                messages,
                tools,
                add_generation_prompt,
                enable_thinking,
                bos_token => self.bos_token.as_str(),
                eos_token => self.eos_token.as_str(),
            },
            &mut out,
        );
        match rendered {
            Ok(_) => String::from_utf8(out.bytes).map_err(|e| TokenizerError::ChatTemplate {
                why: format!("output is not UTF-8: {e}"),
            }),
            Err(_) if out.overflowed => Err(TokenizerError::ChatTemplate {
                why: format!(
                    "output exceeds the {} bytes allowed for this conversation",
                    budget.output_bytes
                ),
            }),
            Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(TokenizerError::ChatTemplate {
                why: format!(
                    "rendering used up its budget of {} fuel (instructions and data) for this \
                     conversation: the template loops or builds data without bound",
                    budget.fuel
                ),
            }),
            Err(e) => Err(template_error(e)),
        }
    }
}

/// The render's output, refusing to grow past a cap.
struct CappedOutput {
    bytes: Vec<u8>,
    cap: usize,
    overflowed: bool,
}

impl CappedOutput {
    fn new(cap: usize) -> Self {
        CappedOutput {
            bytes: Vec::new(),
            cap,
            overflowed: false,
        }
    }
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.cap {
            self.overflowed = true;
            return Err(std::io::Error::other("chat template output cap reached"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// minijinja's error with its cause chain and, when it has one, the template line.
fn template_error(err: Error) -> TokenizerError {
    let mut why = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        why.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    TokenizerError::ChatTemplate { why }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_fallback_renders_each_message_and_the_prompt() {
        let t = ChatTemplate::new(CHATML_TEMPLATE, None, None);
        let msgs = [
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
        ];
        assert_eq!(
            t.render(&msgs, true, true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\n"
        );
        assert_eq!(
            t.render(&msgs[1..], false, true).unwrap(),
            "<|im_start|>user\nHi<|im_end|>\n"
        );
    }

    /// Tools and tool calls reach the template as the client wrote them: keys in their order
    /// through `tojson`, and a JSON error names what was not JSON.
    #[test]
    fn json_conversations_keep_key_order_and_tools() {
        let t = ChatTemplate::new(
            "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}\
             {% for m in messages %}{{ m.role }}:{{ m.content }}\
             {% for c in m.tool_calls %}[{{ c.function.name }} {{ c.function.arguments }}]\
             {% endfor %};{% endfor %}",
            None,
            None,
        );
        let tools = r#"[{"type": "function", "function": {"name": "f", "a": 1}}]"#;
        let messages = r#"[{"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls":
             [{"function": {"name": "f", "arguments": "{\"x\": 2}"}}]}]"#;
        assert_eq!(
            t.render_json(messages, Some(tools), false, true).unwrap(),
            "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"a\": 1}}\n\
             user:hi;assistant:[f {\"x\": 2}];"
        );
        let err = t.render_json("[{", None, false, true).unwrap_err();
        assert!(err.to_string().contains("messages are not JSON"), "{err}");
    }

    /// A server's JSON conversation renders under the same budget as a command-line one.
    #[test]
    fn json_conversations_render_under_the_budget() {
        let looping = ChatTemplate::new(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            None,
            None,
        );
        let messages = r#"[{"role": "user", "content": "hi"}]"#;
        let err = looping
            .render_json(messages, None, true, true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("used up its budget"), "{err}");
        let doubling = ChatTemplate::new(
            "{% set s = namespace(x='ab') %}{% for i in range(40) %}{% set s.x = s.x + s.x %}\
             {% endfor %}{{ s.x }}",
            None,
            None,
        );
        let err = doubling
            .render_json(messages, Some("[]"), true, true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("budget") || err.contains("exceeds"), "{err}");
    }

    #[test]
    fn raise_exception_becomes_an_error_with_its_message() {
        let t = ChatTemplate::new("{{ raise_exception('no system role') }}", None, None);
        let err = t.render(&[], false, true).unwrap_err().to_string();
        assert!(err.contains("no system role"), "{err}");
    }
}
