//! The loop's side of entropy branching (`strategy::branch`): starting a branch at a fork
//! point, decoding each continuation from its row of every forward, and settling the branch
//! once they all ended: the kept continuation's sequence becomes the request's (the scheduler's
//! `adopt`), its held-back tokens are streamed, and the others' blocks go back to the pool.

use std::collections::HashMap;

use entrobatch_model_runner::{ForwardOutput, Tokenizer};
use entrobatch_sampler::{sample_row, SampleInput, TokenScore};
use entrobatch_scheduler::{Scheduler, SeqId};
use rayon::prelude::*;

use super::EngineLoop;
use crate::batch_builder::SpanResult;
use crate::branching::{ActiveBranch, BranchPath, PathEnd, PathLimits};
use crate::event::{FinishReason, GeneratedToken, RequestId, TokenLogprob};
use crate::logits_check::check_logits_finite;
use crate::request::GenerationParams;
use crate::request_state::RequestState;
use crate::strategy::{logit_metrics, BranchOutcome, Decoding, ForkPoint, StrategyOutput};
use crate::structured::Constraint;

/// Branch continuations' sequence ids start here, far above any request id.
pub(super) const FIRST_BRANCH_SEQ_ID: SeqId = 1 << 62;

impl EngineLoop {
    /// Starts a branch for request `id` at `fork`: its own sequence takes the plain draw and a
    /// child forked from it takes each other candidate, as many as the scheduler has spare
    /// slots for (`Scheduler::spare_seq_slots`: none while a request waits). False, with nothing
    /// changed, when there is no room: the caller commits the draw.
    pub(super) fn start_branch(&mut self, id: RequestId, fork: ForkPoint, constraints: Vec<Constraint>) -> bool {
        let Some(state) = self.requests.get_mut(&id) else { return false };
        let (Decoding::Branch(config), Some(seq)) = (&state.params.decoding, self.scheduler.get(id)) else {
            return false;
        };
        let config = config.clone();
        // A continuation needs room for its candidate and one more token to be worth trying.
        let room = seq.max_tokens().saturating_sub(seq.num_output_tokens());
        let wanted = if room < 2 { 0 } else { fork.candidates.len() - 1 };
        let mut children = Vec::new();
        for _ in 0..self.scheduler.spare_seq_slots().min(wanted) {
            let child = self.next_branch_seq_id;
            let copies = match self.scheduler.fork(id, child) {
                Ok(copies) => copies,
                Err(e) => {
                    tracing::debug!(request = id, error = %e, "branch narrowed");
                    break;
                }
            };
            self.next_branch_seq_id += 1;
            let pages: Vec<(usize, usize)> = copies.iter().map(|c| (c.src as usize, c.dst as usize)).collect();
            if let Err(e) = self.runner.copy_blocks(&pages) {
                tracing::error!(request = id, error = %e, "copying a forked block failed");
                self.scheduler.abort(child);
                break;
            }
            children.push(child);
        }
        if children.is_empty() {
            state.strategy.on_branch(BranchOutcome::NoRoom);
            return false;
        }
        state.strategy.on_branch(BranchOutcome::Started { children: children.len() });
        let mut branch = ActiveBranch::new(&config, fork.entropy, fork.varentropy);
        let mut constraints = constraints.into_iter();
        let seq_ids = std::iter::once(id).chain(children.iter().copied());
        for (candidate, (seq_id, (token, score))) in seq_ids.zip(fork.candidates).enumerate() {
            let mut path = BranchPath::new(seq_id, candidate, constraints.next());
            advance(&mut path, token, score, branch.limits, state, &mut self.scheduler, &self.tokenizer);
            branch.paths.push(path);
        }
        for child in children {
            self.branch_owners.insert(child, id);
        }
        state.branch = Some(branch);
        // Every candidate may end the branch at once (a one-token lookahead, line ends): then
        // no continuation has a row to compute, and only settling now keeps the request going.
        self.settle_if_done(id);
        true
    }

    /// Settles request `id`'s branch if every continuation has ended.
    pub(super) fn settle_if_done(&mut self, id: RequestId) {
        if self.requests.get(&id).and_then(|s| s.branch.as_ref()).is_some_and(ActiveBranch::is_settled) {
            self.settle_branch(id);
        }
    }

