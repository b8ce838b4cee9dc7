//! One continuation of a branch: a scheduler sequence and what it decoded since the branch
//! point, held back from the client until the branch settles.

use entrobatch_scheduler::SeqId;

use crate::event::GeneratedToken;
use crate::structured::Constraint;
use entrobatch_sampler::TokenScore;

/// Why a continuation stopped decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PathEnd {
    /// It decoded the lookahead's tokens.
    Lookahead,
    /// Its last token ends a line (with `stop_at_newline`).
    LineEnd,
    /// Its last token ends the output (EOS, a stop id, the grammar's end, `max_tokens`).
    Stop,
    /// Preempted or failed: out of the race.
    Dropped,
}

pub(crate) struct BranchPath {
    pub seq_id: SeqId,
    /// Its first token's rank among the branch point's candidates (0: the plain draw).
    pub candidate: usize,
    /// The grammar state after this path's tokens, for a structured output.
    pub constraint: Option<Constraint>,
    pub tokens: Vec<GeneratedToken>,
    pub scores: Vec<TokenScore>,
    /// Tokens of `tokens` appended to the scheduler's sequence: all while it decodes; an ended
    /// path holds its last one back, so it is computed only if the path is kept.
    pub num_appended: usize,
    pub end: Option<PathEnd>,
}

impl BranchPath {
    pub(crate) fn new(seq_id: SeqId, candidate: usize, constraint: Option<Constraint>) -> Self {
        Self { seq_id, candidate, constraint, tokens: Vec::new(), scores: Vec::new(), num_appended: 0, end: None }
    }

    pub(crate) fn push(&mut self, token: GeneratedToken, score: TokenScore) {
        self.tokens.push(token);
        self.scores.push(score);
    }

    pub(crate) fn is_decoding(&self) -> bool {
        self.end.is_none()
    }
}
