//! Turns the OpenAI request fields into the engine's `GenerationParams`. Only what the
//! engine cannot check is checked here (`n`, integer signs, the `decoding` object's shape);
//! ranges of sampling and strategy parameters are `Engine::validate`'s job, on submit.

use entrobatch::strategy::WEDLM_DEFAULT_TEMPERATURE;
use entrobatch::{Decoding, GenerationParams, SamplingParams};

use super::defaults::GenerationDefaults;
use super::protocol::{common_field_names, unknown_key, CommonParams, INERT_FIELDS, LLAMA_SERVER_FIELDS};
use super::structured::parse_structured;
use crate::response::error::ApiError;
use entrobatch::{Prompt, Request};
use serde_json::Value;

/// Sampling settings shared by both endpoints. `max_tokens` is `None` when the client left
/// it out; the handler fills in its endpoint's default once the prompt length is known.
pub struct ParsedParams {
    pub params: GenerationParams,
    /// Choices per prompt: each copy is its own engine request, seeded `seed + i`.
    pub n: usize,
    pub max_tokens: Option<usize>,
    pub stream: bool,
    pub include_usage: bool,
    pub return_token_ids: bool,
}

/// The most choices one prompt may ask for: each is a sequence in the running batch.
pub const MAX_N: usize = 64;

pub fn parse_common(
    c: &mut CommonParams,
    logprobs: Option<usize>,
    defaults: &GenerationDefaults,
) -> Result<ParsedParams, ApiError> {
    defaults.fill(c);
    let n = match c.n {
        None => 1,
        Some(n) if (1..=MAX_N as i64).contains(&n) => n as usize,
        Some(n) => return Err(ApiError::invalid_param("n", format!("n must be between 1 and {MAX_N}, got {n}"))),
    };
    if let Some(b) = c.best_of.filter(|&b| b != n as i64) {
        let reason = format!("best_of is not supported (only best_of = n, here {n}), got {b}");
        return Err(ApiError::invalid_param("best_of", reason));
    }
    let max_tokens = match c.max_completion_tokens.or(c.max_tokens) {
        // 0 is the engine's to judge: it scores a prompt without generating.
        Some(v) if v < 0 => {
            return Err(ApiError::invalid_param("max_tokens", format!("max_tokens must not be negative, got {v}")))
        }
        Some(v) => Some(usize::try_from(v).unwrap_or(usize::MAX)),
        None => None,
    };
    let top_k = match c.top_k {
        None | Some(-1) | Some(0) => 0,
        Some(k) if k < 0 => {
            return Err(ApiError::invalid_param("top_k", format!("top_k must be -1 or 0 (off) or positive, got {k}")))
        }
        Some(k) => usize::try_from(k).unwrap_or(usize::MAX),
    };
    let mut logit_bias = Vec::new();
    for (key, &bias) in c.logit_bias.iter().flatten() {
        let id = key.parse::<u32>().map_err(|_| {
            ApiError::invalid_param("logit_bias", format!("logit_bias keys must be token ids, got {key:?}"))
        })?;
        logit_bias.push((id, bias));
    }
    let decoding = match c.decoding.take() {
        None | Some(serde_json::Value::Null) => Decoding::default(),
        // Deserialized through the enum itself, so every strategy added to it is accepted
        // here with no server change; an unknown one is a 400.
        Some(v) => serde_json::from_value(v).map_err(|e| {
            ApiError::invalid_param("decoding", format!("invalid decoding: {e}")).with_code("invalid_decoding")
        })?,
    };
    let defaults = SamplingParams::default();
    // WeDLM's reference samples mask rows at 0.2 unless told otherwise; a temperature the
    // client (or the server's generation defaults) set is always used as given.
    let default_temperature = match decoding {
        Decoding::Wedlm(_) => WEDLM_DEFAULT_TEMPERATURE,
        _ => defaults.temperature,
    };
    let sampling = SamplingParams {
        temperature: c.temperature.unwrap_or(default_temperature),
        top_k,
        top_p: c.top_p.unwrap_or(defaults.top_p),
        min_p: c.min_p.unwrap_or(defaults.min_p),
        repetition_penalty: c.repetition_penalty.unwrap_or(defaults.repetition_penalty),
        presence_penalty: c.presence_penalty.unwrap_or(defaults.presence_penalty),
        frequency_penalty: c.frequency_penalty.unwrap_or(defaults.frequency_penalty),
        // Negative seeds are valid in OpenAI's API; any 64 bits will do as ours.
        seed: c.seed.map(|s| s as u64),
        logprobs,
        logit_bias,
        ..defaults
    };
    let params = GenerationParams {
        sampling,
        max_tokens: max_tokens.unwrap_or(1),
        stop: c.stop.take().map(|s| s.into_vec()).unwrap_or_default(),
        stop_token_ids: c.stop_token_ids.take().unwrap_or_default(),
        ignore_eos: c.ignore_eos.unwrap_or(false),
        decoding,
        return_metrics: c.return_metrics.unwrap_or(false),
        structured: parse_structured(&mut c.structured)?,
        ttft_target_ms: c.ttft_target_ms,
        speculative: c.speculative,
        prediction: c.prediction.take().map(parse_prediction).transpose()?,
        ..GenerationParams::default()
    };
    Ok(ParsedParams {
        n,
        params,
        max_tokens,
        stream: c.stream.unwrap_or(false),
        include_usage: include_usage(c.stream_options.take())?,
        return_token_ids: c.return_token_ids.unwrap_or(false),
    })
}

