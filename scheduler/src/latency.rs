//! Latency targets and the admission rule that keeps them: a request that would wait past
//! its TTFT target is refused at once, with how long to wait before trying again, rather than
//! served late (goodput, not throughput, is what a client sees).
//!
//! A target bounds what a client sees; the engine plans to a share of it, because its plans
//! are estimates that err both ways, and an engine at saturation runs right at whatever bound
//! it plans to: planned to the target itself, a large share of the requests miss it by a
//! little (the notebook's "Latency targets planned to a share of themselves").

use std::time::Duration;

use crate::prefill_order::is_short;
use crate::prefix_hit::PrefixProbe;
use crate::scheduler::Scheduler;
use crate::step_cost::StepWork;

/// What a deployment promises its clients; both off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyTargets {
    /// Time to first token. Admission refuses a request whose estimated wait plus its own
    /// prefill (what of its prompt is not cached) exceeds a share of it (`QueueLoad::admit`).
    pub ttft: Option<Duration>,
    /// Time per output token: steps are planned to a share of it (`planned_step_time`), so prefill
    /// beside decodes gets what the decodes leave of that, and a step of prefill alone no more
    /// than the target, since an arrival waits for the step in flight
    /// (`Scheduler::prefill_allowance`).
    pub tpot: Option<Duration>,
}

/// The share of the TPOT target a step with decodes is planned to. A request's TPOT is the
/// mean of the steps it spans, so the step cost's errors mostly average out over a request,
/// and a tenth of the target covers what is left.
const TPOT_PLANNING_SHARE: f64 = 0.9;

/// The share of the TTFT target admission plans to. A TTFT estimate predicts the queue's
/// future and errs more, by an amount more than in proportion: a fifth of the target.
const TTFT_PLANNING_SHARE: f64 = 0.8;

/// The most TTFT admission and the prefill pace plan for under a target (`TTFT_PLANNING_SHARE`).
pub(crate) fn ttft_plan(target: Duration) -> Duration {
    target.mul_f64(TTFT_PLANNING_SHARE)
}

impl LatencyTargets {
    /// The longest a step is planned to take under the TPOT target: a share of it while
    /// sequences decode (`TPOT_PLANNING_SHARE`), the whole target for a step of prefill alone,
    /// which no request's TPOT averages in.
    pub fn planned_step_time(&self, decoding: bool) -> Option<Duration> {
        let share = if decoding { TPOT_PLANNING_SHARE } else { 1.0 };
        self.tpot.map(|tpot| tpot.mul_f64(share))
    }
}

/// The queue as admission sees it, taken by the engine after each step; admission itself runs
/// on the caller's thread from this copy.
#[derive(Clone, Debug, Default)]
pub struct QueueLoad {
    pub ttft_target: Option<Duration>,
    /// Tokens each prefilling sequence (running or waiting) has left to compute, ascending.
    pub prefill_remaining: Vec<usize>,
    /// The oldest prefilling sequence's remaining tokens: it keeps half of the step's prefill.
    pub oldest_remaining: usize,
    /// Prefill tokens per step beside the present decodes.
    pub prefill_per_step: usize,
    /// Output tokens each running sequence may still produce at most, ascending.
    pub running_max_remaining: Vec<usize>,
    pub num_waiting: usize,
    /// The most sequences that may run now (`max_num_seqs`, or fewer under a TPOT target).
    pub max_num_seqs: usize,
    /// A step's fitted duration at the present load; `None` until the fit has data.
    pub step: Option<Duration>,
    /// Sequences finished per second lately.
    pub finish_rate: Option<f64>,
}

/// Why admission refused: the estimated time to first token, the target, and the share of it
/// admission plans to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WouldMissTtft {
    /// The wait before the prompt starts computing plus its own prefill.
    pub estimated_ttft: Duration,
    pub target: Duration,
    /// The most `estimated_ttft` admission accepts under `target` (`TTFT_PLANNING_SHARE`).
    pub admitted_up_to: Duration,
    /// When the queue ahead should have drained enough to be admitted (at least 1 s).
    pub retry_after: Duration,
}

impl QueueLoad {
    /// The wait before a new prompt of `prompt_len` tokens starts computing, with `unadmitted`
    /// requests submitted since this snapshot ahead of it; `None` while the step cost has no
    /// fit (a cold engine admits).
    pub fn estimate_wait(&self, prompt_len: usize, unadmitted: usize) -> Option<Duration> {
        let step = self.step?.as_secs_f64();
        // Shorter prompts go first.
        let ahead: usize =
            self.prefill_remaining.iter().take_while(|&&r| r <= prompt_len).sum::<usize>() + unadmitted * prompt_len;
        let prefill_steps = ahead.div_ceil(self.prefill_tokens_per_step(prompt_len));
        // A slot frees when a running sequence finishes: the k-th soonest can take no longer
        // than its remaining output, and lately they finished at `finish_rate` a second.
        let queued = self.num_waiting + unadmitted + 1;
        let running = self.running_max_remaining.len();
        let needed = (running + queued).saturating_sub(self.max_num_seqs);
        let slot_wait = if needed == 0 {
            0.0
        } else {
            let by_length =
                self.running_max_remaining.get(needed - 1).map_or(f64::INFINITY, |&tokens| tokens as f64 * step);
            let by_rate = self.finish_rate.map_or(f64::INFINITY, |rate| needed as f64 / rate);
            let wait = by_length.min(by_rate);
            if wait.is_finite() {
                wait
            } else {
                // Nothing has finished yet and more are queued than running: as long as the
                // longest running output.
                self.running_max_remaining.last().map_or(0.0, |&t| t as f64 * step)
            }
        };
        Some(Duration::from_secs_f64(slot_wait + prefill_steps as f64 * step))
    }

