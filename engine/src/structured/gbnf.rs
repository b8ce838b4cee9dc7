//! llama.cpp's GBNF grammars, translated into llguidance's Lark dialect.
//!
//! The parse follows llama.cpp's grammar parser: a rule is `name ::= alternatives` and ends
//! at a newline, except inside parentheses or right after `::=` or `|`; `#` starts a comment; elements are
//! `"literals"`, `[character classes]`, `.`, rule names and `( groups )`, each optionally
//! followed by `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}` or `{,n}`. The translation keeps every
//! element a lexeme of its own and every rule a Lark rule (lowercase), so the language is
//! exactly the GBNF one: no element is merged into a greedy regex that could swallow text a
//! later element needs.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::spec::StructuredError;

/// Lark regex for GBNF's `.`: any character, newlines included.
const ANY_CHAR: &str = "/(?s:.)/";
/// llama.cpp's bound on repetition counts: a larger minimum is refused, a larger maximum
/// means no maximum. Kept so a grammar means here what it means there.
const MAX_REPETITIONS: i32 = 2000;

/// Translates a GBNF grammar (its `root` rule is the start) into Lark. Errors name the line
/// and column and what was expected, as llama.cpp's parser does.
pub fn gbnf_to_lark(src: &str) -> Result<String, StructuredError> {
    Parser { chars: src.chars().collect(), pos: 0, rules: Vec::new(), uses: Vec::new() }
        .parse()
        .map_err(|e| StructuredError::InvalidGrammar(format!("GBNF {e}")))
}

/// True when `grammar` is GBNF rather than Lark: some line outside comments defines a rule
/// with `::=`, which Lark never does (vLLM tells the two apart the same way).
pub fn looks_like_gbnf(grammar: &str) -> bool {
    grammar.lines().any(|line| {
        let code = line.split('#').next().unwrap_or("");
        let code = code.split("//").next().unwrap_or("");
        code.contains("::=")
    })
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    /// (GBNF name, Lark body, where it was defined).
    rules: Vec<(String, String, usize)>,
    /// (GBNF name, where it was used).
    uses: Vec<(String, usize)>,
}

/// One element of a sequence, as Lark text.
struct Item {
    text: String,
    /// Already carries a postfix operator: another one needs parentheses first.
    repeated: bool,
}

impl Parser {
    fn parse(mut self) -> Result<String, String> {
        self.skip_space(true);
        while !self.at_end() {
            self.parse_rule()?;
            self.skip_space(true);
        }
        let mut defined = HashMap::new();
        for (name, _, at) in &self.rules {
            if defined.insert(name.as_str(), *at).is_some() {
                return Err(self.error_at(*at, &format!("rule `{name}` is defined twice")));
            }
        }
        if !defined.contains_key("root") {
            return Err("grammar has no `root` rule (the rule the output must match)".into());
        }
        if let Some((name, at)) = self.uses.iter().find(|(n, _)| !defined.contains_key(n.as_str())) {
            return Err(self.error_at(*at, &format!("rule `{name}` is used but never defined")));
        }
        let mut out = String::new();
        for (name, body, _) in &self.rules {
            let _ = writeln!(out, "{}: {body}", lark_name(name));
        }
        Ok(out)
    }

    fn parse_rule(&mut self) -> Result<(), String> {
        let at = self.pos;
        let name = self.parse_name().ok_or_else(|| self.error("expected a rule name"))?;
        self.skip_space(false);
        if !self.eat_str("::=") {
            return Err(self.error(&format!("expected `::=` after `{name}`")));
        }
        self.skip_space(true);
        let body = self.parse_alternates(false)?;
        match self.peek() {
            None | Some('\n') | Some('\r') => {}
            Some(c) => return Err(self.error(&format!("unexpected `{c}`"))),
        }
        self.rules.push((name, body, at));
        Ok(())
    }

    fn parse_alternates(&mut self, nested: bool) -> Result<String, String> {
        let mut alts = vec![self.parse_sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.skip_space(true);
            alts.push(self.parse_sequence(nested)?);
        }
        Ok(alts.join(" | "))
    }

