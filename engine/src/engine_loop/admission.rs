//! Admission: a submitted request becomes a scheduler sequence and the loop's
//! `RequestState`, or is refused with an abort if it never gets that far.
//!
//! Copies of one prompt submitted together (a request's `n` choices) share the prompt's KV:
//! the first copy is admitted at once, the others once its prompt is computed, so they find
//! every full block of it in the prefix cache (shared by reference count, never copied) and
//! compute only the last, partial block themselves. Without prefix caching, or for copies
//! that score their prompt (every row's logits are needed), each copy is admitted at once.
//!
//! Nothing here reads the loop itself: it is handed the parts it writes to (`Live`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use entrobatch_scheduler::{NewSequence, Scheduler};

use crate::command::PendingRequest;
use crate::event::{Event, FinishReason, RequestId};
use crate::metrics::{EngineMetrics, RequestTimes};
use crate::request_state::{RequestState, SequenceCounts};
use crate::validation::PreparedRequest;

/// What admitting a request writes to: the loop's scheduler, its live requests, the counters.
pub(super) struct Live<'a> {
    pub(super) scheduler: &'a mut Scheduler,
    pub(super) requests: &'a mut HashMap<RequestId, RequestState>,
    pub(super) metrics: &'a EngineMetrics,
}

/// Admits submitted requests, holding back copies of a prompt until its first copy's prefill.
pub(super) struct Admission {
    eos_token_ids: Vec<u32>,
    /// Copies waiting for their leader's prompt, by leader.
    followers: HashMap<RequestId, Vec<PendingRequest>>,
}

impl Admission {
    pub(super) fn new(eos_token_ids: Vec<u32>) -> Self {
        Self { eos_token_ids, followers: HashMap::new() }
    }

    /// Admits a submitted batch, holding back later copies of a prompt whose first copy is
    /// admitted in the same batch. A batch arriving while the engine drains is refused.
    pub(super) fn admit_batch(&mut self, batch: Vec<PendingRequest>, live: &mut Live<'_>, draining: bool) {
        if draining {
            for req in batch {
                refuse(req, "engine is shutting down");
            }
            return;
        }
        let config = live.scheduler.config();
        let leader_index = leader_indices(&batch, config.enable_prefix_caching, config.block_size);
        let ids: Vec<RequestId> = batch.iter().map(|r| r.id).collect();
        for (i, req) in batch.into_iter().enumerate() {
            // A leader the scheduler refused is not running: its copies go in on their own.
            let leader = leader_index[i].map(|j| ids[j]).filter(|id| live.requests.contains_key(id));
            match leader {
                Some(leader) => self.followers.entry(leader).or_default().push(req),
                None => self.admit_now(req, live),
            }
        }
    }

    /// The leader's prompt is computed (or the leader ended): its copies are admitted, even
    /// while draining, since they were accepted before it began.
    pub(super) fn admit_followers_of(&mut self, leader: RequestId, live: &mut Live<'_>) {
        if let Some(copies) = self.followers.remove(&leader) {
            for req in copies {
                self.admit_now(req, live);
            }
        }
    }

    /// Ends a copy still waiting for its leader (its client went away); false if `id` is none.
    pub(super) fn abort_follower(&mut self, id: RequestId) -> bool {
        for copies in self.followers.values_mut() {
            if let Some(i) = copies.iter().position(|r| r.id == id) {
                refuse(copies.remove(i), "aborted");
                return true;
            }
        }
        false
    }

    /// Ends every waiting copy (the engine is stopping).
    pub(super) fn abort_all_followers(&mut self) {
        for req in self.followers.drain().flat_map(|(_, copies)| copies) {
            refuse(req, "engine shut down");
        }
    }

    /// Hands a request to the scheduler; one it refuses ends at once with its error.
    fn admit_now(&self, req: PendingRequest, live: &mut Live<'_>) {
        let PendingRequest { id, request, sender, in_flight, submitted_at, estimated_ttft } = req;
        let skip_prefix_cache = request.skips_prefix_cache();
        let PreparedRequest { prompt_token_ids, params, strategy, constraint, seed, speculation } = request;
        let num_prompt = prompt_token_ids.len();
        let max_tokens = params.scheduled_max_tokens();
        let ttft_target = params.ttft_target_ms.map(Duration::from_millis);
        let eos = self.eos_token_ids.clone();
        let mut state = RequestState::new(params, seed, num_prompt, sender, eos, strategy, in_flight);
        state.constraint = constraint;
        state.speculation = speculation;
        state.times = RequestTimes::new(submitted_at).with_estimated_ttft(estimated_ttft);
        let new_seq = NewSequence { id, prompt_token_ids, max_tokens, skip_prefix_cache, ttft_target };
        match live.scheduler.add(new_seq) {
            Ok(()) => {
                live.metrics.prompt_tokens.fetch_add(num_prompt as u64, Ordering::Relaxed);
                live.requests.insert(id, state);
            }
            Err(e) => {
                live.metrics.requests_rejected.fetch_add(1, Ordering::Relaxed);
                state.finish(FinishReason::Error, Some(e.to_string()), SequenceCounts::default(), None);
            }
        }
    }
}

/// For each request of a batch, the index of the earlier one with the same prompt whose KV it
/// can share, if any: prompts longer than a block, with prefix caching on, not scored.
fn leader_indices(batch: &[PendingRequest], prefix_caching: bool, block_size: usize) -> Vec<Option<usize>> {
    let shareable: Vec<bool> = batch
        .iter()
        .map(|r| {
            prefix_caching
                && r.request.prompt_token_ids().len() > block_size
                && r.request.params().prompt_logprobs.is_none()
        })
        .collect();
    (0..batch.len())
        .map(|i| {
            let prompt = batch[i].request.prompt_token_ids();
            (shareable[i])
                .then(|| (0..i).find(|&j| shareable[j] && batch[j].request.prompt_token_ids() == prompt))
                .flatten()
        })
        .collect()
}

/// Ends a request that never reached the scheduler: its in-flight slot is freed, then its
/// stream gets an abort.
pub(super) fn refuse(req: PendingRequest, why: &str) {
    let PendingRequest { request, sender, in_flight, .. } = req;
    drop(in_flight);
    let _ = sender.send(Event::Finished {
        reason: FinishReason::Abort,
        prompt_tokens: request.prompt_token_ids().len(),
        cached_tokens: 0,
        completion_tokens: 0,
        error: Some(why.into()),
        strategy_stats: None,
        stop_string: None,
        schema_errors: None,
        prediction: None,
    });
}
