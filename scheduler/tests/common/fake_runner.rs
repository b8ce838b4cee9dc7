//! A fake engine for property tests: it plays the model runner and the decoding strategies
//! (the scheduler crate has no model), appends tokens the way each strategy would, and
//! records how every request ended so a test can check that none was lost.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use entrobatch_scheduler::{
    BlockId, DraftOdds, FinishReason, NewSequence, ScheduledSequence, Scheduler, SeqId, NULL_BLOCK,
};

use super::{check_output, modelled_step_seconds};

/// How a sequence uses the scheduler, after the engine's strategies.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// One token per sampled row, no extra rows.
    Plain,
    /// Scheduler-wise the same as plain: its work happens on the logits rows it already has.
    Entropix,
    /// Some tokens wait for `rows` scratch rows (the negative prompt) in a later step.
    Mti { rows: usize },
    /// Proposes drafts of up to `draft` tokens after every token; a verified draft keeps a
    /// prefix of them plus one sampled token.
    Speculative { draft: usize },
    /// Reserves `window` lookahead slots, runs the window as scratch rows, and commits
    /// several tokens at once; without a granted window it commits none and asks again.
    Wedlm { window: usize },
    /// Entropy branching: now and then forks a child (given a token of its own at once, as
    /// the engine gives each its candidate); a child is later adopted back into its parent,
    /// which then appends the token its winner held back.
    Branch,
}

/// How a request left the scheduler; every request must end up with one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Finished(FinishReason),
    Aborted,
    /// Refused at `add`, with the scheduler's reason.
    Rejected(String),
    /// A branch child whose tokens and blocks its parent took over.
    Adopted,
}

pub struct Driver {
    pub s: Scheduler,
    pub kinds: HashMap<SeqId, Kind>,
    pub outcomes: HashMap<SeqId, Outcome>,
    pub next_id: SeqId,
    /// Branch children still live, and the parent each forked from.
    pub parents: HashMap<SeqId, SeqId>,
    tick: u32,
}

impl Driver {
    pub fn new(s: Scheduler) -> Self {
        Self { s, kinds: HashMap::new(), outcomes: HashMap::new(), next_id: 0, parents: HashMap::new(), tick: 0 }
    }

    /// Live sequences, in a stable order.
    pub fn live(&self) -> Vec<SeqId> {
        let mut ids: Vec<SeqId> = self.s.running_ids().chain(self.s.waiting_ids()).collect();
        ids.sort_unstable();
        ids
    }

    pub fn pick(&self, pick: usize) -> Option<SeqId> {
        let live = self.live();
        (!live.is_empty()).then(|| live[pick % live.len()])
    }

    pub fn add(
        &mut self,
        prompt_token_ids: Vec<u32>,
        max_tokens: usize,
        kind: Kind,
        ttft_target: Option<Duration>,
    ) -> SeqId {
        let id = self.next_id;
        self.next_id += 1;
        match self.s.add(NewSequence { id, prompt_token_ids, max_tokens, skip_prefix_cache: false, ttft_target }) {
            Ok(()) => {
                if let Kind::Wedlm { window } = kind {
                    // Like the engine: a reservation the pool cannot hold is skipped, not fatal.
                    let _ = self.s.set_lookahead_slots(id, window);
                }
                self.kinds.insert(id, kind);
            }
            Err(e) => {
                self.outcomes.insert(id, Outcome::Rejected(e.to_string()));
            }
        }
        id
    }

    pub fn abort(&mut self, id: SeqId) {
        assert!(self.s.abort(id));
        self.outcomes.insert(id, Outcome::Aborted);
    }

    pub fn finish(&mut self, id: SeqId, reason: FinishReason) {
        self.s.finish(id, reason).expect("finish a live sequence");
        self.outcomes.insert(id, Outcome::Finished(reason));
    }

