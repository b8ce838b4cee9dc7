mod common;

use common::{config, new_seq, step};
use entrobatch_scheduler::{FinishReason, Scheduler, SequenceStatus};

#[test]
fn every_block_comes_back_after_finish_and_abort() {
    for caching in [false, true] {
        let mut cfg = config(6, 8, 4, 16);
        cfg.enable_prefix_caching = caching;
        let mut s = Scheduler::new(cfg).unwrap();
        for id in 1..=6 {
            s.add(new_seq(id, 3 + id as usize, 6)).unwrap();
        }
        for _ in 0..4 {
            step(&mut s);
        }
        let running: Vec<_> = s.running_ids().collect();
        let waiting: Vec<_> = s.waiting_ids().collect();
        assert!(!running.is_empty() && !waiting.is_empty());
        s.finish(running[0], FinishReason::Stop).unwrap();
        assert!(s.abort(waiting[0]));
        assert!(!s.abort(waiting[0]), "second abort finds nothing");
        while s.has_unfinished() {
            step(&mut s);
        }
        assert_eq!(s.num_free_blocks(), s.num_total_blocks());
        s.check_invariants().unwrap();
    }
}

#[test]
fn aborting_a_running_sequence_frees_its_blocks_at_once() {
    let mut s = Scheduler::new(config(64, 8, 4, 16)).unwrap();
    s.add(new_seq(1, 10, 4)).unwrap();
    s.add(new_seq(2, 5, 4)).unwrap();
    step(&mut s);
    let seq = s.get(1).unwrap();
    assert_eq!(seq.status(), SequenceStatus::Running);
    let held = seq.block_table_ids(0).len();
    assert_eq!(held, 3);
    let free_before = s.num_free_blocks();
    assert!(s.abort(1));
    assert_eq!(s.num_free_blocks(), free_before + held);
    assert!(s.get(1).is_none());
    assert_eq!(s.num_running(), 1);
    s.check_invariants().unwrap();
}

#[test]
fn dropping_the_scheduler_with_live_sequences_is_fine() {
    let mut s = Scheduler::new(config(4, 8, 4, 8)).unwrap();
    for id in 1..=4 {
        s.add(new_seq(id, 6, 4)).unwrap();
    }
    step(&mut s);
    step(&mut s);
    assert!(s.num_running() > 0 && s.num_waiting() > 0);
    drop(s);
}

#[test]
fn slots_follow_the_block_table() {
    let mut s = Scheduler::new(config(64, 8, 4, 16)).unwrap();
    s.add(new_seq(1, 3, 4)).unwrap(); // takes a block before seq 2 so ids differ from positions
    s.add(new_seq(2, 6, 4)).unwrap();
    let out = s.schedule();
    let row = &out.scheduled[1];
    let table = s.get(2).unwrap().block_table_ids(0).to_vec();
    assert_eq!((row.seq_id, row.positions()), (2, 0..6));
    assert_eq!(s.slot_mapping(row, 0).unwrap()[5], table[1] as i64 * 4 + 1);
    assert_eq!(s.slot(2, 0, 5), Some(table[1] as i64 * 4 + 1));
    assert_eq!(s.slot(2, 0, 8), None, "beyond the table");
    assert_eq!(s.slot(99, 0, 0), None);
}
