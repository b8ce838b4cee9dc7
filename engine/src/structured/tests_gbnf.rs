//! GBNF grammars: the translation's parse rules and errors, then the translated grammars
//! driven token by token, their outputs checked by validators independent of llguidance
//! (`serde_json`, `regex`).

use regex::Regex;

use super::gbnf::{gbnf_to_lark, looks_like_gbnf};
use super::test_util::{backend, compile, tokenizer};
use super::tests_walk::{walk, WALKS};
use super::{StructuredError, StructuredOutput};

/// A JSON grammar in the style of llama.cpp's `grammars/json.gbnf`: rules spread over lines
/// inside parentheses, comments, escapes in classes, `{4}` and `?`.
pub(super) const JSON_GBNF: &str = r#"# any JSON value, compact or spaced
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*   # more members
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# optional space, at most a few characters
ws ::= | " " | "\n" [ \t]{0,20}
"#;

const ARITHMETIC_GBNF: &str = r#"root ::= expr
expr ::= term (Add-Op term)*
term ::= factor (("*" | "/") factor)*
factor ::= Num1 | "(" expr ")"
Add-Op ::= [-+]
Num1 ::= [0-9]{1,3}
"#;

/// The same JSON, bounded so that random walks end: two levels of nesting, short strings
/// and numbers.
const SHALLOW_JSON_GBNF: &str = r#"root ::= value | scalar
value ::= "[" ws (scalar ("," ws scalar){0,3})? "]" | "{" ws (member ("," ws member){0,3})? "}"
member ::= string ":" ws scalar
scalar ::= string | number | "true" | "false" | "null"
string ::= "\"" ([^"\\\x7F\x00-\x1F] | "\\" ["\\/bfnrt]){0,6} "\""
number ::= "-"? ([0-9] | [1-9] [0-9]{1,4}) ("." [0-9]{1,3})?
ws ::= " "?
"#;

/// Tokenizes `text` and feeds it: true when every token is allowed and the grammar may end
/// right after it.
fn accepts(spec: &StructuredOutput, text: &str) -> bool {
    let tok = tokenizer().expect("tokenizer");
    let mut c = compile(spec);
    for id in tok.encode(text, false).expect("encode") {
        if !c.mask().expect("mask").allows(id) {
            return false;
        }
        c.commit(id).expect("commit an allowed token");
    }
    c.is_accepting()
}

fn gbnf(src: &str) -> StructuredOutput {
    StructuredOutput::Gbnf(src.into())
}

fn translate_error(src: &str) -> String {
    match gbnf_to_lark(src) {
        Err(StructuredError::InvalidGrammar(msg)) => msg,
        other => panic!("{src:?} should be refused, got {other:?}"),
    }
}

#[test]
fn rules_end_at_newlines_except_inside_parentheses_and_after_bars() {
    let lark = gbnf_to_lark("root ::=\n a | # two\n b\na ::= (\n \"x\"\n | \"y\" )\r\nb ::= \"z\"").unwrap();
    assert_eq!(lark, "start: a | b\na: (\"x\" | \"y\")\nb: \"z\"\n");
    // At the top level a new line is a new rule: neither `"b"` nor `| c` is one.
    for src in ["root ::= \"a\"\n  \"b\"\n", "root ::= a\n  | c\na ::= \"a\"\nc ::= \"c\""] {
        let msg = translate_error(src);
        assert!(msg.contains("line 2, column 3: expected a rule name"), "{msg}");
    }
}

#[test]
fn names_literals_classes_and_repetitions_translate() {
    let lark = gbnf_to_lark(
        "root ::= Item-1 start 9lives x{2} x{0} x{1,} x{,3} x{3,5000} x*? . [^] [^a-c\\]\"] \"\\x41\\u00e9\\n\\\"\"\nItem-1 ::= \"\"\nstart ::= \"s\"\n9lives ::= \"9\"\nx ::= \"x\" |",
    )
    .unwrap();
    let lines: Vec<&str> = lark.lines().collect();
    assert_eq!(
        lines[0],
        r#"start: g__item-1 g_start g_9lives x{2} "" x{1,} x{0,3} x{3,} (x*)? /(?s:.)/ /(?s:.)/ /[^a-c\x{5D}\x{22}]/ ("A" "é" "\n" "\"")"#
    );
    assert_eq!(&lines[1..], ["g__item-1: \"\"", "g_start: \"s\"", "g_9lives: \"9\"", "x: \"x\" | \"\""]);
}