    /// One engine step: schedule, check the plan, then let each sampled row's strategy
    /// append tokens and ask for rows. A token id stops a sequence every `stop_every` ticks.
    pub fn step(&mut self, stop_every: u32) -> usize {
        let running_before: Vec<SeqId> = self.s.running_ids().collect();
        // Rows that compute a prompt (not strategy rows that come with their scratch rows).
        let prefilling_before: Vec<SeqId> = running_before
            .iter()
            .chain(self.s.waiting_ids().collect::<Vec<_>>().iter())
            .copied()
            .filter(|&id| self.s.get(id).is_some_and(|q| q.is_prefilling() && q.scratch_rows() == 0))
            .collect();
        let decodes = running_before.iter().any(|&id| self.s.get(id).is_some_and(|q| !q.is_prefilling()));
        let out = self.s.schedule();
        check_output(&self.s, &out);
        // Like the engine, the step's time goes back to the scheduler, which fits its step cost
        // from it; latency targets then plan in time.
        self.s.record_step(Duration::from_secs_f64(modelled_step_seconds(&out, 0.002, 0.0004, 0.0001)));
        let config = self.s.config();
        // Under a TPOT target prefill beside decodes is bounded by the step's planned time,
        // which may buy more rows than the cap; the step's rows stay within the budget.
        let cap = if decodes && config.latency_targets.tpot.is_none() {
            config.max_prefill_tokens_with_decodes
        } else {
            config.max_num_batched_tokens
        };
        let prefill: usize = out
            .scheduled
            .iter()
            .filter(|r| prefilling_before.contains(&r.seq_id) && r.scratch_rows == 0)
            .map(|r| r.num_query_tokens)
            .sum();
        assert!(prefill <= cap, "{prefill} prefill tokens beside decodes, cap {cap}");
        for &id in &out.preempted {
            assert!(self.s.get(id).is_some_and(|seq| seq.num_computed_tokens() == 0));
            assert!(out.scheduled.iter().all(|r| r.seq_id != id), "victim re-admitted in the step that preempted it");
        }
        if !out.preempted.is_empty() {
            assert!(out.scheduled.iter().all(|r| running_before.contains(&r.seq_id)), "no admission after preemption");
        }
        for row in out.scheduled.iter().filter(|r| r.needs_sample) {
            self.respond(row, stop_every);
        }
        check_ownership(&self.s);
        out.scheduled.len()
    }

    fn respond(&mut self, row: &ScheduledSequence, stop_every: u32) {
        let id = row.seq_id;
        let Some(&kind) = self.kinds.get(&id) else { return };
        self.tick += 1;
        if row.num_draft_tokens > 0 {
            // The verifier keeps some prefix of the draft; the KV of the rest is rolled back.
            let accepted = self.tick as usize % (row.num_draft_tokens + 1);
            let draft = self.s.get(id).expect("live").draft_token_ids()[..accepted].to_vec();
            self.s.accept_draft(id, accepted).expect("accept a verified draft");
            let bs = self.s.config().block_size;
            let seq = self.s.get(id).expect("live");
            assert!(
                seq.block_table_ids(0).len() <= (seq.num_computed_tokens() + seq.lookahead_slots()).div_ceil(bs).max(1),
                "blocks of rejected draft tokens kept"
            );
            for token in draft {
                if self.append(id, token, stop_every) {
                    return;
                }
            }
        }
        if self.branch(id, kind) {
            return;
        }
        let (tokens, next_rows) = match kind {
            Kind::Plain | Kind::Entropix | Kind::Speculative { .. } | Kind::Branch => (1, 0),
            // A granted window commits 1..=window tokens and asks for the next window.
            Kind::Wedlm { window } if row.scratch_rows > 0 => (1 + self.tick as usize % window, window),
            Kind::Wedlm { window } => (0, window),
            Kind::Mti { .. } if row.scratch_rows > 0 => (1, 0),
            // Every third token is guided: it waits for the negative prompt's rows.
            Kind::Mti { rows } if self.tick.is_multiple_of(3) => (0, rows),
            Kind::Mti { .. } => (1, 0),
        };
        for _ in 0..tokens {
            if self.append(id, self.tick % 5, stop_every) {
                return;
            }
        }
        if let Kind::Speculative { draft } = kind {
            let n = self.tick as usize % (draft + 1);
            let guess: Vec<u32> = (0..n as u32).map(|i| (self.tick + i) % 5).collect();
            let odds =
                DraftOdds { first: 0.5 + (self.tick % 5) as f64 / 10.0, next: 0.5 + (self.tick % 3) as f64 / 4.0 };
            self.s.set_draft(id, guess, odds).expect("live");
        }
        if next_rows > 0 {
            // The engine fails a request whose strategy asks for rows that can never fit.
            if self.s.request_scratch_rows(id, next_rows).is_err() {
                self.finish(id, FinishReason::Error);
            }
        }
    }

