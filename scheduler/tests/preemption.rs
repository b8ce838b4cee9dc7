mod common;

use common::{config, new_seq, prompt, step};
use entrobatch_scheduler::{FinishReason, Scheduler, SequenceStatus};

#[test]
fn latest_arrival_is_preempted_first_and_recomputes_later() {
    // 4 blocks of 4 slots: three 4-token prompts fit, but not once they all grow.
    let mut s = Scheduler::new(config(64, 8, 4, 4)).unwrap();
    for id in 1..=3 {
        s.add(new_seq(id, 4, 8)).unwrap();
    }
    let out = step(&mut s);
    assert_eq!(out.scheduled.len(), 3);
    assert_eq!(s.num_free_blocks(), 1);
    s.add(new_seq(4, 1, 1)).unwrap();

    // Seq 1 takes the last block; seq 2 needs one too, so seq 3 (latest) goes.
    let out = step(&mut s);
    assert_eq!(out.preempted, vec![3]);
    assert_eq!(
        out.scheduled.iter().map(|r| r.seq_id).collect::<Vec<_>>(),
        vec![1, 2],
        "no admission after a preemption"
    );
    assert_eq!(s.waiting_ids().collect::<Vec<_>>(), vec![3, 4], "victim goes to the front");
    assert_eq!(s.num_preemptions(), 1);
    let victim = s.get(3).unwrap();
    assert_eq!(victim.status(), SequenceStatus::Waiting);
    assert_eq!(victim.num_computed_tokens(), 0);
    assert!(victim.block_table_ids(0).is_empty());
    let mut expected = prompt(3, 4);
    expected.push(7);
    assert_eq!(victim.token_ids(), &expected[..], "generated tokens survive preemption");

    // The pool stays full while 1 and 2 run: head-of-line blocking holds 3 and 4.
    let out = step(&mut s);
    assert!(out.preempted.is_empty());
    assert_eq!(out.scheduled.len(), 2);
    assert_eq!(s.num_waiting(), 2);

    s.finish(1, FinishReason::Stop).unwrap();
    s.finish(2, FinishReason::Stop).unwrap();
    let out = s.schedule();
    // Both go in; the shorter prefill comes first in the step.
    assert_eq!(out.scheduled.iter().map(|r| r.seq_id).collect::<Vec<_>>(), vec![4, 3]);
    let resumed = &out.scheduled[1];
    assert_eq!((resumed.seq_id, resumed.context_len), (3, 0));
    assert_eq!(s.query_token_ids(resumed), expected, "prompt + generated recomputed in one go");
    assert!(resumed.needs_sample);
    s.check_invariants().unwrap();
}

#[test]
fn a_sequence_that_is_itself_the_latest_arrival_stops_serving() {
    let mut s = Scheduler::new(config(64, 8, 4, 3)).unwrap();
    s.add(new_seq(1, 4, 8)).unwrap();
    s.add(new_seq(2, 4, 4)).unwrap();
    step(&mut s);
    assert_eq!(s.num_free_blocks(), 1);
    let out = step(&mut s);
    assert_eq!(out.scheduled.iter().map(|r| r.seq_id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(out.preempted, vec![2]);
    assert_eq!(s.get(2).unwrap().status(), SequenceStatus::Waiting);
    assert_eq!(s.num_running(), 1);
}

#[test]
fn preempted_sequences_finish_once_the_pool_frees_up() {
    let mut s = Scheduler::new(config(8, 8, 2, 6)).unwrap();
    for id in 1..=4 {
        s.add(new_seq(id, 3, 6)).unwrap();
    }
    let mut steps = 0;
    while s.has_unfinished() {
        step(&mut s);
        steps += 1;
        assert!(steps < 200, "no progress");
    }
    assert!(s.num_preemptions() > 0, "the pool was meant to be too small for everyone");
    assert_eq!(s.num_free_blocks(), s.num_total_blocks());
}
