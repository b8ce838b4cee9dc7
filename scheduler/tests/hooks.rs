mod common;

use common::{config, new_seq, step};
use entrobatch_scheduler::Scheduler;

#[test]
fn scratch_rows_count_against_the_budget_once() {
    let mut s = Scheduler::new(config(10, 8, 4, 64)).unwrap();
    s.add(new_seq(1, 2, 50)).unwrap();
    step(&mut s);
    s.add(new_seq(2, 30, 5)).unwrap();
    s.request_scratch_rows(1, 4).unwrap();
    let out = step(&mut s);
    assert_eq!((out.scheduled[0].seq_id, out.scheduled[0].num_query_tokens, out.scheduled[0].scratch_rows), (1, 1, 4));
    assert_eq!(out.scheduled[1].num_query_tokens, 5, "prefill gets what the scratch rows left");
    assert_eq!(out.num_batched_tokens, 10);
    assert_eq!(s.get(1).unwrap().scratch_rows(), 0);

    let out = step(&mut s);
    assert_eq!(out.scheduled[0].scratch_rows, 0, "granted once, then reset");
    assert_eq!(out.scheduled[1].num_query_tokens, 9);
}

#[test]
fn scratch_rows_that_do_not_fit_wait_for_a_later_step() {
    let mut s = Scheduler::new(config(4, 8, 4, 64)).unwrap();
    s.add(new_seq(1, 1, 50)).unwrap();
    s.add(new_seq(2, 1, 50)).unwrap();
    step(&mut s);
    s.request_scratch_rows(2, 3).unwrap();
    let out = step(&mut s);
    assert_eq!(out.scheduled.iter().map(|r| r.seq_id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(s.get(2).unwrap().scratch_rows(), 3, "still pending");
    s.abort(1);
    let out = step(&mut s);
    assert_eq!((out.scheduled[0].seq_id, out.scheduled[0].scratch_rows), (2, 3));
    assert_eq!(out.num_batched_tokens, 4);
}

#[test]
fn lookahead_slots_extend_the_block_table() {
    let mut s = Scheduler::new(config(64, 8, 4, 64)).unwrap();
    s.add(new_seq(1, 3, 20)).unwrap();
    s.set_lookahead_slots(1, 6).unwrap();
    step(&mut s);
    assert_eq!(s.get(1).unwrap().block_table_ids(0).len(), 3, "3 tokens + 6 lookahead slots");
    assert!(s.slot(1, 0, 8).is_some());
    assert!(s.slot(1, 0, 12).is_none());

    // Coverage moves with the sequence: exactly enough blocks for computed tokens + 6.
    for _ in 0..6 {
        step(&mut s);
        let seq = s.get(1).unwrap();
        assert_eq!(seq.block_table_ids(0).len(), (seq.num_computed_tokens() + 6).div_ceil(4));
    }
    assert_eq!(s.get(1).unwrap().block_table_ids(0).len(), 4);
}

#[test]
fn scratch_rows_alone_schedule_a_caught_up_sequence() {
    // MTI: after a triggered step the sequence has no new token, only unconditional rows.
    let mut s = Scheduler::new(config(16, 8, 4, 64)).unwrap();
    s.add(new_seq(1, 3, 10)).unwrap();
    let out = s.schedule();
    assert!(out.scheduled[0].needs_sample);
    s.request_scratch_rows(1, 2).unwrap();
    let out = s.schedule();
    assert_eq!(out.scheduled.len(), 1);
    let row = &out.scheduled[0];
    assert_eq!((row.num_query_tokens, row.scratch_rows, row.context_len), (0, 2, 3));
    assert_eq!(out.num_batched_tokens, 2);
    let out = s.schedule();
    assert!(out.scheduled.is_empty(), "nothing pending once the rows ran");
}

#[test]
fn scratch_rows_that_never_fit_beside_a_prefill_do_not_block_it() {
    let mut s = Scheduler::new(config(4, 8, 4, 64)).unwrap();
    s.add(new_seq(1, 12, 10)).unwrap();
    s.schedule();
    s.request_scratch_rows(1, 3).unwrap();
    let out = s.schedule();
    assert_eq!((out.scheduled[0].num_query_tokens, out.scheduled[0].scratch_rows), (4, 0));
    assert_eq!(s.get(1).unwrap().scratch_rows(), 3, "still pending");
}
