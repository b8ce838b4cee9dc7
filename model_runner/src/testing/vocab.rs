//! Tokenizer metadata for the tiny test models: a real byte-level BPE vocabulary in miniature
//! (all 256 byte symbols, a few dozen merges, ChatML control tokens), laid out like the real
//! model it stands in for, so tokenizer code paths are exercised end to end.

use candle_core::quantized::gguf_file::Value;

use super::TinyArch;
use crate::tokenizer::chat_template::CHATML_TEMPLATE;
use crate::tokenizer::token_type;

/// Total token count (and embedding rows): the built vocabulary is padded up to this.
pub const TINY_VOCAB_SIZE: usize = 320;

/// Merges in byte-level form ("Ġ" is a space). Each side must already be a token when the
/// merge is reached; `tiny_vocab` checks this.
const MERGES: &[(&str, &str)] = &[
    ("Ġ", "t"),
    ("Ġ", "a"),
    ("h", "e"),
    ("i", "n"),
    ("r", "e"),
    ("o", "n"),
    ("Ġt", "he"),
    ("e", "r"),
    ("Ġ", "s"),
    ("a", "t"),
    ("Ġ", "w"),
    ("Ġ", "o"),
    ("e", "n"),
    ("Ġ", "c"),
    ("i", "t"),
    ("i", "s"),
    ("a", "n"),
    ("o", "r"),
    ("e", "s"),
    ("Ġ", "b"),
    ("e", "d"),
    ("Ġ", "f"),
    ("in", "g"),
    ("Ġ", "p"),
    ("o", "u"),
    ("Ġa", "n"),
    ("a", "l"),
    ("a", "r"),
    ("Ġt", "o"),
    ("Ġ", "m"),
    ("Ġo", "f"),
    ("Ġ", "in"),
    ("Ġ", "d"),
    ("Ġ", "h"),
    ("Ġan", "d"),
    ("l", "l"),
    ("Ġ", "l"),
    ("l", "e"),
    ("H", "e"),
    ("He", "ll"),
    ("Hell", "o"),
    ("Ġw", "or"),
    ("l", "d"),
    ("Ġwor", "ld"),
    ("Ġ", "Ġ"),
    ("ĠĠ", "ĠĠ"),
    ("Ċ", "Ċ"),
];

const SPECIALS: &[&str] = &["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// GPT-2's byte-to-unicode table: printable Latin-1 bytes map to themselves, the rest to
/// U+0100 upwards, so every byte is a visible, non-space character.
pub fn gpt2_byte_to_unicode() -> [char; 256] {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let cp = if printable(b) {
            b
        } else {
            next += 1;
            next - 1
        };
        // Every code point here is < 0x200, hence a valid char.
        table[b as usize] = char::from_u32(cp).unwrap_or('?');
    }
    table
}

struct Vocab {
    tokens: Vec<String>,
    types: Vec<i32>,
}

impl Vocab {
    fn push(&mut self, tok: String, ty: i32) {
        self.tokens.push(tok);
        self.types.push(ty);
    }
    fn id(&self, tok: &str) -> Option<u32> {
        self.tokens.iter().position(|t| t == tok).map(|i| i as u32)
    }
}

/// Tokenizer metadata entries for `arch`. Llama models get SmolLM2's layout (control tokens at
/// ids 0..3, BOS = `<|im_start|>`); Qwen2 gets Qwen's (control tokens after the merges, BOS =
/// `<|endoftext|>`, `[PAD n]` filler at the end as llama.cpp's converter writes it).
pub fn tokenizer_metadata(arch: TinyArch) -> candle_core::Result<Vec<(String, Value)>> {
    let mut v = Vocab { tokens: Vec::new(), types: Vec::new() };
    let add_specials = |v: &mut Vocab| SPECIALS.iter().for_each(|s| v.push(s.to_string(), token_type::CONTROL));
    if !arch.qwen_vocab() {
        add_specials(&mut v);
    }
    for c in gpt2_byte_to_unicode() {
        v.push(c.to_string(), token_type::NORMAL);
    }
    for (a, b) in MERGES {
        if v.id(a).is_none() || v.id(b).is_none() {
            candle_core::bail!("tiny vocab: merge {a:?} {b:?} uses an unknown token");
        }
        let merged = format!("{a}{b}");
        if v.id(&merged).is_none() {
            v.push(merged, token_type::NORMAL);
        }
    }
    if arch.qwen_vocab() {
        add_specials(&mut v);
    }
    if v.tokens.len() > TINY_VOCAB_SIZE {
        candle_core::bail!("tiny vocab has {} tokens, more than {TINY_VOCAB_SIZE}", v.tokens.len());
    }
    while v.tokens.len() < TINY_VOCAB_SIZE {
        let i = v.tokens.len();
        v.push(format!("[PAD{i}]"), token_type::UNUSED);
    }
    let id = |t: &str| v.id(t).ok_or_else(|| candle_core::Error::Msg(format!("tiny vocab lacks {t}")));
    let (endoftext, im_start, im_end) = (id("<|endoftext|>")?, id("<|im_start|>")?, id("<|im_end|>")?);
    let (bos, pre) = if arch.qwen_vocab() { (endoftext, "qwen2") } else { (im_start, "smollm") };

    let strings = |xs: Vec<String>| Value::Array(xs.into_iter().map(Value::String).collect());
    let merges = MERGES.iter().map(|(a, b)| format!("{a} {b}")).collect();
    let types = Value::Array(v.types.iter().map(|&t| Value::I32(t)).collect());
    Ok(vec![
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String(pre.into())),
        ("tokenizer.ggml.tokens".into(), strings(v.tokens)),
        ("tokenizer.ggml.token_type".into(), types),
        ("tokenizer.ggml.merges".into(), strings(merges)),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(bos)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(im_end)),
        ("tokenizer.ggml.padding_token_id".into(), Value::U32(endoftext)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
        ("tokenizer.chat_template".into(), Value::String(CHATML_TEMPLATE.into())),
    ])
}
