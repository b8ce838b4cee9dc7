//! A request's branch in flight: the continuations it tries (each a scheduler sequence; the
//! first is the request's own), what each has decoded and held back from the client, and the
//! choice of the one to keep. The engine loop's `branches` module drives it; nothing here
//! touches the scheduler or the model.

mod path;

pub(crate) use path::{BranchPath, PathEnd};

use entrobatch_sampler::BranchScorer;

use crate::event::BranchReport;
use crate::strategy::BranchConfig;

/// Where a continuation stops decoding.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PathLimits {
    pub lookahead: usize,
    pub stop_at_newline: bool,
}

pub(crate) struct ActiveBranch {
    /// Candidate order: the request's own sequence first, with the plain draw.
    pub paths: Vec<BranchPath>,
    pub limits: PathLimits,
    pub scorer: BranchScorer,
    pub entropy: f32,
    pub varentropy: f32,
}

impl ActiveBranch {
    pub(crate) fn new(config: &BranchConfig, entropy: f32, varentropy: f32) -> Self {
        Self {
            paths: Vec::new(),
            limits: PathLimits { lookahead: config.lookahead, stop_at_newline: config.stop_at_newline },
            scorer: config.scorer,
            entropy,
            varentropy,
        }
    }

    /// Every continuation still in the race has ended.
    pub(crate) fn is_settled(&self) -> bool {
        self.paths.iter().all(|p| p.end.is_some())
    }

    /// The continuation to keep: the best score among those not dropped, ties to the lowest
    /// candidate (the plain draw first); `None` if every one was dropped.
    pub(crate) fn winner(&self) -> Option<usize> {
        let mut best: Option<(usize, f32)> = None;
        for (i, path) in self.paths.iter().enumerate().filter(|(_, p)| p.end != Some(PathEnd::Dropped)) {
            let score = self.scorer.score(&path.scores);
            if best.is_none_or(|(_, b)| score > b) {
                best = Some((i, score));
            }
        }
        best.map(|(i, _)| i)
    }

    pub(crate) fn report(&self, kept: usize) -> BranchReport {
        BranchReport {
            tried: self.paths.len(),
            kept: self.paths.get(kept).map_or(0, |p| p.candidate),
            scorer: self.scorer,
            scores: self.paths.iter().map(|p| self.scorer.score(&p.scores)).collect(),
            lengths: self.paths.iter().map(|p| p.tokens.len()).collect(),
            entropy: self.entropy,
            varentropy: self.varentropy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::GeneratedToken;
    use entrobatch_sampler::TokenScore;

    fn path(candidate: usize, logprobs: &[f32], end: Option<PathEnd>) -> BranchPath {
        let mut p = BranchPath::new(candidate as u64, candidate, None);
        for &logprob in logprobs {
            p.push(GeneratedToken { token_id: 1, logprob: None, metrics: None }, TokenScore { logprob, margin: 0.0 });
        }
        p.end = end;
        p
    }

    #[test]
    fn the_best_scored_continuation_wins_and_ties_keep_the_plain_draw() {
        let mut b = ActiveBranch::new(&BranchConfig::default(), 2.0, 1.0);
        b.paths = vec![
            path(0, &[-1.0, -1.0], Some(PathEnd::Lookahead)),
            path(1, &[-2.0, -0.1], Some(PathEnd::Lookahead)),
            path(2, &[-0.5, -0.5], None),
        ];
        assert!(!b.is_settled());
        b.paths[2].end = Some(PathEnd::Stop);
        assert!(b.is_settled());
        assert_eq!(b.winner(), Some(2));
        b.paths[2].end = Some(PathEnd::Dropped);
        assert_eq!(b.winner(), Some(0), "a dropped path never wins; a tie keeps the first");
        let report = b.report(0);
        assert_eq!((report.tried, report.kept, report.lengths), (3, 0, vec![2, 2, 2]));
    }
}
