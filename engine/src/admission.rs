//! Admission: a submitted request becomes a scheduler sequence and the loop's
//! `RequestState`.
//!
//! Copies of one prompt submitted together (a request's `n` choices) share the prompt's KV:
//! the first copy is admitted at once, the others once its prompt is computed, so they find
//! every full block of it in the prefix cache (shared by reference count, never copied) and
//! compute only the last, partial block themselves. Without prefix caching, or for copies
//! that score their prompt (every row's logits are needed), each copy is admitted at once.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use entrobatch_scheduler::NewSequence;

use crate::engine_loop::{EngineLoop, PendingRequest};
use crate::event::{Event, FinishReason, RequestId};
use crate::prepare::PreparedRequest;
use crate::request_state::{RequestState, SequenceCounts};

/// Copies waiting for their leader's prompt, by leader.
#[derive(Default)]
pub struct Followers {
    by_leader: HashMap<RequestId, Vec<PendingRequest>>,
}

impl EngineLoop {
    pub(crate) fn admit(&mut self, req: PendingRequest) {
        if self.draining {
            self.end_unadmitted(req, "engine is shutting down");
            return;
        }
        self.admit_accepted(req);
    }

    /// Admits a request accepted before any shutdown began.
    pub(crate) fn admit_accepted(&mut self, req: PendingRequest) {
        let PendingRequest { id, request, sender } = req;
        let PreparedRequest { prompt_token_ids, params, strategy, constraint, seed } = request;
        let num_prompt = prompt_token_ids.len();
        let max_tokens = params.scheduled_max_tokens();
        let skip_prefix_cache = params.prompt_logprobs.is_some();
        let eos = self.tokenizer.eos_token_ids.clone();
        let mut state = RequestState::new(params, seed, num_prompt, sender, eos, strategy);
        state.constraint = constraint;
        let new_seq = NewSequence { id, prompt_token_ids, max_tokens, skip_prefix_cache };
        match self.scheduler.add(new_seq) {
            Ok(()) => {
                self.metrics.prompt_tokens.fetch_add(num_prompt as u64, Ordering::Relaxed);
                self.requests.insert(id, state);
            }
            Err(e) => {
                self.metrics.requests_rejected.fetch_add(1, Ordering::Relaxed);
                self.metrics.release_in_flight();
                state.finish(FinishReason::Error, Some(e.to_string()), SequenceCounts::default());
            }
        }
    }

    /// Admits a submitted batch, holding back later copies of a prompt whose first copy is
    /// admitted in the same batch.
    pub(crate) fn admit_batch(&mut self, batch: Vec<PendingRequest>) {
        let sharing = self.scheduler.config().enable_prefix_caching && !self.draining;
        let block_size = self.scheduler.config().block_size;
        let shareable: Vec<bool> = batch
            .iter()
            .map(|r| {
                sharing
                    && r.request.prompt_token_ids().len() > block_size
                    && r.request.params().prompt_logprobs.is_none()
            })
            .collect();
        // For each request, the earlier one in the batch with the same shareable prompt, if any.
        let leader_index: Vec<Option<usize>> = (0..batch.len())
            .map(|i| {
                let prompt = batch[i].request.prompt_token_ids();
                (shareable[i])
                    .then(|| (0..i).find(|&j| shareable[j] && batch[j].request.prompt_token_ids() == prompt))
                    .flatten()
            })
            .collect();
        let ids: Vec<RequestId> = batch.iter().map(|r| r.id).collect();
        for (i, req) in batch.into_iter().enumerate() {
            // A leader the scheduler refused is not running: its copies go in on their own.
            let leader = leader_index[i].map(|j| ids[j]).filter(|id| self.requests.contains_key(id));
            match leader {
                Some(leader) => self.followers.by_leader.entry(leader).or_default().push(req),
                None => self.admit(req),
            }
        }
    }

    /// The leader's prompt is computed (or the leader ended): its copies are admitted.
    pub(crate) fn release_followers(&mut self, leader: RequestId) {
        if let Some(copies) = self.followers.by_leader.remove(&leader) {
            for req in copies {
                self.admit_accepted(req);
            }
        }
    }

    /// Ends a copy still waiting for its leader (its client went away); false if `id` is none.
    pub(crate) fn abort_follower(&mut self, id: RequestId) -> bool {
        for copies in self.followers.by_leader.values_mut() {
            if let Some(i) = copies.iter().position(|r| r.id == id) {
                let req = copies.remove(i);
                self.end_unadmitted(req, "aborted");
                return true;
            }
        }
        false
    }

    /// Ends every waiting copy (the engine is stopping).
    pub(crate) fn abort_all_followers(&mut self) {
        let all: Vec<PendingRequest> = self.followers.by_leader.drain().flat_map(|(_, v)| v).collect();
        for req in all {
            self.end_unadmitted(req, "engine shut down");
        }
    }

    /// Ends a request that never reached the scheduler: its stream gets an abort, nothing else.
    pub(crate) fn end_unadmitted(&self, req: PendingRequest, why: &str) {
        self.metrics.release_in_flight();
        let _ = req.sender.send(Event::Finished {
            reason: FinishReason::Abort,
            prompt_tokens: req.request.prompt_token_ids().len(),
            cached_tokens: 0,
            completion_tokens: 0,
            error: Some(why.into()),
            strategy_stats: None,
        });
    }
}
