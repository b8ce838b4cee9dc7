//! `tojson` as HuggingFace's `apply_chat_template` defines it (transformers
//! `utils/chat_template_utils.py`), re-implemented for minijinja so that chat templates that
//! print JSON (tool definitions, tool-call arguments) render byte-for-byte as they do in Python.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// `tojson` as HF defines it: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`. minijinja's builtin differs (compact separators, HTML-escapes `<>&'`),
/// which would change the prompt text of tool-calling templates.
pub(super) fn tojson(value: Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match kwargs.get::<Option<Value>>("indent")?.or(indent) {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_i64() {
            Some(n) => " ".repeat(n.max(0) as usize),
            None => v.to_string(),
        }),
    };
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let separators = match kwargs.get::<Option<Vec<String>>>("separators")? {
        Some(s) if s.len() == 2 => (s[0].clone(), s[1].clone()),
        Some(_) => return Err(Error::new(ErrorKind::InvalidOperation, "separators must be a pair")),
        // Python's defaults: no trailing space after ',' when indenting.
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    kwargs.assert_all_used()?;
    let opts = JsonOpts { indent, ensure_ascii, sort_keys, item_sep: separators.0, key_sep: separators.1 };
    let mut out = String::new();
    write_json(&mut out, &value, &opts, 0)?;
    Ok(Value::from_safe_string(out))
}

struct JsonOpts {
    indent: Option<String>,
    ensure_ascii: bool,
    sort_keys: bool,
    item_sep: String,
    key_sep: String,
}

fn write_json(out: &mut String, v: &Value, o: &JsonOpts, depth: usize) -> Result<(), Error> {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => out.push_str(&py_float(f64::try_from(v.clone())?)),
        ValueKind::String | ValueKind::Plain | ValueKind::Bytes | ValueKind::Invalid => {
            json_str(out, &v.to_string(), o.ensure_ascii)
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if o.sort_keys {
                keys.sort_by_key(|k| k.to_string());
            }
            let items = keys.into_iter().map(|k| Ok((Some(k.clone()), v.get_item(&k)?)));
            write_container(out, ('{', '}'), items.collect::<Result<Vec<_>, Error>>()?, o, depth)?;
        }
        _ => {
            let items = v.try_iter()?.map(|x| (None, x)).collect();
            write_container(out, ('[', ']'), items, o, depth)?;
        }
    }
    Ok(())
}

fn write_container(
    out: &mut String,
    (open, close): (char, char),
    items: Vec<(Option<Value>, Value)>,
    o: &JsonOpts,
    depth: usize,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    let newline = |out: &mut String, d: usize| {
        if let Some(ind) = &o.indent {
            out.push('\n');
            out.push_str(&ind.repeat(d));
        }
    };
    for (i, (key, val)) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&o.item_sep);
        }
        newline(out, depth + 1);
        if let Some(k) = key {
            // Python converts non-string keys with str(): 1 -> "1", True -> "true".
            json_str(out, &k.to_string(), o.ensure_ascii);
            out.push_str(&o.key_sep);
        }
        write_json(out, val, o, depth + 1)?;
    }
    newline(out, depth);
    out.push(close);
    Ok(())
}

fn json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    // serde_json escapes exactly what Python's json does with ensure_ascii=False.
    let quoted = serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string());
    if !ensure_ascii {
        out.push_str(&quoted);
        return;
    }
    for c in quoted.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut buf = [0u16; 2];
            for unit in c.encode_utf16(&mut buf) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
}

/// Python `repr(float)`: shortest round-trip digits, `1.0` not `1`, `1e+16` not `1e16`.
fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let s = format!("{x:?}");
    match s.split_once('e') {
        Some((mant, exp)) if !exp.starts_with('-') => format!("{mant}e+{exp:0>2}"),
        Some((mant, exp)) => format!("{mant}e-{:0>2}", &exp[1..]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::py_float;

    /// Python: `json.dumps([1e16, 1e-5, 0.1, 1.0, 123456789.125])`.
    #[test]
    fn floats_match_python_repr() {
        let got: Vec<String> = [1e16, 1e-5, 0.1, 1.0, 123456789.125].iter().map(|&x| py_float(x)).collect();
        assert_eq!(got, ["1e+16", "1e-05", "0.1", "1.0", "123456789.125"]);
    }
}
