//! The OpenAI request bodies: parsed, checked and turned into an engine request. Unknown fields are
//! ignored (OpenAI's clients send fields a server may not know); a known field of the wrong type
//! or out of range, or one this server cannot honour, is a 400 naming the field. Sampling ranges
//! are checked by [`SamplingParams::validated`] alone, the same check `fak run` makes.

use super::error::ApiError;
use fak::runtime::{SamplingError, SamplingParams};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Most stop strings per request.
const MAX_STOPS: usize = 16;
/// Most alternatives per token in `top_logprobs` / `logprobs`.
pub const MAX_TOP_LOGPROBS: usize = 20;

/// The body as a JSON object.
pub fn parse_body(bytes: &[u8]) -> Result<Value, ApiError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::invalid(None, format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::invalid(None, "the body must be a JSON object"));
    }
    Ok(value)
}

/// `T` from the body's fields, a type error naming the field.
pub fn fields<T: DeserializeOwned>(body: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(body).map_err(|e| {
        let path = e.path().to_string();
        ApiError::invalid(Some(&path), format!("{path}: {}", e.inner()))
    })
}

/// The fields both endpoints share.
#[derive(Deserialize)]
pub struct Common {
    pub model: Option<String>,
    pub max_tokens: Option<u64>,
    pub n: Option<u64>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub stop: Option<Value>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// vLLM's extension: -1 or 0 keep every token.
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    /// Extension: keep generating past end-of-generation tokens (benchmarks).
    #[serde(default)]
    pub ignore_eos: bool,
    /// Extension: each choice also carries the generated token ids (`token_ids`).
    #[serde(default)]
    pub return_token_ids: bool,
    pub logit_bias: Option<serde_json::Map<String, Value>>,
}

#[derive(Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

impl Common {
    /// The sampling parameters, defaults as OpenAI's (temperature 1); a request without a seed
    /// gets `fresh_seed`.
    pub fn sampling(&self, fresh_seed: u64) -> Result<SamplingParams, ApiError> {
        let top_k = match self.top_k {
            None | Some(-1) | Some(0) => 0,
            Some(k) if k > 0 => k as usize,
            Some(k) => {
                return Err(ApiError::invalid(
                    Some("top_k"),
                    format!("top_k must be -1 (no cut) or positive, got {k}"),
                ));
            }
        };
        SamplingParams {
            temperature: self.temperature.unwrap_or(1.0),
            top_k,
            top_p: self.top_p.unwrap_or(1.0),
            seed: self.seed.map_or(fresh_seed, |s| s as u64),
            min_p: self.min_p.unwrap_or(0.0),
            repetition_penalty: self.repetition_penalty.unwrap_or(1.0),
            presence_penalty: self.presence_penalty.unwrap_or(0.0),
            frequency_penalty: self.frequency_penalty.unwrap_or(0.0),
        }
        .validated()
        .map_err(|e| ApiError::invalid(Some(sampling_param(&e)), e.to_string()))
    }

    /// Refuses what this server does not do rather than ignoring it silently.
    pub fn check_supported(&self) -> Result<(), ApiError> {
        if let Some(n) = self.n
            && n != 1
        {
            return Err(ApiError::invalid(
                Some("n"),
                format!("n must be 1: this server returns one choice per request, got {n}"),
            ));
        }
        if self.logit_bias.as_ref().is_some_and(|b| !b.is_empty()) {
            return Err(ApiError::invalid(
                Some("logit_bias"),
                "logit_bias is not supported",
            ));
        }
        if self.max_tokens == Some(0) {
            return Err(ApiError::invalid(
                Some("max_tokens"),
                "max_tokens must be at least 1",
            ));
        }
        Ok(())
    }

