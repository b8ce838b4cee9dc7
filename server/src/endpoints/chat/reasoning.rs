//! Splits a thinking model's output into `reasoning_content` (inside `<think>...</think>`)
//! and `content`, the way vLLM's reasoning parsers do, incrementally: a tag split across
//! stream deltas is held back until it is complete, so streaming and non-streaming agree.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace seen yet: the output may still open with `<think>`.
    Start,
    Reasoning,
    Content,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}

pub struct ReasoningSplitter {
    state: State,
    held: String,
}

impl ReasoningSplitter {
    /// `in_reasoning`: the prompt already opened the think block (templates that end the
    /// generation prompt with `<think>\n`).
    pub fn new(in_reasoning: bool) -> Self {
        let state = if in_reasoning { State::Reasoning } else { State::Start };
        Self { state, held: String::new() }
    }

    pub fn push(&mut self, delta: &str) -> Split {
        self.held.push_str(delta);
        let mut out = Split::default();
        loop {
            match self.state {
                State::Start => {
                    let trimmed = self.held.trim_start();
                    if let Some(rest) = trimmed.strip_prefix(OPEN) {
                        self.held = rest.to_string();
                        self.state = State::Reasoning;
                    } else if OPEN.starts_with(trimmed) {
                        return out;
                    } else {
                        self.state = State::Content;
                    }
                }
                State::Reasoning => {
                    if let Some(i) = self.held.find(CLOSE) {
                        out.reasoning.push_str(&self.held[..i]);
                        self.held.drain(..i + CLOSE.len());
                        self.state = State::Content;
                    } else {
                        let keep = partial_tag_suffix(&self.held, CLOSE);
                        let emit = self.held.len() - keep;
                        out.reasoning.push_str(&self.held[..emit]);
                        self.held.drain(..emit);
                        return out;
                    }
                }
                State::Content => {
                    out.content.push_str(&self.held);
                    self.held.clear();
                    return out;
                }
            }
        }
    }

    /// The output ended: whatever was held back belongs to the current part.
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Reasoning => Split { reasoning: held, content: String::new() },
            State::Start | State::Content => Split { reasoning: String::new(), content: held },
        }
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `tag`.
fn partial_tag_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&k| text.is_char_boundary(text.len() - k) && tag.starts_with(&text[text.len() - k..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(text: &str, in_reasoning: bool) -> Split {
        let mut s = ReasoningSplitter::new(in_reasoning);
        let mut a = s.push(text);
        let b = s.finish();
        a.reasoning.push_str(&b.reasoning);
        a.content.push_str(&b.content);
        a
    }

    /// Feeding the text one character at a time gives the same split as all at once.
    fn by_chars(text: &str, in_reasoning: bool) -> Split {
        let mut s = ReasoningSplitter::new(in_reasoning);
        let mut out = Split::default();
        for c in text.chars() {
            let p = s.push(&c.to_string());
            out.reasoning.push_str(&p.reasoning);
            out.content.push_str(&p.content);
        }
        let p = s.finish();
        out.reasoning.push_str(&p.reasoning);
        out.content.push_str(&p.content);
        out
    }

    #[test]
    fn splits_think_block() {
        let text = "<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.";
        let expected = Split { reasoning: "\nLet me see: 2+2.\n".into(), content: "\n\nIt is 4.".into() };
        assert_eq!(whole(text, false), expected);
        assert_eq!(by_chars(text, false), expected);
    }

    #[test]
    fn no_think_block_is_all_content() {
        let text = "  Paris is the capital. <think> is not a tag here";
        let expected = Split { reasoning: String::new(), content: text.into() };
        assert_eq!(whole(text, false), expected);
        assert_eq!(by_chars(text, false), expected);
    }

    #[test]
    fn prompt_opened_block_and_unfinished_reasoning() {
        let text = "hmm é</thi";
        let expected = Split { reasoning: text.into(), content: String::new() };
        assert_eq!(whole(text, true), expected);
        assert_eq!(by_chars(text, true), expected);
        let text = "x</think>y";
        let expected = Split { reasoning: "x".into(), content: "y".into() };
        assert_eq!(by_chars(text, true), expected);
    }

    #[test]
    fn partial_open_tag_at_end_is_content() {
        assert_eq!(whole("<thi", false), Split { reasoning: String::new(), content: "<thi".into() });
    }
}