    fn parse_sequence(&mut self, nested: bool) -> Result<String, String> {
        let mut items: Vec<Item> = Vec::new();
        while let Some(c) = self.peek() {
            match c {
                '"' => {
                    self.pos += 1;
                    let text = self.parse_literal()?;
                    items.push(Item { text, repeated: false });
                }
                '[' => {
                    self.pos += 1;
                    let text = self.parse_class()?;
                    items.push(Item { text, repeated: false });
                }
                '.' => {
                    self.pos += 1;
                    items.push(Item { text: ANY_CHAR.into(), repeated: false });
                }
                '(' => {
                    self.pos += 1;
                    self.skip_space(true);
                    let inner = self.parse_alternates(true)?;
                    if !self.eat_str(")") {
                        return Err(self.error("expected `)`"));
                    }
                    items.push(Item { text: format!("({inner})"), repeated: false });
                }
                '*' | '+' | '?' => {
                    self.pos += 1;
                    self.repeat(&mut items, &c.to_string())?;
                }
                '{' => {
                    self.pos += 1;
                    let op = self.parse_braces()?;
                    self.repeat(&mut items, &op)?;
                }
                '<' | '!' => return Err(self.error("token references (`<...>`, `!<...>`) are not supported")),
                c if is_word_char(c) => {
                    let at = self.pos;
                    let name = self.parse_name().unwrap_or_default();
                    items.push(Item { text: lark_name(&name), repeated: false });
                    self.uses.push((name, at));
                }
                _ => break,
            }
            self.skip_space(nested);
        }
        if items.is_empty() {
            return Ok("\"\"".into());
        }
        Ok(items.into_iter().map(|i| i.text).collect::<Vec<_>>().join(" "))
    }

    /// Applies a postfix operator (`*`, `+`, `?` or a Lark `{m,n}`; empty for `{0}`) to the
    /// last item.
    fn repeat(&mut self, items: &mut [Item], op: &str) -> Result<(), String> {
        let Some(last) = items.last_mut() else {
            return Err(self.error("a repetition needs an element before it"));
        };
        if op.is_empty() {
            *last = Item { text: "\"\"".into(), repeated: false };
            return Ok(());
        }
        if last.repeated {
            last.text = format!("({})", last.text);
        }
        last.text.push_str(op);
        last.repeated = true;
        Ok(())
    }

    /// `{m}`, `{m,}`, `{m,n}`, `{,n}` after the `{`: the Lark operator, or "" when the
    /// element may only occur zero times.
    fn parse_braces(&mut self) -> Result<String, String> {
        self.skip_space(true);
        let min = self.parse_count()?;
        self.skip_space(true);
        let (min, max) = if self.eat_str(",") {
            self.skip_space(true);
            let max = self.parse_count()?;
            self.skip_space(true);
            (min.unwrap_or(0), max)
        } else {
            let m = min.ok_or_else(|| self.error("expected a count after `{`"))?;
            (m, Some(m))
        };
        if !self.eat_str("}") {
            return Err(self.error("expected `}`"));
        }
        if min > MAX_REPETITIONS {
            return Err(
                self.error(&format!("a repetition of at least {min} exceeds llama.cpp's limit of {MAX_REPETITIONS}"))
            );
        }
        let max = max.filter(|&m| m <= MAX_REPETITIONS);
        match max {
            Some(0) => Ok(String::new()),
            Some(max) if max < min => {
                Err(self.error(&format!("repetition {{{min},{max}}} has its maximum below its minimum")))
            }
            Some(max) if max == min => Ok(format!("{{{min}}}")),
            Some(max) => Ok(format!("{{{min},{max}}}")),
            None => Ok(format!("{{{min},}}")),
        }
    }

    fn parse_count(&mut self) -> Result<Option<i32>, String> {
        let start = self.skip_while(|c| c.is_ascii_digit());
        if start == self.pos {
            return Ok(None);
        }
        let digits: String = self.chars[start..self.pos].iter().collect();
        digits.parse().map(Some).map_err(|_| self.error_at(start, &format!("repetition count {digits} is too large")))
    }

    /// A `"..."` literal after its opening quote, as Lark: one string per character, in
    /// parentheses when there are several. llguidance's lexer takes the longest lexeme it
    /// can, so a literal `"ab"` kept whole would win over `"a"` followed by `"b"` and
    /// refuse outputs GBNF allows; single characters cannot overlap that way.
    fn parse_literal(&mut self) -> Result<String, String> {
        let mut chars = Vec::new();
        while !self.eat_close('"', "string literal")? {
            chars.push(self.parse_char()?);
        }
        let quoted: Vec<String> = chars.iter().map(|c| Value::String(c.to_string()).to_string()).collect();
        Ok(match quoted.len() {
            0 => "\"\"".into(),
            1 => quoted.concat(),
            _ => format!("({})", quoted.join(" ")),
        })
    }