    pub fn stops(&self) -> Result<Vec<String>, ApiError> {
        let bad = |why: &str| ApiError::invalid(Some("stop"), why.to_string());
        let stops = match &self.stop {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("stop must be a string or an array of strings"))?,
            Some(_) => return Err(bad("stop must be a string or an array of strings")),
        };
        if stops.len() > MAX_STOPS {
            return Err(bad(&format!(
                "at most {MAX_STOPS} stop strings, got {}",
                stops.len()
            )));
        }
        if stops.iter().any(String::is_empty) {
            return Err(bad("a stop string is empty"));
        }
        Ok(stops)
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }
}

fn sampling_param(e: &SamplingError) -> &'static str {
    match e {
        SamplingError::Temperature(_) => "temperature",
        SamplingError::TopP(_) => "top_p",
        SamplingError::MinP(_) => "min_p",
        SamplingError::RepetitionPenalty(_) => "repetition_penalty",
        SamplingError::PresencePenalty(_) => "presence_penalty",
        SamplingError::FrequencyPenalty(_) => "frequency_penalty",
    }
}

/// `/v1/completions`' own fields.
#[derive(Deserialize)]
pub struct CompletionFields {
    pub prompt: Option<Value>,
    /// Legacy logprobs: the number of alternatives per token (0 = only the chosen one's).
    pub logprobs: Option<u64>,
    #[serde(default)]
    pub echo: bool,
    pub best_of: Option<u64>,
    pub suffix: Option<String>,
}

/// A completion prompt: text, or token ids.
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
}

impl CompletionFields {
    pub fn check_supported(&self) -> Result<(), ApiError> {
        if self.echo {
            return Err(ApiError::invalid(Some("echo"), "echo is not supported"));
        }
        if self.best_of.is_some_and(|b| b != 1) {
            return Err(ApiError::invalid(Some("best_of"), "best_of must be 1"));
        }
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::invalid(Some("suffix"), "suffix is not supported"));
        }
        top_logprobs("logprobs", self.logprobs)?;
        Ok(())
    }

    /// One prompt: a string, an array of token ids, or an array holding exactly one of either.
    pub fn prompt(&self) -> Result<Prompt, ApiError> {
        let bad = |why: String| ApiError::invalid(Some("prompt"), why);
        let one = |v: &Value| -> Result<Prompt, ApiError> {
            match v {
                Value::String(s) => Ok(Prompt::Text(s.clone())),
                Value::Array(ids) => ids
                    .iter()
                    .map(|id| id.as_u64().and_then(|id| u32::try_from(id).ok()))
                    .collect::<Option<Vec<u32>>>()
                    .map(Prompt::Tokens)
                    .ok_or_else(|| bad("a token-id prompt must hold non-negative integers".into())),
                _ => Err(bad(
                    "prompt must be a string or an array of token ids".into()
                )),
            }
        };
        match &self.prompt {
            None => Err(bad("prompt is required".into())),
            Some(Value::Array(items)) if items.iter().all(|v| !v.is_number()) => {
                match items.as_slice() {
                    [single] => one(single),
                    _ => Err(bad(format!(
                        "one prompt per request, got {} (send them as separate requests: they \
                         are batched all the same)",
                        items.len()
                    ))),
                }
            }
            Some(v) => one(v),
        }
    }
}

/// `/v1/chat/completions`' own fields (the messages and tools stay JSON: the template reads them).
#[derive(Deserialize)]
pub struct ChatFields {
    pub messages: Option<Value>,
    pub max_completion_tokens: Option<u64>,
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<u64>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub response_format: Option<ResponseFormat>,
    pub chat_template_kwargs: Option<TemplateKwargs>,
}

#[derive(Deserialize)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Deserialize)]
pub struct TemplateKwargs {
    /// Qwen3's thinking switch (default on, as the template has it).
    pub enable_thinking: Option<bool>,
}

