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
            out.scheduled[..3].iter().map(|r| (r.seq_id, r.token_ids.len(), r.needs_sample)).collect();
        assert_eq!(decodes, vec![(1, 1, true), (2, 1, true), (3, 1, true)]);
        let chunk = &out.scheduled[3];
        assert_eq!(chunk.seq_id, 4);
        assert_eq!(chunk.context_len, context_len);
        assert_eq!(chunk.token_ids.len(), n);
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
    let rows: Vec<_> = out.scheduled.iter().map(|r| (r.seq_id, r.token_ids.len())).collect();
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
    let rows: Vec<_> = out.scheduled.iter().map(|r| (r.seq_id, r.token_ids.len())).collect();
    assert_eq!(rows, vec![(1, 1), (2, 1), (3, 1)]);
    assert!(!out.scheduled[2].needs_sample);
}
