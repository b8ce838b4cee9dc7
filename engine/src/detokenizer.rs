use entrobatch_model_runner::Tokenizer;

/// Turns a growing list of token ids into text deltas without ever splitting a UTF-8
/// character: byte-level BPE tokens can end mid-character, so a delta is released only once
/// the decoded text stops ending in U+FFFD (the vLLM / TGI prefix-offset scheme).
#[derive(Debug, Default)]
pub struct Detokenizer {
    token_ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
}

impl Detokenizer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one token and returns the text it completes (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, token_id: u32) -> String {
        self.token_ids.push(token_id);
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
        new_text.get(prefix_text.len()..).unwrap_or_default().to_string()
    }
}