    /// Prefill tokens a step computes for a prompt of `prompt_len` tokens once its turn comes:
    /// an older, longer prompt keeps half of each step's prefill, or of every other step while
    /// a short prompt (two steps' worth) waits (`prefill_order`).
    fn prefill_tokens_per_step(&self, prompt_len: usize) -> usize {
        let per_step = self.prefill_per_step.max(1);
        let share = if is_short(prompt_len, per_step) { per_step.div_ceil(4) } else { per_step.div_ceil(2) };
        let kept = if self.oldest_remaining > prompt_len { self.oldest_remaining.min(share) } else { 0 };
        (per_step - kept).max(1)
    }

    /// The steps of a prompt's own prefill once nothing is ahead of it: its uncached tokens,
    /// the last step of them drawing the first token.
    fn own_prefill(&self, prompt_len: usize, num_cached: usize) -> Option<Duration> {
        let uncached = prompt_len.saturating_sub(num_cached).max(1);
        let steps = uncached.div_ceil(self.prefill_tokens_per_step(prompt_len));
        Some(self.step? * steps as u32)
    }

    /// Admits a prompt of `prompt_len` tokens, `num_cached` of them in the prefix cache, unless
    /// its estimated wait plus its own prefill exceeds the share of the TTFT target admission
    /// plans to. A prompt too long to make that on an idle engine is late anywhere: it is held
    /// to the wait alone, since refusing it under any load would only starve it. An admitted
    /// prompt's estimated TTFT (wait and own prefill) is returned (`None` without a target or
    /// a fit), so the TTFT it then had can be set against it.
    pub fn admit(
        &self,
        prompt_len: usize,
        num_cached: usize,
        unadmitted: usize,
    ) -> Result<Option<Duration>, WouldMissTtft> {
        let (Some(target), Some(wait), Some(own)) =
            (self.ttft_target, self.estimate_wait(prompt_len, unadmitted), self.own_prefill(prompt_len, num_cached))
        else {
            return Ok(None);
        };
        let admitted_up_to = ttft_plan(target);
        let allowed_wait = admitted_up_to.checked_sub(own).unwrap_or(admitted_up_to);
        if wait <= allowed_wait {
            return Ok(Some(wait + own));
        }
        let retry_after = Duration::from_secs((wait - allowed_wait).as_secs_f64().ceil().max(1.0) as u64);
        Err(WouldMissTtft { estimated_ttft: wait + own, target, admitted_up_to, retry_after })
    }
}

impl Scheduler {
    /// Feeds the step cost: the last `schedule()`'s output took `elapsed` to execute,
    /// scheduling and sampling included.
    pub fn record_step(&mut self, elapsed: Duration) {
        if tracing::enabled!(tracing::Level::TRACE) {
            let work = self.last_step_work;
            let predicted_ms = self.step_cost.predict(work).map(|d| d.as_secs_f64() * 1e3);
            let elapsed_ms = elapsed.as_secs_f64() * 1e3;
            tracing::trace!(rows = work.rows, kilo_keys = work.kilo_keys, ?predicted_ms, elapsed_ms, "step cost");
        }
        self.step_cost.observe(self.last_step_work, elapsed);
        self.clock += elapsed;
    }

    /// The prefix cache for admission on another thread (a request's own prefill).
    pub fn prefix_probe(&self) -> PrefixProbe {
        PrefixProbe::new(self.pool.clone(), self.config.kv_group_windows.clone())
    }