    /// A branching parent forks every third tick (the child takes its own first token); a
    /// child is adopted back every fourth, and its parent appends the held-back token. True
    /// when `id` is gone.
    fn branch(&mut self, id: SeqId, kind: Kind) -> bool {
        if let Some(&parent) = self.parents.get(&id) {
            if self.tick.is_multiple_of(4) && self.s.get(parent).is_some() {
                self.s.adopt(parent, id).expect("adopt a live child");
                self.parents.remove(&id);
                self.outcomes.insert(id, Outcome::Adopted);
                self.append(parent, self.tick % 5, u32::MAX);
                return true;
            }
            return false;
        }
        if matches!(kind, Kind::Branch) && self.tick.is_multiple_of(3) {
            let child = self.next_id;
            if self.s.fork(id, child).is_ok() {
                self.next_id += 1;
                self.kinds.insert(child, Kind::Plain);
                self.parents.insert(child, id);
                let bs = self.s.config().block_size;
                let (p, c) = (self.s.get(id).expect("live"), self.s.get(child).expect("forked"));
                let full = p.num_computed_tokens() / bs;
                assert_eq!(p.block_table_ids(0)[..full], c.block_table_ids(0)[..full], "full blocks shared");
                self.append(child, 4 - self.tick % 5, u32::MAX);
            }
        }
        false
    }

    /// Appends a token like the engine; true when it ended the request.
    fn append(&mut self, id: SeqId, token: u32, stop_every: u32) -> bool {
        self.s.append_token(id, token).expect("append below max_tokens");
        let seq = self.s.get(id).expect("live");
        if seq.num_output_tokens() == seq.max_tokens() {
            self.finish(id, FinishReason::Length);
            return true;
        }
        if self.tick.is_multiple_of(stop_every) {
            self.finish(id, FinishReason::Stop);
            return true;
        }
        false
    }

    /// Every request ended one way or another, rejections with a reason, and the pool is whole.
    pub fn assert_nothing_lost(&self) {
        assert!(!self.s.has_unfinished());
        for id in 0..self.next_id {
            match self.outcomes.get(&id) {
                None => panic!("request {id} vanished without an outcome"),
                Some(Outcome::Rejected(reason)) => {
                    assert!(!reason.is_empty(), "request {id} rejected without a reason")
                }
                Some(_) => {}
            }
        }
        assert_eq!(self.s.num_free_blocks(), self.s.num_total_blocks(), "blocks leaked");
    }
}

/// Block ownership recomputed from the public views, independently of `check_invariants`:
/// ref counts equal the number of tables holding a block, a block appears at most once per
/// table, a block shared between tables is a cached block whose tokens every holder has at
/// that position, no sequence is both running and waiting, and the free count adds up.
pub fn check_ownership(s: &Scheduler) {
    let running: HashSet<SeqId> = s.running_ids().collect();
    assert!(s.waiting_ids().all(|id| !running.contains(&id)), "a sequence is running and waiting");
    let bs = s.config().block_size;
    let mut holders: HashMap<BlockId, Vec<(SeqId, usize)>> = HashMap::new();
    for id in s.running_ids().chain(s.waiting_ids()) {
        let seq = s.get(id).expect("queued sequences are live");
        let mut own = HashSet::new();
        for group in 0..s.config().kv_group_windows.len() {
            for (index, &b) in seq.block_table_ids(group).iter().enumerate().filter(|&(_, &b)| b != NULL_BLOCK) {
                assert!(own.insert(b), "sequence {id} holds block {b} twice");
                holders.entry(b).or_default().push((id, index));
            }
        }
    }
    for b in 0..s.num_total_blocks() as BlockId {
        let block = s.block(b).expect("block in range");
        let held_by = holders.get(&b).map_or(&[][..], Vec::as_slice);
        assert_eq!(block.ref_count(), held_by.len(), "block {b}: ref count vs tables {held_by:?}");
        if held_by.len() > 1 {
            // Shared through the prefix cache or by a fork: full of the same computed tokens.
            let (first, index) = held_by[0];
            let tokens = |id: SeqId| s.get(id).map(|seq| seq.token_ids().get(index * bs..(index + 1) * bs));
            for &(id, i) in held_by {
                let seq = s.get(id).expect("live");
                assert!(i == index && seq.num_computed_tokens() >= (i + 1) * bs, "block {b} shared while not full");
                assert_eq!(tokens(id), tokens(first), "block {b} shared by {held_by:?} with other tokens");
            }
        }
        if block.hash().is_some() {
            for &(id, index) in held_by {
                let tokens = s.get(id).map(|seq| seq.token_ids()).unwrap_or_default();
                assert_eq!(
                    tokens.get(index * bs..(index + 1) * bs),
                    Some(block.cached_token_ids()),
                    "block {b} in {id}"
                );
            }
        }
    }
    assert_eq!(s.num_free_blocks(), s.num_total_blocks() - holders.len(), "free count");
}