impl ChatFields {
    pub fn check_supported(&self) -> Result<(), ApiError> {
        if let Some(format) = &self.response_format
            && format.kind != "text"
        {
            return Err(ApiError::invalid(
                Some("response_format"),
                format!(
                    "response_format {:?} is not supported (only \"text\")",
                    format.kind
                ),
            ));
        }
        match &self.tool_choice {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s == "auto" || s == "none" => {}
            Some(other) => {
                return Err(ApiError::invalid(
                    Some("tool_choice"),
                    format!("tool_choice {other} is not supported (\"auto\" or \"none\")"),
                ));
            }
        }
        if self.top_logprobs.is_some() && !self.logprobs {
            return Err(ApiError::invalid(
                Some("top_logprobs"),
                "top_logprobs needs logprobs: true",
            ));
        }
        top_logprobs("top_logprobs", self.top_logprobs)?;
        Ok(())
    }

    /// Whether the template gets tools and the answer is parsed for calls.
    pub fn tools_active(&self) -> bool {
        let listed = matches!(&self.tools, Some(Value::Array(t)) if !t.is_empty());
        let none = matches!(&self.tool_choice, Some(Value::String(s)) if s == "none");
        listed && !none
    }

    pub fn enable_thinking(&self) -> bool {
        self.chat_template_kwargs
            .as_ref()
            .and_then(|k| k.enable_thinking)
            .unwrap_or(true)
    }

    /// The tools as JSON text (key order kept) for the template.
    pub fn tools_json(&self) -> Result<Option<String>, ApiError> {
        match &self.tools {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(tools)) => {
                for (i, tool) in tools.iter().enumerate() {
                    if tool["function"]["name"].as_str().is_none() {
                        return Err(ApiError::invalid(
                            Some(&format!("tools[{i}]")),
                            format!("tools[{i}] has no function.name"),
                        ));
                    }
                }
                Ok(self
                    .tools_active()
                    .then(|| Value::Array(tools.clone()).to_string()))
            }
            Some(_) => Err(ApiError::invalid(Some("tools"), "tools must be an array")),
        }
    }

    /// The messages as the template reads them: each with a role the template knows and its
    /// content as text (OpenAI's array of text parts joined), as JSON text.
    pub fn messages_json(&self) -> Result<String, ApiError> {
        let bad = |at: String, why: String| ApiError::invalid(Some(&at), why);
        let Some(Value::Array(messages)) = &self.messages else {
            return Err(bad(
                "messages".into(),
                "messages must be a non-empty array".into(),
            ));
        };
        if messages.is_empty() {
            return Err(bad(
                "messages".into(),
                "messages must be a non-empty array".into(),
            ));
        }
        let mut out = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            let at = format!("messages[{i}]");
            let Value::Object(fields) = m else {
                return Err(bad(at.clone(), format!("{at} is not an object")));
            };
            let mut fields = fields.clone();
            let role = match fields.get("role").and_then(Value::as_str) {
                Some("developer") => "system",
                Some(role @ ("system" | "user" | "assistant" | "tool")) => role,
                Some(other) => {
                    return Err(bad(
                        format!("{at}.role"),
                        format!(
                            "{at}.role {other:?} is not one of system, developer, user, \
                             assistant, tool"
                        ),
                    ));
                }
                None => return Err(bad(format!("{at}.role"), format!("{at} has no role"))),
            };
            fields.insert("role".into(), role.into());
            let content = match fields.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => text_parts(parts).ok_or_else(|| {
                    bad(
                        format!("{at}.content"),
                        format!("{at}.content: only text parts are supported"),
                    )
                })?,
                Some(_) => {
                    return Err(bad(
                        format!("{at}.content"),
                        format!("{at}.content must be a string or an array of text parts"),
                    ));
                }
            };
            fields.insert("content".into(), content.into());
            out.push(Value::Object(fields));
        }
        Ok(Value::Array(out).to_string())
    }

    pub fn top_logprobs(&self) -> Option<usize> {
        self.logprobs
            .then(|| self.top_logprobs.unwrap_or(0) as usize)
    }
}

