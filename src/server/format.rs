//! Per-token extension fields shared by both endpoints: logprobs in OpenAI's two layouts,
//! `token_metrics` (entropy, varentropy, strategy decisions) and `token_ids`.

use crate::{Engine, GeneratedToken};
use serde_json::{json, Map, Value};

/// A token's text as clients see it (decoded alone, special tokens kept).
pub fn token_text(engine: &Engine, id: u32) -> String {
    engine.tokenizer().decode(&[id], false).unwrap_or_default()
}

/// What a response carries beside the text.
#[derive(Clone, Copy, Default)]
pub struct Extras {
    pub return_metrics: bool,
    pub return_token_ids: bool,
}

impl Extras {
    /// Adds `token_metrics` and `token_ids` for these tokens to a choice object.
    pub fn apply(&self, tokens: &[GeneratedToken], choice: &mut Map<String, Value>) {
        if self.return_metrics {
            let metrics: Vec<Value> =
                tokens.iter().map(|t| t.metrics.as_ref().map_or(Value::Null, |m| json!(m))).collect();
            choice.insert("token_metrics".into(), Value::Array(metrics));
        }
        if self.return_token_ids {
            choice.insert("token_ids".into(), json!(tokens.iter().map(|t| t.token_id).collect::<Vec<_>>()));
        }
    }
}

/// Completions layout: parallel arrays, top logprobs as `{token_text: logprob}` maps.
/// `text_offset` carries on across stream chunks.
pub fn completion_logprobs(engine: &Engine, tokens: &[GeneratedToken], text_offset: &mut usize) -> Value {
    let (mut texts, mut lps, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
    for t in tokens {
        let text = token_text(engine, t.token_id);
        offsets.push(*text_offset);
        *text_offset += text.len();
        match &t.logprob {
            Some(lp) => {
                lps.push(json!(lp.logprob));
                let top: Map<String, Value> =
                    lp.top_logprobs.iter().map(|&(id, p)| (token_text(engine, id), json!(p))).collect();
                tops.push(Value::Object(top));
            }
            None => {
                lps.push(Value::Null);
                tops.push(Value::Null);
            }
        }
        texts.push(text);
    }
    json!({ "tokens": texts, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets })
}

/// Chat layout: `{"content": [{token, logprob, bytes, top_logprobs: [...]}]}`.
pub fn chat_logprobs(engine: &Engine, tokens: &[GeneratedToken]) -> Value {
    let entry = |id: u32, logprob: f32| {
        let text = token_text(engine, id);
        let bytes = text.as_bytes().to_vec();
        json!({ "token": text, "logprob": logprob, "bytes": bytes })
    };
    let content: Vec<Value> = tokens
        .iter()
        .filter_map(|t| {
            let lp = t.logprob.as_ref()?;
            let mut e = entry(t.token_id, lp.logprob);
            let top: Vec<Value> = lp.top_logprobs.iter().map(|&(id, p)| entry(id, p)).collect();
            e["top_logprobs"] = Value::Array(top);
            Some(e)
        })
        .collect();
    json!({ "content": content })
}