    /// Draws the next token of every decoding continuation that has a row in this forward (in
    /// parallel across requests, as the strategies' draws are), then advances them in turn and
    /// settles the branches whose continuations have all ended.
    pub(super) fn run_branches(&mut self, output: &ForwardOutput, spans: &[SpanResult]) {
        // Most steps have no branch: build nothing for them.
        if self.requests.values().all(|s| s.branch.is_none()) {
            return;
        }
        let rows: HashMap<SeqId, usize> =
            spans.iter().filter_map(|s| s.logits_indices.last().map(|&row| (s.seq_id, row))).collect();
        let scheduler = &self.scheduler;
        let mut branching: Vec<(RequestId, &mut RequestState)> =
            self.requests.iter_mut().filter(|(_, s)| s.branch.is_some()).map(|(&id, s)| (id, s)).collect();
        let drawn: Vec<(RequestId, Vec<Drawn>)> = branching
            .par_iter_mut()
            .map(|(id, state)| {
                let RequestState { branch, params, seed, .. } = &mut **state;
                let mut drawn = Vec::new();
                for (i, path) in branch.iter_mut().flat_map(|b| b.paths.iter_mut()).enumerate() {
                    let Some(&row) = rows.get(&path.seq_id).filter(|_| path.is_decoding()) else { continue };
                    drawn.push((i, draw(path, output.row(row), params, *seed, scheduler)));
                }
                (*id, drawn)
            })
            .collect();
        for (id, drawn) in drawn {
            let Some(state) = self.requests.get_mut(&id) else { continue };
            let Some(mut branch) = state.branch.take() else { continue };
            let mut dropped = Vec::new();
            for (i, result) in drawn {
                match result {
                    Ok((token, score)) => {
                        let (path, limits) = (&mut branch.paths[i], branch.limits);
                        advance(path, token, score, limits, state, &mut self.scheduler, &self.tokenizer);
                    }
                    Err(e) => {
                        let seq_id = branch.paths[i].seq_id;
                        tracing::warn!(request = id, seq = seq_id, error = %e, "branch continuation dropped");
                        branch.paths[i].end = Some(PathEnd::Dropped);
                        dropped.push(seq_id);
                    }
                }
            }
            state.branch = Some(branch);
            for seq_id in dropped.into_iter().filter(|&s| s != id) {
                self.drop_continuation(seq_id);
            }
            self.settle_if_done(id);
        }
    }

    /// A continuation other than the request's own sequence leaves the race (preempted, or its
    /// row failed): its blocks go back now.
    pub(super) fn drop_continuation(&mut self, seq_id: SeqId) {
        let Some(owner) = self.branch_owners.remove(&seq_id) else { return };
        self.scheduler.abort(seq_id);
        if let Some(path) = self
            .requests
            .get_mut(&owner)
            .and_then(|s| s.branch.as_mut())
            .and_then(|b| b.paths.iter_mut().find(|p| p.seq_id == seq_id))
        {
            path.end = Some(PathEnd::Dropped);
        }
        self.settle_if_done(owner);
    }

    /// Ends request `id`'s branch with nothing kept: its continuations' sequences go.
    pub(super) fn abandon_branch(&mut self, id: RequestId) {
        let Some(branch) = self.requests.get_mut(&id).and_then(|s| s.branch.take()) else { return };
        for path in branch.paths.iter().filter(|p| p.seq_id != id) {
            self.branch_owners.remove(&path.seq_id);
            self.scheduler.abort(path.seq_id);
        }
    }