/// The text of OpenAI's `prediction`: `{"type": "content", "content": text}`, the content a
/// string or a list of text parts (joined, as a message's parts are).
fn parse_prediction(prediction: Value) -> Result<String, ApiError> {
    let invalid = |reason: &str| ApiError::invalid_param("prediction", reason.to_string());
    let shape = r#"prediction must be {"type": "content", "content": "..."} (a string or a list of text parts)"#;
    let Value::Object(mut object) = prediction else { return Err(invalid(shape)) };
    if let Some(key) = unknown_key(&object, &["type", "content"]) {
        return Err(invalid(&format!("unknown key `{key}` in prediction: {shape}")));
    }
    if object.get("type") != Some(&Value::from("content")) {
        return Err(invalid(shape));
    }
    match object.remove("content") {
        Some(Value::String(text)) => Ok(text),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|part| match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                (Some("text"), Some(text)) if part.as_object().is_some_and(|o| o.len() == 2) => Ok(text),
                _ => Err(invalid(r#"each part of a prediction's content must be {"type": "text", "text": "..."}"#)),
            })
            .collect::<Result<String, _>>(),
        _ => Err(invalid(shape)),
    }
}

/// The engine request for `prompt`: the client's `max_tokens`, else the endpoint's default,
/// where `None` means whatever room the prompt leaves (vLLM's chat default; the engine
/// resolves it in `Engine::prepare`, since only it knows the prompt's length).
pub fn engine_request(
    prompt: Prompt,
    mut params: GenerationParams,
    max_tokens: Option<usize>,
    default: Option<usize>,
) -> Request {
    match max_tokens.or(default) {
        Some(n) => {
            params.max_tokens = n;
            Request::new(prompt, params)
        }
        None => Request::until_context_full(prompt, params),
    }
}

/// Refuses the fields no endpoint field claimed, except those that cannot change the output;
/// llama-server's own fields are told what to send instead.
pub fn refuse_unknown(unknown: &serde_json::Map<String, serde_json::Value>) -> Result<(), ApiError> {
    let common = common_field_names();
    let Some(key) = unknown.keys().find(|k| !INERT_FIELDS.contains(&k.as_str()) && !common.contains(k)) else {
        return Ok(());
    };
    let message = match LLAMA_SERVER_FIELDS.iter().find(|(name, _)| name == key) {
        Some((_, instead)) => format!("unsupported field `{key}` (llama-server's): {instead}"),
        None => {
            format!(
                "unsupported field `{key}`: this server does not implement it, and ignoring it could change the output"
            )
        }
    };
    Err(ApiError::invalid_param(key.as_str(), message).with_code("unsupported_field"))
}

/// A non-negative logprobs count (bounds are checked by the sampler).
pub fn parse_logprobs(param: &'static str, value: Option<i64>) -> Result<Option<usize>, ApiError> {
    match value {
        None => Ok(None),
        Some(v) if v < 0 => Err(ApiError::invalid_param(param, format!("{param} must be >= 0, got {v}"))),
        Some(v) => Ok(Some(usize::try_from(v).unwrap_or(usize::MAX))),
    }
}

/// `logprobs` with `top_logprobs` (chat's and Ollama's pair) as the count of alternatives per
/// token, or `None` when logprobs were not asked for.
pub fn parse_logprobs_pair(logprobs: Option<bool>, top_logprobs: Option<i64>) -> Result<Option<usize>, ApiError> {
    let top = parse_logprobs("top_logprobs", top_logprobs)?;
    match (logprobs.unwrap_or(false), top) {
        (true, top) => Ok(Some(top.unwrap_or(0))),
        (false, Some(_)) => Err(ApiError::invalid_param("top_logprobs", "top_logprobs requires logprobs: true")),
        (false, None) => Ok(None),
    }
}

/// `stream_options`: OpenAI's `include_usage` is its one key; anything else is refused.
fn include_usage(options: Option<Value>) -> Result<bool, ApiError> {
    let bad = |reason: String| ApiError::invalid_param("stream_options", reason);
    let options = match options {
        None | Some(Value::Null) => return Ok(false),
        Some(Value::Object(options)) => options,
        Some(_) => return Err(bad("stream_options must be an object".into())),
    };
    if let Some(key) = unknown_key(&options, &["include_usage"]) {
        return Err(bad(format!("unknown key `stream_options.{key}` (only `include_usage`)")));
    }
    match options.get("include_usage") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad("`stream_options.include_usage` must be a boolean".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn temperature_of(body: serde_json::Value, defaults: &GenerationDefaults) -> f32 {
        let mut c: CommonParams = serde_json::from_value(body).expect("common params");
        parse_common(&mut c, None, defaults).map_err(|e| e.message).expect("parses").params.sampling.temperature
    }

    #[test]
    fn wedlm_takes_the_reference_temperature_only_when_none_was_set() {
        let none = GenerationDefaults::default();
        let wedlm = json!({"decoding": {"strategy": "wedlm"}});
        // Tencent/WeDLM `wedlm/sampling_params.py`: `temperature: float = 0.2`.
        assert_eq!(temperature_of(wedlm.clone(), &none), 0.2);
        assert_eq!(temperature_of(json!({"decoding": {"strategy": "wedlm"}, "temperature": 1.0}), &none), 1.0);
        assert_eq!(temperature_of(json!({"decoding": {"strategy": "wedlm"}, "temperature": 0.0}), &none), 0.0);
        // A server-wide default counts as set.
        let server = GenerationDefaults { temperature: Some(0.7), ..GenerationDefaults::default() };
        assert_eq!(temperature_of(wedlm, &server), 0.7);
        // Other strategies keep their default.
        assert_eq!(temperature_of(json!({}), &none), 1.0);
        assert_eq!(temperature_of(json!({"decoding": {"strategy": "entropix"}}), &none), 1.0);
    }
}
