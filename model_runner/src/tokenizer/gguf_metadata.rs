//! Typed reads of GGUF metadata for the tokenizer. Absent keys are `Ok(None)`; keys that are
//! present with the wrong type are errors, so a corrupt file fails loudly instead of silently
//! falling back to defaults.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use super::TokenizerError;

pub(super) type Metadata = HashMap<String, Value>;

fn malformed(key: &str, want: &str, got: &Value) -> TokenizerError {
    TokenizerError::MissingMetadata(format!("{key}: expected {want}, found {:?}", got.value_type()))
}

/// Any integer variant as i64: writers differ in which width they use for ids and types.
fn as_i64(v: &Value) -> Option<i64> {
    Some(match v {
        Value::U8(x) => *x as i64,
        Value::I8(x) => *x as i64,
        Value::U16(x) => *x as i64,
        Value::I16(x) => *x as i64,
        Value::U32(x) => *x as i64,
        Value::I32(x) => *x as i64,
        Value::U64(x) => i64::try_from(*x).ok()?,
        Value::I64(x) => *x,
        _ => return None,
    })
}

pub(super) fn string(md: &Metadata, key: &str) -> Result<Option<String>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(malformed(key, "string", v)),
    }
}

pub(super) fn boolean(md: &Metadata, key: &str) -> Result<Option<bool>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(malformed(key, "bool", v)),
    }
}

fn array<'a>(md: &'a Metadata, key: &str) -> Result<Option<&'a [Value]>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(v) => Err(malformed(key, "array", v)),
    }
}

pub(super) fn string_array(md: &Metadata, key: &str) -> Result<Option<Vec<String>>, TokenizerError> {
    let Some(items) = array(md, key)? else {
        return Ok(None);
    };
    items
        .iter()
        .map(|v| match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(malformed(key, "array of strings", other)),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

pub(super) fn i32_array(md: &Metadata, key: &str) -> Result<Option<Vec<i32>>, TokenizerError> {
    let Some(items) = array(md, key)? else {
        return Ok(None);
    };
    items
        .iter()
        .map(|v| as_i64(v).and_then(|x| i32::try_from(x).ok()).ok_or_else(|| malformed(key, "array of i32", v)))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

pub(super) fn f32_array(md: &Metadata, key: &str) -> Result<Option<Vec<f32>>, TokenizerError> {
    let Some(items) = array(md, key)? else {
        return Ok(None);
    };
    items
        .iter()
        .map(|v| match v {
            Value::F32(x) => Ok(*x),
            other => Err(malformed(key, "array of f32", other)),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// A token id key, checked against the vocabulary size. Negative ids mean "none" in some
/// converters (llama.cpp writes -1 for unset special tokens in older files).
pub(super) fn token_id(md: &Metadata, key: &str, vocab: usize) -> Result<Option<u32>, TokenizerError> {
    let Some(v) = md.get(key) else {
        return Ok(None);
    };
    let id = as_i64(v).ok_or_else(|| malformed(key, "integer", v))?;
    if id < 0 {
        return Ok(None);
    }
    if id as u64 >= vocab as u64 {
        return Err(TokenizerError::MissingMetadata(format!(
            "{key} = {id} is outside the vocabulary of {vocab} tokens"
        )));
    }
    Ok(Some(id as u32))
}