#[test]
fn bad_grammars_are_refused_with_where_and_why() {
    for (src, want) in [
        ("start ::= \"a\"", "no `root` rule"),
        ("root ::= item", "`item` is used but never defined"),
        ("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule `root` is defined twice"),
        ("root = \"a\"", "line 1, column 6: expected `::=`"),
        ("root ::= \"abc", "unterminated string literal"),
        ("root ::= [a-", "unterminated character class"),
        ("root ::= [z-a]", "reversed"),
        ("root ::= []", "empty character class"),
        ("root ::= \"\\q\"", "line 1, column 11: unknown escape `\\q`"),
        ("root ::= \"\\x4\"", "expected 2 hex digits"),
        ("root ::= \"\\uD800\"", "U+D800 is not a character"),
        ("root ::= * \"a\"", "needs an element before it"),
        ("root ::= \"a\"{3,1}", "maximum below its minimum"),
        ("root ::= \"a\"{99999999999}", "too large"),
        ("root ::= \"a\"{2001,}", "exceeds llama.cpp's limit of 2000"),
        ("root ::= (\"a\"", "expected `)`"),
        ("root ::= \"a\" )", "unexpected `)`"),
        ("root ::= <think> \"a\"", "token references"),
    ] {
        let msg = translate_error(src);
        assert!(msg.starts_with("GBNF "), "{msg}");
        assert!(msg.contains(want), "{src:?}: {msg:?} should say {want:?}");
    }
}

#[test]
fn gbnf_is_told_apart_from_lark() {
    assert!(looks_like_gbnf(JSON_GBNF));
    assert!(looks_like_gbnf("root::=\"a\""));
    assert!(!looks_like_gbnf("start: \"a\" | b\nb: /[0-9]+/ // root ::= x"));
    assert!(!looks_like_gbnf("# root ::= x\nstart: \"a\""));
}

#[test]
fn json_grammar_walks_are_json() {
    if tokenizer().is_none() {
        return;
    }
    let mut kinds = std::collections::HashSet::new();
    for seed in 0..WALKS * 2 {
        let text = walk(&gbnf(SHALLOW_JSON_GBNF), seed);
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("seed {seed}: {text:?} is not JSON: {e}"));
        kinds.insert(std::mem::discriminant(&v));
    }
    assert!(kinds.len() >= 3, "walks should reach several kinds of value");
    let spec = gbnf(JSON_GBNF);
    for ok in [r#"{"a": [1, -2.5e3, "x\u00e9\n"], "b": null}"#, "[]", "true", "\"\\\"\"", "{\n  \"k\": {}}"] {
        assert!(accepts(&spec, ok), "{ok:?} is JSON the grammar allows");
    }
    for bad in [r#"{"a" 1}"#, "[1,]", "tru", "\"\x01\"", "01x"] {
        assert!(!accepts(&spec, bad), "{bad:?} is not JSON");
    }
}

#[test]
fn arithmetic_walks_parse_as_arithmetic() {
    if tokenizer().is_none() {
        return;
    }
    // Independent check: innermost parenthesized expressions collapse to a number until
    // none is left, then the text must be a flat expression.
    let flat = r"[0-9]{1,3}([-+*/][0-9]{1,3})*";
    let inner = Regex::new(&format!(r"\(({flat})\)")).unwrap();
    let whole = Regex::new(&format!("^{flat}$")).unwrap();
    let spec = gbnf(ARITHMETIC_GBNF);
    let mut saw_parens = false;
    for seed in 0..WALKS * 2 {
        let text = walk(&spec, seed);
        saw_parens |= text.contains('(');
        let mut t = text.clone();
        while inner.is_match(&t) {
            t = inner.replace_all(&t, "0").into_owned();
        }
        assert!(whole.is_match(&t), "seed {seed}: {text:?} is not arithmetic");
    }
    assert!(saw_parens, "walks should nest");
    assert!(accepts(&spec, "(1+22)*333/(4-(5))"));
    for bad in ["1+", "(1", "1234", "1)", "+1"] {
        assert!(!accepts(&spec, bad), "{bad:?}");
    }
}

#[test]
fn literals_that_prefix_each_other_keep_their_grammar() {
    if tokenizer().is_none() {
        return;
    }
    // Character-level semantics: "ab" is "a" then "b" as well as the literal "ab".
    let spec = gbnf("root ::= (\"a\" | \"ab\") \"b\" [0-9]{2,3} | [a-c] \"xy\" | \"a\" \"yx\"");
    for ok in ["ab12", "abb12", "ab123", "axy", "ayx", "cxy"] {
        assert!(accepts(&spec, ok), "{ok:?}");
    }
    for bad in ["abbb12", "ab1", "ab1234", "a12", "cyx", "ax"] {
        assert!(!accepts(&spec, bad), "{bad:?}");
    }
    // `.` takes any character, newlines included.
    let any = gbnf("root ::= \"<\" .{1,3} \">\"");
    for ok in ["<\n>", "<é🦀x>"] {
        assert!(accepts(&any, ok), "{ok:?}");
    }
    assert!(!accepts(&any, "<>"));
}

#[test]
fn compile_errors_are_client_errors() {
    let Some(b) = backend() else { return };
    for src in ["root ::= missing", "root ::= \"a\" | (", "not gbnf at all"] {
        let err = b.compile(&gbnf(src)).unwrap_err();
        assert!(matches!(err, StructuredError::InvalidGrammar(_)) && err.is_client_error(), "{src:?}: {err}");
    }
}
