use entrobatch_model_runner::Tokenizer;

/// Turns a growing list of token ids into text deltas whose concatenation is the full decode
/// of the ids, without ever splitting a UTF-8 character: byte-level BPE tokens can end
/// mid-character, so a delta is released only once the decoded text stops ending in U+FFFD
/// (the vLLM / TGI prefix-offset scheme). Each step decodes a window that begins with tokens
/// whose text was already released and releases only what the new tokens add, so what a
/// decoder does at the start of a decode (a SentencePiece decoder drops the space its
/// tokenizer prefixed) reaches the output once, for the first token, as in the full decode.
#[derive(Debug, Default)]
pub struct Detokenizer {
    token_ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    /// The last token decode keeps is a SentencePiece byte-fallback token.
    in_byte_run: bool,
}

impl Detokenizer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one token and returns the text it completes (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, token_id: u32) -> String {
        self.token_ids.push(token_id);
        // A SentencePiece decoder turns a run of byte tokens into UTF-8 as a whole, or into
        // one U+FFFD per byte when the whole run is not valid, so a run's text is known only
        // once a token ends it; text released earlier could disagree with the full decode.
        // Special tokens are dropped before decoding and so do not end a run.
        if !tokenizer.is_special(token_id) {
            self.in_byte_run = tokenizer.is_byte_fallback(token_id);
        }
        if self.in_byte_run {
            return String::new();
        }
        let decode = |ids: &[u32]| tokenizer.decode(ids, true).unwrap_or_default();
        let prefix_text = decode(&self.token_ids[self.prefix_offset..self.read_offset]);
        let new_text = decode(&self.token_ids[self.prefix_offset..]);
        if new_text.len() <= prefix_text.len() || new_text.ends_with('\u{FFFD}') {
            return String::new();
        }
        match new_text.get(prefix_text.len()..) {
            Some(delta) if new_text.starts_with(&prefix_text) => {
                let delta = delta.to_string();
                self.prefix_offset = self.read_offset;
                self.read_offset = self.token_ids.len();
                delta
            }
            // The longer decode rewrote earlier text (a cleanup rule merged across tokens):
            // hold the text back until a later token settles it.
            _ => String::new(),
        }
    }

    /// Text still held back at the end of the stream (an unfinished character decodes to
    /// U+FFFD rather than being dropped).
    pub fn flush(&mut self, tokenizer: &Tokenizer) -> String {
        let decode = |ids: &[u32]| tokenizer.decode(ids, true).unwrap_or_default();
        let prefix_text = decode(&self.token_ids[self.prefix_offset..self.read_offset]);
        let new_text = decode(&self.token_ids[self.prefix_offset..]);
        self.prefix_offset = self.token_ids.len();
        self.read_offset = self.token_ids.len();
        self.in_byte_run = false;
        new_text.get(prefix_text.len()..).unwrap_or_default().to_string()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;

    use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};
    use entrobatch_model_runner::testing::spm_tokenizer_metadata;
    use entrobatch_model_runner::Tokenizer;
    use rand_xoshiro::rand_core::{RngCore, SeedableRng};
    use rand_xoshiro::SplitMix64;

    use super::Detokenizer;

    /// The model runner's tiny SentencePiece vocabulary: `<unk>`, `<s>`, `</s>`, the 256 byte
    /// tokens (ids 3..259), scored pieces, a control and a user-defined token.
    pub(crate) fn tiny_spm(add_space_prefix: bool) -> Tokenizer {
        let metadata: HashMap<String, Value> = spm_tokenizer_metadata(add_space_prefix).into_iter().collect();
        let content =
            Content { magic: VersionedMagic::GgufV3, metadata, tensor_infos: HashMap::new(), tensor_data_offset: 0 };
        Tokenizer::from_gguf(&content).expect("tiny SentencePiece tokenizer")
    }

    /// The Gemma 3 270M tokenizer with `add_space_prefix` as given (the file says false), or
    /// `None` (with a note) when the model file is absent.
    pub(crate) fn gemma3(add_space_prefix: bool) -> Option<Tokenizer> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/gemma-3-270m-q4_k_m.gguf");
        if !path.exists() {
            eprintln!("SKIP: model file {} not found", path.display());
            return None;
        }
        let mut f = std::fs::File::open(&path).expect("open GGUF");
        let mut content = Content::read(&mut f).expect("read GGUF header");
        content.metadata.insert("tokenizer.ggml.add_space_prefix".into(), Value::Bool(add_space_prefix));
        Some(Tokenizer::from_gguf(&content).expect("Gemma 3 tokenizer"))
    }

    fn stream(tok: &Tokenizer, ids: &[u32]) -> String {
        let mut d = Detokenizer::new();
        let mut text: String = ids.iter().map(|&id| d.push(tok, id)).collect();
        text.push_str(&d.flush(tok));
        text
    }

    /// Random id sequences, a third of the ids byte tokens (so runs of them are often invalid
    /// UTF-8), the rest anything in the vocabulary: specials, pieces, added tokens.
    fn assert_streams_like_decode(tok: &Tokenizer, byte_ids: std::ops::Range<u32>, seed: u64) {
        let mut rng = SplitMix64::seed_from_u64(seed);
        let mut below = |n: u32| (rng.next_u64() % n as u64) as u32;
        for _ in 0..300 {
            let len = 1 + below(40);
            let ids: Vec<u32> = (0..len)
                .map(|_| match below(3) {
                    0 => byte_ids.start + below(byte_ids.end - byte_ids.start),
                    _ => below(tok.vocab_size as u32),
                })
                .collect();
            assert_eq!(stream(tok, &ids), tok.decode(&ids, true).unwrap(), "ids {ids:?}");
        }
    }

    #[test]
    fn sentencepiece_streams_exactly_the_full_decode() {
        for (seed, prefix) in [(1, true), (2, false)] {
            assert_streams_like_decode(&tiny_spm(prefix), 3..259, seed);
        }
    }

    #[test]
    fn leading_space_only_the_first_token_loses_it() {
        let tok = tiny_spm(true);
        let ids = |pieces: &[&str]| -> Vec<u32> { pieces.iter().map(|p| tok.token_id(p).unwrap()).collect() };
        // A token that is only a space, or starts one, at every window boundary.
        for pieces in [
            &["▁Hello", "▁", "▁world", "▁▁", "▁"][..],
            &["▁", "▁", "▁He", "ll", "o"],
            &["<start_of_turn>", "▁Hello", "<tool_call>", "▁world"],
            &["<0xC3>", "▁", "<0xA9>", "▁w", "<0xE6>", "<0x97>", "<0xA5>", "▁"],
        ] {
            let ids = ids(pieces);
            let mut d = Detokenizer::new();
            let mut text = String::new();
            for &id in &ids {
                text.push_str(&d.push(&tok, id));
            }
            text.push_str(&d.flush(&tok));
            assert_eq!(text, tok.decode(&ids, true).unwrap(), "{pieces:?}");
        }
        let hello_world = ids(&["▁Hello", "▁world"]);
        assert_eq!(stream(&tok, &hello_world), "Hello world");
        // A valid byte run is held until a token ends it, then released whole.
        let mut d = Detokenizer::new();
        let bytes = ids(&["<0xE6>", "<0x97>", "<0xA5>"]);
        assert!(bytes.iter().all(|&id| d.push(&tok, id).is_empty()));
        assert_eq!(d.push(&tok, tok.token_id("▁w").unwrap()), "\u{65e5} w");
    }

    #[test]
    fn gemma3_streams_text_and_random_ids_like_the_full_decode() {
        for prefix in [false, true] {
            let Some(tok) = gemma3(prefix) else { return };
            for text in [
                "Hello, world! 日本語のテキスト 🦀🚀 👨‍👩‍👧‍👦",
                "fn main() {\n    println!(\"hi\");\n}\n\n\n  spaces   and\ttabs",
                "Привет, мир! नमस्ते दुनिया مرحبا 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
                " leading space<start_of_turn>user\n<b>bold</b><end_of_turn>",
            ] {
                let ids = tok.encode(text, false).unwrap();
                assert_eq!(stream(&tok, &ids), tok.decode(&ids, true).unwrap(), "{text:?}");
            }
            // Gemma's byte tokens are ids 238..494.
            assert!(tok.is_byte_fallback(238) && tok.is_byte_fallback(493) && !tok.is_byte_fallback(494));
            assert_streams_like_decode(&tok, 238..494, 3);
        }
    }
}
