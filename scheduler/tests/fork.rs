//! Forking a sequence for a branch and adopting the kept child back.

mod common;

use common::{config, new_seq};
use entrobatch_scheduler::{BlockCopy, FinishReason, Scheduler, SchedulerError};

/// Runs `id` until its tokens are all computed (a schedule without the append that follows).
fn catch_up(s: &mut Scheduler, id: u64) {
    while s.get(id).is_some_and(|q| q.num_computed_tokens() < q.num_tokens()) {
        s.schedule();
    }
}

#[test]
fn a_child_shares_full_blocks_and_copies_the_partial_one() {
    let mut s = Scheduler::new(config(64, 8, 4, 16)).unwrap();
    s.add(new_seq(1, 10, 8)).unwrap();
    catch_up(&mut s, 1);
    let free = s.num_free_blocks();
    let parent_blocks = s.get(1).unwrap().block_table_ids(0).to_vec();
    let copies = s.fork(1, 2).unwrap();
    let child = s.get(2).unwrap();
    let child_blocks = child.block_table_ids(0).to_vec();
    // 10 tokens in blocks of 4: two full blocks shared, the third (2 tokens) copied.
    assert_eq!(child_blocks[..2], parent_blocks[..2]);
    assert_eq!(copies, vec![BlockCopy { src: parent_blocks[2], dst: child_blocks[2] }]);
    assert_eq!(child_blocks.len(), 3);
    assert_eq!(s.num_free_blocks(), free - 1, "only the copy is a new block");
    assert_eq!((child.num_computed_tokens(), child.token_ids()), (10, s.get(1).unwrap().token_ids()));
    for id in [1, 2] {
        assert_eq!(s.block(parent_blocks[0]).unwrap().ref_count(), 2, "{id}");
    }
    s.check_invariants().unwrap();

    // Each path decodes its own token into its own partial block.
    s.append_token(1, 100).unwrap();
    s.append_token(2, 200).unwrap();
    let out = s.schedule();
    assert_eq!(out.scheduled.len(), 2);
    for row in &out.scheduled {
        let slot = s.slot(row.seq_id, 0, 10).unwrap() as u32 / 4;
        let expected = if row.seq_id == 1 { parent_blocks[2] } else { child_blocks[2] };
        assert_eq!(slot, expected, "position 10 of {}", row.seq_id);
    }
    s.check_invariants().unwrap();

    // The child wins: the parent takes its tokens and blocks, and its own partial block is freed.
    s.adopt(1, 2).unwrap();
    assert!(s.get(2).is_none());
    let parent = s.get(1).unwrap();
    assert_eq!(parent.output_token_ids(), &[200]);
    assert_eq!(parent.block_table_ids(0), &child_blocks[..]);
    assert_eq!(s.block(parent_blocks[2]).unwrap().ref_count(), 0);
    assert_eq!(s.block(parent_blocks[0]).unwrap().ref_count(), 1);
    assert_eq!(s.num_running(), 1);
    s.check_invariants().unwrap();
    s.finish(1, FinishReason::Stop).unwrap();
    assert_eq!(s.num_free_blocks(), s.num_total_blocks());
}

#[test]
fn a_fork_at_a_block_boundary_copies_nothing() {
    let mut s = Scheduler::new(config(64, 8, 4, 16)).unwrap();
    s.add(new_seq(1, 8, 8)).unwrap();
    catch_up(&mut s, 1);
    assert_eq!(s.fork(1, 2).unwrap(), vec![]);
    assert_eq!(s.get(2).unwrap().block_table_ids(0), &s.get(1).unwrap().block_table_ids(0)[..2]);
    s.check_invariants().unwrap();
}

