mod common;

use common::{config, new_seq, step};
use entrobatch_scheduler::{FinishReason, Scheduler};

#[test]
fn one_budget_splits_into_decodes_and_a_prefill_chunk() {
    let mut s = Scheduler::new(config(10, 8, 4, 64)).unwrap();
    for id in 1..=3 {
        s.add(new_seq(id, 3, 50)).unwrap();
    }
    let first = step(&mut s);
    assert_eq!(first.num_batched_tokens, 9);
    assert!(first.scheduled.iter().all(|r| r.needs_sample));

    s.add(new_seq(4, 20, 5)).unwrap();
    let expected = [(0, 7, false), (7, 7, false), (14, 6, true)];
    for (context_len, n, needs_sample) in expected {
        let out = step(&mut s);
        let decodes: Vec<_> =
            out.scheduled[..3].iter().map(|r| (r.seq_id, r.num_query_tokens, r.needs_sample)).collect();
        assert_eq!(decodes, vec![(1, 1, true), (2, 1, true), (3, 1, true)]);
        let chunk = &out.scheduled[3];
        assert_eq!(chunk.seq_id, 4);
        assert_eq!(chunk.context_len, context_len);
        assert_eq!(chunk.num_query_tokens, n);
        assert_eq!(chunk.needs_sample, needs_sample);
        assert_eq!(out.num_batched_tokens, 3 + n);
    }
    assert_eq!(s.get(4).unwrap().num_output_tokens(), 1);
}

#[test]
fn decodes_first_and_max_num_seqs_caps_admission() {
    let mut s = Scheduler::new(config(16, 2, 4, 64)).unwrap();
    for id in 1..=3 {
        s.add(new_seq(id, 2, 50)).unwrap();
    }
    let out = step(&mut s);
    assert_eq!(out.scheduled.iter().map(|r| r.seq_id).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!((s.num_running(), s.num_waiting()), (2, 1));
    // Still capped while both run.
    let out = step(&mut s);
    assert_eq!(out.scheduled.iter().map(|r| r.seq_id).collect::<Vec<_>>(), vec![1, 2]);

    s.finish(1, FinishReason::Stop).unwrap();
    let out = step(&mut s);
    let rows: Vec<_> = out.scheduled.iter().map(|r| (r.seq_id, r.num_query_tokens)).collect();
    assert_eq!(rows, vec![(2, 1), (3, 2)]);
}

#[test]
fn tight_budget_still_serves_running_decodes_before_prefill() {
    let mut s = Scheduler::new(config(3, 8, 4, 64)).unwrap();
    s.add(new_seq(1, 1, 50)).unwrap();
    s.add(new_seq(2, 1, 50)).unwrap();
    step(&mut s);
    s.add(new_seq(3, 5, 50)).unwrap();
    let out = step(&mut s);
    let rows: Vec<_> = out.scheduled.iter().map(|r| (r.seq_id, r.num_query_tokens)).collect();
    assert_eq!(rows, vec![(1, 1), (2, 1), (3, 1)]);
    assert!(!out.scheduled[2].needs_sample);
}

#[test]
fn prefill_beside_decodes_is_capped_and_a_lone_prefill_takes_the_whole_budget() {
    let mut config = config(64, 8, 4, 256);
    config.max_prefill_tokens_with_decodes = 8;
    let mut s = Scheduler::new(config).unwrap();
    // Nothing decodes yet: the first prompt gets the whole budget.
    s.add(new_seq(1, 40, 50)).unwrap();
    let out = step(&mut s);
    assert_eq!(out.scheduled[0].num_query_tokens, 40);

    // Sequence 1 now decodes, so two arrivals share 8 prefill tokens per step, first come
    // first served, and the decode is never cut.
    s.add(new_seq(2, 12, 50)).unwrap();
    s.add(new_seq(3, 12, 50)).unwrap();
    let rows = |out: &entrobatch_scheduler::SchedulerOutput| {
        out.scheduled.iter().map(|r| (r.seq_id, r.num_query_tokens)).collect::<Vec<_>>()
    };
    assert_eq!(rows(&step(&mut s)), vec![(1, 1), (2, 8)]);
    assert_eq!(rows(&step(&mut s)), vec![(1, 1), (2, 4), (3, 4)]);
    assert_eq!(rows(&step(&mut s)), vec![(1, 1), (2, 1), (3, 8)]);
    // Sequence 3's last prompt token completes its prefill; then only decodes remain.
    assert_eq!(rows(&step(&mut s)), vec![(1, 1), (2, 1), (3, 1)]);
}

#[test]
fn recomputation_after_preemption_counts_as_prefill() {
    // 16 blocks of 4 slots. Sequence 1 alone ends up needing 15 of them, so the latest arrival
    // (3) is preempted, and re-admitted when 2 finishes while 1 still decodes.
    let mut config = config(64, 8, 4, 16);
    config.max_prefill_tokens_with_decodes = 3;
    let mut s = Scheduler::new(config).unwrap();
    s.add(new_seq(1, 4, 56)).unwrap();
    s.add(new_seq(2, 4, 20)).unwrap();
    s.add(new_seq(3, 4, 20)).unwrap();
    let mut victim = None;
    let mut recompute_chunks = 0;
    for _ in 0..300 {
        let out = step(&mut s);
        if let Some(&id) = out.preempted.first() {
            victim = Some(id);
        }
        let Some(victim) = victim else { continue };
        let others_decode = out.scheduled.iter().any(|r| r.seq_id != victim && r.num_query_tokens == 1);
        for row in out.scheduled.iter().filter(|r| r.seq_id == victim && r.num_query_tokens > 1) {
            if others_decode {
                // Its generated tokens are past the prompt, yet they are recomputed as a prefill.
                assert!(row.num_query_tokens <= 3, "recompute chunk of {} beside decodes", row.num_query_tokens);
                recompute_chunks += 1;
            }
        }
        if !s.has_unfinished() {
            break;
        }
    }
    assert_eq!(victim, Some(3), "the pool was too small for all three");
    assert!(recompute_chunks > 1, "the victim recomputed in capped chunks beside decodes");
    assert!(!s.has_unfinished(), "all finished");
}