    /// A `[...]` class after its opening bracket, as a one-character Lark regex.
    fn parse_class(&mut self) -> Result<String, String> {
        let negated = self.eat_str("^");
        let mut set = String::new();
        while !self.eat_close(']', "character class")? {
            let lo = self.parse_char()?;
            push_class_char(&mut set, lo);
            if self.peek() == Some('-') && self.peek_at(1).is_some_and(|c| c != ']') {
                self.pos += 1;
                let hi = self.parse_char()?;
                if hi < lo {
                    return Err(self.error(&format!("character range {lo:?}-{hi:?} is reversed")));
                }
                set.push('-');
                push_class_char(&mut set, hi);
            }
        }
        match (set.is_empty(), negated) {
            (true, true) => Ok(ANY_CHAR.into()),
            (true, false) => Err(self.error("empty character class `[]` matches nothing")),
            (false, neg) => Ok(format!("/[{}{set}]/", if neg { "^" } else { "" })),
        }
    }

    /// True (and past it) at `close`; false before any other character; an error naming the
    /// unterminated `what` at the end of the grammar.
    fn eat_close(&mut self, close: char, what: &str) -> Result<bool, String> {
        match self.peek() {
            None => Err(self.error(&format!("unterminated {what}"))),
            Some(c) if c == close => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) => Ok(false),
        }
    }

    /// One character of a literal or class, escapes decoded as llama.cpp does.
    fn parse_char(&mut self) -> Result<char, String> {
        let c = self.peek().ok_or_else(|| self.error("unexpected end of grammar"))?;
        self.pos += 1;
        if c != '\\' {
            return Ok(c);
        }
        let e = self.peek().ok_or_else(|| self.error("unexpected end of grammar after `\\`"))?;
        self.pos += 1;
        match e {
            'x' => self.parse_hex(2),
            'u' => self.parse_hex(4),
            'U' => self.parse_hex(8),
            't' => Ok('\t'),
            'r' => Ok('\r'),
            'n' => Ok('\n'),
            '\\' | '"' | '[' | ']' => Ok(e),
            other => Err(self.error_at(self.pos - 2, &format!("unknown escape `\\{other}`"))),
        }
    }

    fn parse_hex(&mut self, digits: usize) -> Result<char, String> {
        let start = self.pos;
        let end = (start + digits).min(self.chars.len());
        let hex: String = self.chars[start..end].iter().collect();
        let code = (hex.len() == digits && hex.chars().all(|c| c.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(&hex, 16).ok())
            .flatten()
            .ok_or_else(|| self.error_at(start, &format!("expected {digits} hex digits")))?;
        self.pos = end;
        char::from_u32(code).ok_or_else(|| self.error_at(start, &format!("U+{code:X} is not a character")))
    }

    fn parse_name(&mut self) -> Option<String> {
        let start = self.skip_while(is_word_char);
        (self.pos > start).then(|| self.chars[start..self.pos].iter().collect())
    }

    /// Spaces, tabs and `#` comments; newlines too when `newline_ok` (inside parentheses,
    /// after `::=` or `|`, between rules).
    fn skip_space(&mut self, newline_ok: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newline_ok => self.pos += 1,
                '#' => {
                    self.skip_while(|c| c != '\n' && c != '\r');
                }
                _ => break,
            }
        }
    }

    /// Moves past the characters that satisfy `keep`; returns where it started.
    fn skip_while(&mut self, keep: impl Fn(char) -> bool) -> usize {
        let start = self.pos;
        while self.peek().is_some_and(&keep) {
            self.pos += 1;
        }
        start
    }

    fn eat_str(&mut self, s: &str) -> bool {
        let n = s.chars().count();
        if self.pos + n <= self.chars.len() && self.chars[self.pos..self.pos + n].iter().copied().eq(s.chars()) {
            self.pos += n;
            true
        } else {
            false
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    fn error(&self, msg: &str) -> String {
        self.error_at(self.pos, msg)
    }

    fn error_at(&self, at: usize, msg: &str) -> String {
        let before = &self.chars[..at.min(self.chars.len())];
        let line = before.iter().filter(|&&c| c == '\n').count() + 1;
        let col = before.iter().rev().take_while(|&&c| c != '\n').count() + 1;
        format!("line {line}, column {col}: {msg}")
    }
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

/// The Lark name of a GBNF rule. Lark rule names are lowercase (uppercase ones are
/// terminals) and the start rule is `start`; GBNF names may hold capitals and start with a
/// digit or `-`. A name already fit for Lark is kept; any other gets `g_` and `_x` for each
/// capital X. GBNF names never contain `_`, so no two names map to the same one.
fn lark_name(name: &str) -> String {
    if name == "root" {
        return "start".into();
    }
    let fits = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if fits && name != "start" {
        return name.into();
    }
    let mut out = String::from("g_");
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A class member for a Rust regex class: letters and digits as they are, anything else as
/// `\x{..}`, which needs no further escaping inside `[...]` or the Lark `/.../`.
fn push_class_char(set: &mut String, c: char) {
    if c.is_ascii_alphanumeric() {
        set.push(c);
    } else {
        let _ = write!(set, "\\x{{{:X}}}", c as u32);
    }
}