#[test]
fn forks_are_refused_without_room_and_change_nothing() {
    let mut s = Scheduler::new(config(64, 2, 4, 16)).unwrap();
    s.add(new_seq(1, 6, 8)).unwrap();
    assert!(matches!(s.fork(1, 9), Err(SchedulerError::ForkRefused { .. })), "waiting, nothing computed");
    catch_up(&mut s, 1);
    assert_eq!(s.spare_seq_slots(), 1);
    s.fork(1, 2).unwrap();
    assert_eq!(s.spare_seq_slots(), 0);
    assert!(matches!(s.fork(1, 3), Err(SchedulerError::ForkRefused { .. })), "max_num_seqs");
    assert_eq!(s.fork(1, 2), Err(SchedulerError::DuplicateId(2)));
    assert!(s.abort(2));
    s.add(new_seq(4, 6, 8)).unwrap();
    assert_eq!(s.spare_seq_slots(), 0, "a waiting request comes first");
    s.check_invariants().unwrap();
}

#[test]
fn a_preempted_child_is_adopted_as_a_recompute() {
    let mut s = Scheduler::new(config(64, 8, 4, 7)).unwrap();
    s.add(new_seq(1, 7, 8)).unwrap();
    s.add(new_seq(3, 12, 8)).unwrap();
    catch_up(&mut s, 3);
    s.fork(1, 2).unwrap();
    assert_eq!(s.num_free_blocks(), 1);
    // The child is the latest arrival: when the others grow, it is the one preempted.
    let mut preempted = Vec::new();
    for id in [1, 2, 3] {
        s.append_token(id, 5).unwrap();
    }
    for _ in 0..3 {
        let out = s.schedule();
        preempted.extend(out.preempted.iter().copied());
        for row in out.scheduled.iter().filter(|r| r.needs_sample) {
            s.append_token(row.seq_id, 6).unwrap();
        }
        s.check_invariants().unwrap();
    }
    assert_eq!(preempted, vec![2]);
    let child_tokens = s.get(2).unwrap().token_ids().to_vec();
    s.adopt(1, 2).unwrap();
    let parent = s.get(1).unwrap();
    assert_eq!((parent.num_computed_tokens(), parent.token_ids()), (0, &child_tokens[..]));
    assert!(s.waiting_ids().any(|id| id == 1) && s.running_ids().all(|id| id != 1));
    s.check_invariants().unwrap();
}

#[test]
fn continuations_decode_within_their_share_while_a_request_that_does_not_branch_runs() {
    let mut cfg = config(64, 16, 4, 64);
    cfg.branch_row_share = 0.25;
    let mut s = Scheduler::new(cfg).unwrap();
    for id in 1..=9 {
        s.add(new_seq(id, 6, 50)).unwrap();
    }
    for id in 1..=9 {
        catch_up(&mut s, id);
    }
    // Request 9 branches into three continuations beside eight plain requests.
    for child in 100..103 {
        s.fork(9, child).unwrap();
    }
    let decode_step = |s: &mut Scheduler, pending: &[u64]| {
        for &id in pending {
            s.append_token(id, 7).unwrap();
        }
        let out = s.schedule();
        let mut ids: Vec<u64> = out.scheduled.iter().map(|r| r.seq_id).collect();
        ids.sort_unstable();
        ids
    };
    let plain: Vec<u64> = (1..=9).collect();
    let all: Vec<u64> = plain.iter().copied().chain(100..103).collect();
    // Nine other rows: a quarter of them is two rows, taken by the oldest continuations.
    assert_eq!(decode_step(&mut s, &all), [plain.clone(), vec![100, 101]].concat());
    // The one left out keeps its token pending and gets its turn when an older one has none.
    let without_100: Vec<u64> = all.iter().copied().filter(|&id| id != 100 && id != 102).collect();
    assert_eq!(decode_step(&mut s, &without_100), [plain.clone(), vec![101, 102]].concat());
    s.check_invariants().unwrap();

    // With only the branching request left, nobody is slowed: every continuation decodes.
    for id in 1..=8 {
        s.finish(id, FinishReason::Stop).unwrap();
    }
    assert_eq!(decode_step(&mut s, &[9, 100, 101, 102]), vec![9, 100, 101, 102]);
    s.check_invariants().unwrap();
}