    /// Keeps the winning continuation: the request's sequence adopts it, the others go, and
    /// its tokens are streamed (the first carrying the branch's report when metrics are on).
    fn settle_branch(&mut self, id: RequestId) {
        let Some(mut branch) = self.requests.get_mut(&id).and_then(|s| s.branch.take()) else { return };
        let Some(winner) = branch.winner() else {
            let message = "every continuation of a branch failed".to_string();
            self.finish_request(id, FinishReason::Error, Some(message));
            return;
        };
        let report = branch.report(winner);
        let kept = branch.paths.swap_remove(winner);
        let extra_tokens = branch.paths.iter().map(|p| p.tokens.len()).sum();
        for path in branch.paths.iter().filter(|p| p.seq_id != id) {
            self.branch_owners.remove(&path.seq_id);
            self.scheduler.abort(path.seq_id);
        }
        self.branch_owners.remove(&kept.seq_id);
        if let Err(e) = self.scheduler.adopt(id, kept.seq_id) {
            self.finish_request(id, FinishReason::Error, Some(format!("keeping a branch failed: {e}")));
            return;
        }
        let Some(state) = self.requests.get_mut(&id) else { return };
        state.strategy.on_branch(BranchOutcome::Settled { kept: kept.candidate, extra_tokens });
        if state.constraint.is_some() {
            state.constraint = kept.constraint;
        }
        let mut tokens = kept.tokens;
        if state.params.return_metrics {
            if let Some(first) = tokens.first_mut() {
                first.metrics.get_or_insert_with(Default::default).fork = Some(report);
            }
        }
        let out = StrategyOutput { tokens, next_scratch_rows: 0, fork: None };
        self.commit_tokens(id, out, kept.num_appended);
    }
}

/// A continuation's index in its branch and its draw (or why it failed).
type Drawn = (usize, Result<(GeneratedToken, TokenScore), String>);

/// The continuation's next token under its own grammar, with what the scorer reads of it.
fn draw(
    path: &mut BranchPath,
    logits: &[f32],
    params: &GenerationParams,
    seed: u64,
    scheduler: &Scheduler,
) -> Result<(GeneratedToken, TokenScore), String> {
    check_logits_finite(&[logits])?;
    let seq = scheduler.get(path.seq_id).ok_or("its sequence is gone")?;
    let mask = match path.constraint.as_mut() {
        Some(c) => Some(c.mask().map_err(|e| e.to_string())?),
        None => None,
    };
    let out = sample_row(&SampleInput {
        logits,
        params: &params.sampling,
        prompt_token_ids: &seq.token_ids()[..seq.num_prompt_tokens()],
        output_token_ids: seq.output_token_ids(),
        seed,
        step: seq.num_output_tokens() as u64,
        mask,
    })
    .map_err(|e| e.to_string())?;
    if let Some(c) = path.constraint.as_mut() {
        c.commit(out.token_id).map_err(|e| e.to_string())?;
    }
    let score = TokenScore::of(logits, out.token_id);
    let logprob =
        out.logprob.map(|logprob| TokenLogprob { token_id: out.token_id, logprob, top_logprobs: out.top_logprobs });
    let metrics = params.return_metrics.then(|| logit_metrics(logits));
    Ok((GeneratedToken { token_id: out.token_id, logprob, metrics }, score))
}

/// Adds a drawn token to a continuation and decides whether it goes on. One that goes on
/// appends the token to its sequence; one that ended holds it back, so its KV is computed
/// only if the continuation is kept.
fn advance(
    path: &mut BranchPath,
    token: GeneratedToken,
    score: TokenScore,
    limits: PathLimits,
    state: &RequestState,
    scheduler: &mut Scheduler,
    tokenizer: &Tokenizer,
) {
    let id = token.token_id;
    let Some(seq) = scheduler.get(path.seq_id) else {
        path.end = Some(PathEnd::Dropped);
        return;
    };
    let last_allowed = seq.num_output_tokens() + 1 >= seq.max_tokens();
    let grammar_done = path.constraint.as_ref().is_some_and(Constraint::is_finished);
    path.push(token, score);
    path.end = if state.ends_output(id) || grammar_done || last_allowed {
        Some(PathEnd::Stop)
    } else if limits.stop_at_newline && tokenizer.decode(&[id], false).is_ok_and(|t| t.contains('\n')) {
        Some(PathEnd::LineEnd)
    } else if path.tokens.len() >= limits.lookahead {
        Some(PathEnd::Lookahead)
    } else {
        None
    };
    if path.end.is_none() {
        match scheduler.append_token(path.seq_id, id) {
            Ok(_) => path.num_appended += 1,
            Err(_) => path.end = Some(PathEnd::Dropped),
        }
    }
}
