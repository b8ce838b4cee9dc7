//! Admission by TTFT target, on the submitting thread: the loop publishes the queue after
//! every step (`Scheduler::queue_load`), and `submit` asks the scheduler's rule whether a new
//! request's wait and then its own prefill (what of its prompt the prefix cache does not
//! hold) would run past its target. A refusal is immediate, so a client (or a balancer) can
//! go elsewhere while the request could still be served on time.

use std::time::Duration;

use entrobatch_scheduler::{PrefixProbe, QueueLoad, WouldMissTtft};
use parking_lot::Mutex;

pub(crate) struct LatencyGate {
    load: Mutex<Option<QueueLoad>>,
    /// What of a prompt is cached: its own prefill is the rest.
    prefix: PrefixProbe,
}

impl LatencyGate {
    pub(crate) fn new(prefix: PrefixProbe) -> Self {
        Self { load: Mutex::new(None), prefix }
    }

    pub(crate) fn publish(&self, load: QueueLoad) {
        *self.load.lock() = Some(load);
    }

    /// Checks each prompt of a batch (its tokens, and whether it skips the prefix cache) in
    /// turn, counting the ones before it and the `unadmitted` requests submitted since the
    /// last publication as queued ahead of it.
    /// `target` overrides the server's TTFT target for these requests. Returns each admitted
    /// prompt's estimated TTFT where there is one.
    pub(crate) fn check(
        &self,
        prompts: &[(&[u32], bool)],
        target: Option<Duration>,
        unadmitted: usize,
    ) -> Result<Vec<Option<Duration>>, WouldMissTtft> {
        // Copied only when a target applies, so the prefix cache is probed without holding up
        // the loop's next publication, and a server without targets copies nothing.
        let load = {
            let guard = self.load.lock();
            match guard.as_ref() {
                Some(load) if target.or(load.ttft_target).is_some() => {
                    QueueLoad { ttft_target: target.or(load.ttft_target), ..load.clone() }
                }
                _ => return Ok(vec![None; prompts.len()]),
            }
        };
        prompts
            .iter()
            .enumerate()
            .map(|(i, &(prompt, skips_cache))| {
                let cached = if skips_cache { 0 } else { self.prefix.cached_tokens(prompt) };
                load.admit(prompt.len(), cached, unadmitted + i)
            })
            .collect()
    }

    /// Requests running or waiting at the last publication (what `in_flight` has beyond it
    /// was submitted since).
    pub(crate) fn num_queued(&self) -> usize {
        self.load.lock().as_ref().map_or(0, |l| l.running_max_remaining.len() + l.num_waiting)
    }

    /// Why a one-token prompt would be refused now under the server's TTFT target, if it
    /// would be.
    pub(crate) fn short_prompt_refusal(&self, unadmitted: usize) -> Option<WouldMissTtft> {
        let guard = self.load.lock();
        guard.as_ref()?.admit(1, 0, unadmitted).err()
    }
}
