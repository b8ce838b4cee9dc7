//! Reading answers out of free-form completions: the final number of a worked solution,
//! the option letter of a multiple-choice answer, the code of a fenced block. Lenient on
//! format (small models rarely follow it exactly), strict on the value.

/// The number a solution ends with: after the last "answer is"/"answer:" marker or "####"
/// if there is one, else the last number in the text. Thousands separators are dropped.
pub fn extract_final_number(text: &str) -> Option<f64> {
    let lower = text.to_ascii_lowercase();
    let markers = ["answer is", "answer:", "####", "\\boxed{"];
    let after_marker = markers
        .iter()
        .filter_map(|m| lower.rfind(m).map(|p| p + m.len()))
        .max()
        .and_then(|p| text.get(p..))
        .and_then(|rest| numbers(rest).into_iter().next());
    after_marker.or_else(|| numbers(text).into_iter().last())
}

/// Every number in `text`, in order: optional minus sign, digits with `,` thousands
/// separators, an optional fraction. "1,234.5" is one number; "3, 4" two.
pub fn numbers(text: &str) -> Vec<f64> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let negative = i > 0 && bytes[i - 1] == b'-' && (i < 2 || !bytes[i - 2].is_ascii_alphanumeric());
        let mut digits = String::new();
        while i < bytes.len() {
            let b = bytes[i];
            if b.is_ascii_digit() {
                digits.push(b as char);
            } else if b == b','
                && bytes.get(i + 1..i + 4).is_some_and(|d| d.iter().all(u8::is_ascii_digit))
                && !bytes.get(i + 4).is_some_and(u8::is_ascii_digit)
            {
                // A thousands separator: exactly three digits follow.
            } else if b == b'.' && !digits.contains('.') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
                digits.push('.');
            } else {
                break;
            }
            i += 1;
        }
        if let Ok(v) = digits.parse::<f64>() {
            out.push(if negative { -v } else { v });
        }
    }
    out
}

/// Exact match on the value, with room for float formatting ("18" == "18.00").
pub fn same_number(got: f64, expected: f64) -> bool {
    (got - expected).abs() <= 1e-6 * expected.abs().max(1.0)
}

/// The option letter (A-D) an answer picks: after an "answer is"/"answer:" marker if there
/// is one, else the first standalone capital A-D ("B", "(C)", "D." but not the article in
/// "A good choice").
pub fn extract_letter(text: &str) -> Option<char> {
    let lower = text.to_ascii_lowercase();
    for marker in ["answer is", "answer:"] {
        if let Some(p) = lower.find(marker) {
            if let Some(c) = text.get(p + marker.len()..).and_then(standalone_letter) {
                return Some(c);
            }
        }
    }
    standalone_letter(text)
}

fn standalone_letter(text: &str) -> Option<char> {
    let chars: Vec<char> = text.chars().collect();
    (0..chars.len()).find_map(|i| {
        let c = chars[i];
        let before_ok = i == 0 || !chars[i - 1].is_alphanumeric();
        let next = chars.get(i + 1).copied();
        // "A." and "A)" mark an option; "A " is one only when nothing alphabetic follows it
        // directly in a word ("A good ...").
        let after_ok = match next {
            None => true,
            Some(' ') => chars.get(i + 2).is_none_or(|n2| !n2.is_ascii_lowercase()),
            Some(n) => !n.is_alphanumeric(),
        };
        (('A'..='D').contains(&c) && before_ok && after_ok).then_some(c)
    })
}

/// The code of the first fenced block (```python or bare ```), or the whole completion
/// when it has no fence; an unclosed block (cut by the stop string or `max_tokens`) runs
/// to the end.
pub fn extract_code(completion: &str) -> String {
    let Some(open) = completion.find("```") else { return completion.to_string() };
    let after = &completion[open + 3..];
    // Skip the info string ("python", "py") up to the end of the fence line.
    let body = match after.find('\n') {
        Some(nl) => &after[nl + 1..],
        None => "",
    };
    match body.find("```") {
        Some(close) => body[..close].to_string(),
        None => body.to_string(),
    }
}
