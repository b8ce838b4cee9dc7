//! Random operation sequences on tiny pools and budgets, with a mix of decoding strategies
//! played by a fake runner (common/fake_runner.rs) and latency targets or none; invariants
//! checked after every operation and step, and at the end nothing lost: every request
//! finished, was aborted or was rejected with a reason, and every block is free.

mod common;

use std::time::Duration;

use common::fake_runner::{check_ownership, Driver, Kind};
use entrobatch_scheduler::{LatencyTargets, Scheduler, SchedulerConfig};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// Tokens come from a tiny alphabet when `shared` so prefixes collide and hit the cache.
    /// Lengths include 0 and values past `max_model_len`, which must be rejected.
    Add {
        prompt_len: usize,
        max_tokens: usize,
        shared: bool,
        salt: u32,
        kind: Kind,
        /// The request's own TTFT target (an API client's), in ms.
        ttft_target_ms: Option<u64>,
    },
    Schedule {
        stop_every: u32,
    },
    Abort {
        pick: usize,
    },
    /// Chaos on top of the strategies: rows and slots nobody asked for.
    Scratch {
        pick: usize,
        rows: usize,
    },
    Lookahead {
        pick: usize,
        slots: usize,
    },
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        2 => Just(Kind::Plain),
        1 => Just(Kind::Entropix),
        1 => (1usize..5).prop_map(|rows| Kind::Mti { rows }),
        1 => (1usize..6).prop_map(|window| Kind::Wedlm { window }),
        2 => (1usize..6).prop_map(|draft| Kind::Speculative { draft }),
        2 => Just(Kind::Branch),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..24, 0usize..24, any::<bool>(), 0u32..4, kind(), proptest::option::weighted(0.2, 5u64..300))
            .prop_map(|(prompt_len, max_tokens, shared, salt, kind, ttft_target_ms)| Op::Add {
                prompt_len,
                max_tokens,
                shared,
                salt,
                kind,
                ttft_target_ms
            }),
        6 => (4u32..40).prop_map(|stop_every| Op::Schedule { stop_every }),
        1 => any::<usize>().prop_map(|pick| Op::Abort { pick }),
        1 => (any::<usize>(), 0usize..4).prop_map(|(pick, rows)| Op::Scratch { pick, rows }),
        1 => (any::<usize>(), 0usize..6).prop_map(|(pick, slots)| Op::Lookahead { pick, slots }),
    ]
}

fn scheduler_config() -> impl Strategy<Value = SchedulerConfig> {
    // One full group (most models), or windowed groups beside it (Gemma 3's pattern), or only
    // windowed ones (Mistral's); the pool grows with the groups so as many sequences fit.
    let windows = prop_oneof![
        Just(vec![None]),
        Just(vec![None, Some(5)]),
        Just(vec![Some(6), None, Some(6)]),
        Just(vec![Some(9)]),
    ];
    // Branch continuations get from a sliver of the rows to more than the others have.
    let branch_row_share = prop_oneof![Just(0.1), Just(0.5), Just(2.0)];
    // Latency targets, planned in time from the step cost the fake runner reports: tight ones
    // leave a step room for a row or two beside the fixed part.
    let ms = Duration::from_millis;
    let latency_targets = prop_oneof![
        2 => Just(LatencyTargets::default()),
        1 => (3u64..60).prop_map(move |tpot| LatencyTargets { ttft: None, tpot: Some(ms(tpot)) }),
        1 => (5u64..400).prop_map(move |ttft| LatencyTargets { ttft: Some(ms(ttft)), tpot: None }),
        1 => (5u64..400, 3u64..60).prop_map(move |(ttft, tpot)| LatencyTargets { ttft: Some(ms(ttft)), tpot: Some(ms(tpot)) }),
    ];
    ((4usize..=12, 1usize..=16, 1usize..=16, 1usize..=6, any::<bool>()), windows, branch_row_share, latency_targets)
        .prop_map(
            |(
                (num_blocks, budget, prefill_cap, max_num_seqs, caching),
                kv_group_windows,
                branch_row_share,
                latency_targets,
            )| {
                SchedulerConfig {
                    max_num_batched_tokens: budget,
                    max_prefill_tokens_with_decodes: prefill_cap,
                    max_num_seqs,
                    block_size: 4,
                    num_blocks: num_blocks * kv_group_windows.len(),
                    max_model_len: 44,
                    kv_group_windows,
                    enable_prefix_caching: caching,
                    latency_targets,
                    branch_row_share,
                }
            },
        )
}

fn apply(d: &mut Driver, op: &Op) {
    match *op {
        Op::Add { prompt_len, max_tokens, shared, salt, kind, ttft_target_ms } => {
            let id = d.next_id as u32;
            let prompt =
                (0..prompt_len as u32).map(|i| if shared { (i / 5 + salt) % 2 } else { id * 100 + i }).collect();
            d.add(prompt, max_tokens, kind, ttft_target_ms.map(Duration::from_millis));
        }
        Op::Schedule { stop_every } => {
            d.step(stop_every);
        }
        Op::Abort { pick } => {
            if let Some(id) = d.pick(pick) {
                d.abort(id);
            }
        }
        Op::Scratch { pick, rows } => {
            // MTI and WeDLM own their requests: withdrawing one from a caught-up sequence
            // would leave it nothing to run, which the engine never does.
            let owned = |id| matches!(d.kinds.get(&id), Some(Kind::Mti { .. } | Kind::Wedlm { .. }));
            if let Some(id) = d.pick(pick).filter(|&id| !owned(id)) {
                let fits = rows < d.s.config().max_num_batched_tokens;
                assert_eq!(d.s.request_scratch_rows(id, rows).is_ok(), fits);
            }
        }
        Op::Lookahead { pick, slots } => {
            if let Some(id) = d.pick(pick) {
                let _ = d.s.set_lookahead_slots(id, slots);
            }
        }
    }
    d.s.check_invariants().unwrap();
    check_ownership(&d.s);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_under_random_operations(
        config in scheduler_config(),
        ops in proptest::collection::vec(op(), 200),
    ) {
        let mut d = Driver::new(Scheduler::new(config).unwrap());
        for op in &ops {
            apply(&mut d, op);
        }

        // Everything accepted must drain in bounded time: nothing waits forever.
        let mut steps = 0;
        while d.s.has_unfinished() {
            d.step(u32::MAX);
            d.s.check_invariants().unwrap();
            steps += 1;
            prop_assert!(steps < 5_000, "no progress: {} running, {} waiting", d.s.num_running(), d.s.num_waiting());
        }
        d.assert_nothing_lost();

        // Again with aborts instead of draining.
        for op in &ops {
            apply(&mut d, op);
        }
        for id in d.live() {
            d.abort(id);
        }
        d.s.check_invariants().unwrap();
        d.assert_nothing_lost();
    }
}
