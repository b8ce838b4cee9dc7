//! Admission by TTFT target, on the submitting thread: the loop publishes the queue after
//! every step (`Scheduler::queue_load`), and `submit` asks the scheduler's rule whether a new
//! request would wait past its target. A refusal is immediate, so a client (or a balancer) can
//! go elsewhere while the request could still be served on time.

use std::time::Duration;

use entrobatch_scheduler::{QueueLoad, WouldMissTtft};
use parking_lot::Mutex;

#[derive(Default)]
pub(crate) struct LatencyGate {
    load: Mutex<Option<QueueLoad>>,
}

impl LatencyGate {
    pub(crate) fn publish(&self, load: QueueLoad) {
        *self.load.lock() = Some(load);
    }

    /// Checks each prompt of a batch in turn, counting the ones before it and the
    /// `unadmitted` requests submitted since the last publication as queued ahead of it.
    /// `target` overrides the server's TTFT target for these requests. Returns each admitted
    /// prompt's estimated wait where there is one.
    pub(crate) fn check(
        &self,
        prompt_lens: &[usize],
        target: Option<Duration>,
        unadmitted: usize,
    ) -> Result<Vec<Option<Duration>>, WouldMissTtft> {
        let guard = self.load.lock();
        let Some(load) = guard.as_ref() else {
            return Ok(vec![None; prompt_lens.len()]);
        };
        let with_target;
        let load = match target {
            Some(t) => {
                with_target = QueueLoad { ttft_target: Some(t), ..load.clone() };
                &with_target
            }
            None => load,
        };
        prompt_lens.iter().enumerate().map(|(i, &len)| load.admit(len, unadmitted + i)).collect()
    }

    /// Requests running or waiting at the last publication (what `in_flight` has beyond it
    /// was submitted since).
    pub(crate) fn num_queued(&self) -> usize {
        self.load.lock().as_ref().map_or(0, |l| l.running_max_remaining.len() + l.num_waiting)
    }

    /// The estimated wait of a short prompt now and the server's target, if both are known.
    pub(crate) fn estimated_wait(&self, unadmitted: usize) -> Option<(Duration, Duration)> {
        let guard = self.load.lock();
        let load = guard.as_ref()?;
        Some((load.estimate_wait(1, unadmitted)?, load.ttft_target?))
    }
}