/// The text of OpenAI content parts (`{"type": "text", "text": …}`), None if one is not text.
fn text_parts(parts: &[Value]) -> Option<String> {
    parts
        .iter()
        .map(|p| match (p["type"].as_str(), p["text"].as_str()) {
            (Some("text"), Some(text)) => Some(text),
            _ => None,
        })
        .collect()
}

fn top_logprobs(param: &str, n: Option<u64>) -> Result<(), ApiError> {
    match n {
        Some(n) if n as usize > MAX_TOP_LOGPROBS => Err(ApiError::invalid(
            Some(param),
            format!("{param} must be between 0 and {MAX_TOP_LOGPROBS}, got {n}"),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn common(body: Value) -> Result<Common, ApiError> {
        fields(&body)
    }

    #[test]
    fn a_mistyped_field_is_named_and_unknown_fields_are_ignored() {
        let err = common(json!({"temperature": "hot"})).err().unwrap();
        assert_eq!(err.param.as_deref(), Some("temperature"));
        assert!(err.message.contains("temperature"), "{}", err.message);
        let ok = common(json!({"temperature": 0.5, "some_future_field": {"x": 1}})).unwrap();
        assert_eq!(ok.temperature, Some(0.5));
        let err = common(json!({"max_tokens": -3})).err().unwrap();
        assert_eq!(err.param.as_deref(), Some("max_tokens"));
    }

    #[test]
    fn sampling_ranges_come_from_the_engine_check() {
        let c = common(json!({"top_p": 0.0})).unwrap();
        let err = c.sampling(1).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("top_p"));
        let c = common(json!({"temperature": 0, "seed": -1, "top_k": -1})).unwrap();
        let p = c.sampling(1).unwrap();
        assert!(p.is_greedy());
        assert_eq!(p.seed, u64::MAX);
        assert!(common(json!({"top_k": -2})).unwrap().sampling(1).is_err());
        // JSON has no NaN, but 1e39 does not fit an f32 and reads as infinity: refused too.
        let c = common(json!({"temperature": 1e39})).unwrap();
        assert_eq!(c.temperature, Some(f32::INFINITY));
        let err = c.sampling(1).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("temperature"));
        assert!(err.message.contains("got inf"), "{}", err.message);
    }

    #[test]
    fn prompts_and_stops_take_the_openai_shapes() {
        let p = |v: Value| {
            fields::<CompletionFields>(&json!({ "prompt": v }))
                .unwrap()
                .prompt()
        };
        assert!(matches!(p(json!("hi")), Ok(Prompt::Text(t)) if t == "hi"));
        assert!(matches!(p(json!([1, 2])), Ok(Prompt::Tokens(t)) if t == [1, 2]));
        assert!(matches!(p(json!([[5]])), Ok(Prompt::Tokens(t)) if t == [5]));
        assert!(p(json!(["a", "b"])).is_err());
        assert!(p(json!([1, -2])).is_err());
        assert!(p(json!(7)).is_err());
        let stops = |v: Value| common(json!({ "stop": v })).unwrap().stops();
        assert_eq!(stops(json!("x")).unwrap(), ["x"]);
        assert_eq!(stops(json!(["a", "b"])).unwrap(), ["a", "b"]);
        assert!(stops(json!([1])).is_err());
        assert!(stops(json!([""])).is_err());
    }

    #[test]
    fn messages_are_checked_and_normalised() {
        let chat = |v: Value| {
            fields::<ChatFields>(&json!({ "messages": v }))
                .unwrap()
                .messages_json()
        };
        let ok = chat(json!([
            {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": null, "tool_calls": []},
        ]))
        .unwrap();
        let ok: Value = serde_json::from_str(&ok).unwrap();
        assert_eq!(ok[0]["role"], "system");
        assert_eq!(ok[0]["content"], "ab");
        assert_eq!(ok[1]["content"], "");
        let err = chat(json!([{"role": "wizard", "content": "x"}])).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("messages[0].role"));
        assert!(chat(json!([])).is_err());
        assert!(chat(json!([{"role": "user", "content": [{"type": "image_url"}]}])).is_err());
    }
}