    /// The queue now, for admission on another thread.
    pub fn queue_load(&self) -> QueueLoad {
        let mut prefill_remaining = Vec::new();
        let mut oldest: Option<(u64, usize)> = None;
        let mut running_max_remaining = Vec::new();
        let queued = self.running.iter().chain(self.waiting.iter());
        for seq in queued.filter_map(|id| self.sequences.get(id)) {
            if seq.awaits_prefill() {
                let remaining = seq.num_uncomputed_tokens();
                prefill_remaining.push(remaining);
                if oldest.is_none_or(|(arrival, _)| seq.arrival < arrival) {
                    oldest = Some((seq.arrival, remaining));
                }
            }
            if seq.blocks.is_some() {
                running_max_remaining.push(seq.max_tokens.saturating_sub(seq.num_output_tokens()));
            }
        }
        prefill_remaining.sort_unstable();
        running_max_remaining.sort_unstable();
        let decodes = self.decode_work();
        // What a fresh prompt gets a step (as if one sequence decoded, when none does).
        let allowance = self.prefill_allowance(StepWork { rows: decodes.rows.max(1), ..decodes });
        let prefill_per_step = allowance.tokens_at_context(0);
        let prefill_next = prefill_per_step.min(prefill_remaining.iter().sum());
        let mut next = decodes;
        next.add(StepWork { rows: prefill_next, kilo_keys: 0.0 });
        // A step deep in a long prompt costs more than a fresh prompt's: the last step says so.
        let step = match (self.step_cost.predict(next), self.step_cost.predict(self.last_step_work)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        QueueLoad {
            ttft_target: self.config.latency_targets.ttft,
            prefill_remaining,
            oldest_remaining: oldest.map_or(0, |(_, r)| r),
            prefill_per_step,
            running_max_remaining,
            num_waiting: self.waiting.len(),
            max_num_seqs: self.tpot_seq_limit(),
            step,
            finish_rate: self.step_cost.finish_rate(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn load() -> QueueLoad {
        QueueLoad {
            ttft_target: Some(ms(2000)),
            prefill_per_step: 64,
            max_num_seqs: 4,
            step: Some(ms(100)),
            ..QueueLoad::default()
        }
    }

    #[test]
    fn an_idle_engine_admits_and_a_cold_one_does_not_guess() {
        assert_eq!(load().estimate_wait(30_000, 0), Some(Duration::ZERO));
        // Its own prefill: 469 steps of 64 tokens.
        assert_eq!(load().admit(30_000, 0, 0), Ok(Some(ms(46_900))));
        let cold = QueueLoad { step: None, prefill_remaining: vec![1_000_000], ..load() };
        assert_eq!(cold.estimate_wait(10, 0), None);
        assert_eq!(cold.admit(10, 0, 0), Ok(None));
    }

    #[test]
    fn a_short_prompt_waits_only_for_shorter_ones_and_its_share_beside_the_oldest() {
        let l = QueueLoad { prefill_remaining: vec![100, 200, 30_000], oldest_remaining: 30_000, ..load() };
        // 300 tokens ahead at 32 a step (the oldest keeps 32): 10 steps.
        assert_eq!(l.estimate_wait(200, 0), Some(ms(1000)));
        // A short one (two steps' worth) has every other step whole: 48 a step on average.
        assert_eq!(l.estimate_wait(100, 0), Some(ms(300)));
        // A longer prompt also waits for the 30k one, which then has the whole step.
        assert_eq!(l.estimate_wait(40_000, 0), Some(ms(100 * 30_300u64.div_ceil(64))));
        let refused = l.admit(40_000, 0, 0).unwrap_err();
        assert_eq!(refused.target, ms(2000));
        assert!(refused.retry_after >= Duration::from_secs(1));
        assert!(refused.estimated_ttft > refused.target + ms(30_300 / 64 * 100));
    }

    #[test]
    fn a_full_engine_waits_for_the_soonest_finishes() {
        // Four running (the most), two waiting: a new one needs three to finish.
        let l = QueueLoad { running_max_remaining: vec![5, 10, 40, 128], num_waiting: 2, ..load() };
        assert_eq!(l.estimate_wait(10, 0), Some(ms(4000)));
        let faster = QueueLoad { finish_rate: Some(3.0), ..l.clone() };
        assert_eq!(faster.estimate_wait(10, 0), Some(ms(1000)));
        assert_eq!(faster.admit(10, 0, 0), Ok(Some(ms(1100))), "an admission carries its estimated TTFT");
        assert!(l.admit(10, 0, 0).is_err());
        // Requests submitted since the snapshot count as queued ahead.
        assert!(faster.admit(10, 0, 4).is_err());
    }

    #[test]
    fn a_prompt_that_can_make_the_target_must_make_it_with_its_own_prefill() {
        // 1,400 ms of shorter prompts ahead (14 of one step each), then 200 tokens of its own:
        // 4 more steps, 1,800 ms in all. Under the 2 s target, but past the 1.6 s admission
        // plans to, leaving room for the estimate's error.
        let l = QueueLoad { prefill_remaining: vec![64; 14], ..load() };
        assert_eq!(l.estimate_wait(1_000, 0), Some(ms(1400)));
        let refused = l.admit(200, 0, 0).unwrap_err();
        assert_eq!((refused.estimated_ttft, refused.target, refused.admitted_up_to), (ms(1800), ms(2000), ms(1600)));
        assert_eq!(refused.retry_after, Duration::from_secs(1));
        // The same prompt with 192 tokens in the prefix cache computes one step of its own.
        assert_eq!(l.admit(200, 192, 0), Ok(Some(ms(1500))));
        // A prompt no idle engine serves within the target is held to its wait alone (its
        // estimate still counts its 391 steps of own prefill).
        assert_eq!(l.admit(25_000, 0, 0), Ok(Some(ms(1400 + 39_100))));
        let longer_queue = QueueLoad { prefill_remaining: vec![64; 17], ..load() };
        assert!(longer_queue.admit(25_000, 0, 0).is_err());
    }
}
