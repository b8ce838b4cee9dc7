//! Random operation sequences on tiny pools and budgets; invariants checked after every step.

mod common;

use common::check_output;
use entrobatch_scheduler::{FinishReason, NewSequence, Scheduler, SchedulerConfig, SeqId};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// Tokens come from a tiny alphabet when `shared` so prefixes collide and hit the cache.
    Add {
        prompt_len: usize,
        max_tokens: usize,
        shared: bool,
        salt: u32,
    },
    Schedule {
        stop_every: u32,
    },
    Abort {
        pick: usize,
    },
    Scratch {
        pick: usize,
        rows: usize,
    },
    Lookahead {
        pick: usize,
        slots: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1usize..24, 1usize..24, any::<bool>(), 0u32..4).prop_map(|(prompt_len, max_tokens, shared, salt)| Op::Add {
            prompt_len,
            max_tokens,
            shared,
            salt
        }),
        6 => (4u32..40).prop_map(|stop_every| Op::Schedule { stop_every }),
        1 => any::<usize>().prop_map(|pick| Op::Abort { pick }),
        1 => (any::<usize>(), 0usize..4).prop_map(|(pick, rows)| Op::Scratch { pick, rows }),
        1 => (any::<usize>(), 0usize..6).prop_map(|(pick, slots)| Op::Lookahead { pick, slots }),
    ]
}

fn scheduler_config() -> impl Strategy<Value = SchedulerConfig> {
    (4usize..=12, 1usize..=16, 1usize..=6, any::<bool>()).prop_map(
        |(num_blocks, budget, max_num_seqs, caching)| SchedulerConfig {
            max_num_batched_tokens: budget,
            max_num_seqs,
            block_size: 4,
            num_blocks,
            max_model_len: 44,
            enable_prefix_caching: caching,
        },
    )
}

struct Driver {
    s: Scheduler,
    ids: Vec<SeqId>,
    next_id: SeqId,
    tick: u32,
}

impl Driver {
    fn live(&self, pick: usize) -> Option<SeqId> {
        let live: Vec<SeqId> = self
            .ids
            .iter()
            .copied()
            .filter(|&id| self.s.get(id).is_some())
            .collect();
        (!live.is_empty()).then(|| live[pick % live.len()])
    }

    /// One engine step; returns how many rows were scheduled.
    fn schedule(&mut self, stop_every: u32) -> usize {
        let running_before: Vec<SeqId> = self.s.running_ids().collect();
        let out = self.s.schedule();
        check_output(&self.s, &out);
        for &id in &out.preempted {
            assert!(self
                .s
                .get(id)
                .is_some_and(|seq| seq.num_computed_tokens() == 0));
            assert!(
                out.scheduled.iter().all(|r| r.seq_id != id),
                "victim re-admitted in the step that preempted it"
            );
        }
        if !out.preempted.is_empty() {
            assert!(
                out.scheduled
                    .iter()
                    .all(|r| running_before.contains(&r.seq_id)),
                "no admission after preemption"
            );
        }
        for row in out.scheduled.iter().filter(|r| r.needs_sample) {
            self.tick += 1;
            self.s.append_token(row.seq_id, self.tick % 5).unwrap();
            let seq = self.s.get(row.seq_id).unwrap();
            if seq.num_output_tokens() == seq.max_tokens() {
                self.s.finish(row.seq_id, FinishReason::Length).unwrap();
            } else if self.tick.is_multiple_of(stop_every) {
                self.s.finish(row.seq_id, FinishReason::Stop).unwrap();
            }
        }
        out.scheduled.len()
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Add {
                prompt_len,
                max_tokens,
                shared,
                salt,
            } => {
                let id = self.next_id;
                self.next_id += 1;
                let prompt_token_ids = (0..prompt_len as u32)
                    .map(|i| {
                        if shared {
                            (i / 5 + salt) % 2
                        } else {
                            id as u32 * 100 + i
                        }
                    })
                    .collect();
                if self
                    .s
                    .add(NewSequence {
                        id,
                        prompt_token_ids,
                        max_tokens,
                    })
                    .is_ok()
                {
                    self.ids.push(id);
                }
            }
            Op::Schedule { stop_every } => {
                self.schedule(stop_every);
            }
            Op::Abort { pick } => {
                if let Some(id) = self.live(pick) {
                    assert!(self.s.abort(id));
                }
            }
            Op::Scratch { pick, rows } => {
                if let Some(id) = self.live(pick) {
                    let fits = rows < self.s.config().max_num_batched_tokens;
                    assert_eq!(self.s.request_scratch_rows(id, rows).is_ok(), fits);
                }
            }
            Op::Lookahead { pick, slots } => {
                if let Some(id) = self.live(pick) {
                    let _ = self.s.set_lookahead_slots(id, slots);
                }
            }
        }
        self.s.check_invariants().unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_under_random_operations(
        config in scheduler_config(),
        ops in proptest::collection::vec(op(), 200),
    ) {
        let mut d = Driver { s: Scheduler::new(config).unwrap(), ids: Vec::new(), next_id: 0, tick: 0 };
        for op in &ops {
            d.apply(op);
        }

        // Everything accepted must drain in bounded time: nothing waits forever.
        let mut steps = 0;
        while d.s.has_unfinished() {
            d.schedule(u32::MAX);
            d.s.check_invariants().unwrap();
            steps += 1;
            prop_assert!(steps < 5_000, "no progress: {} running, {} waiting", d.s.num_running(), d.s.num_waiting());
        }
        prop_assert_eq!(d.s.num_free_blocks(), d.s.num_total_blocks());

        // Again with aborts instead of draining.
        for op in &ops {
            d.apply(op);
        }
        let live: Vec<SeqId> = d.ids.iter().copied().filter(|&id| d.s.get(id).is_some()).collect();
        for id in live {
            prop_assert!(d.s.abort(id));
        }
        d.s.check_invariants().unwrap();
        prop_assert!(!d.s.has_unfinished());
        prop_assert_eq!(d.s.num_free_blocks(), d.s.num_total_blocks());
    }
}
