mod common;

use common::{config, step};
use entrobatch_scheduler::{FinishReason, NewSequence, Scheduler, SchedulerConfig};

const BS: usize = 4;

fn cached_config(num_blocks: usize) -> SchedulerConfig {
    let mut cfg = config(64, 8, BS, num_blocks);
    cfg.enable_prefix_caching = true;
    cfg
}

/// A 3-block shared prefix followed by `tail`.
fn with_prefix(id: u64, tail: &[u32]) -> NewSequence {
    let mut tokens: Vec<u32> = (100..112).collect();
    tokens.extend_from_slice(tail);
    NewSequence { id, prompt_token_ids: tokens, max_tokens: 4, skip_prefix_cache: false, ttft_target: None }
}

#[test]
fn sequences_with_a_common_prefix_share_blocks() {
    let mut s = Scheduler::new(cached_config(16)).unwrap();
    s.add(with_prefix(1, &[1])).unwrap();
    step(&mut s);
    s.add(with_prefix(2, &[2, 2])).unwrap();
    s.add(with_prefix(3, &[])).unwrap(); // exactly the prefix: the cap leaves its last block to recompute
    let out = step(&mut s);
    let a = s.get(1).unwrap().block_table_ids(0).to_vec();
    let b = s.get(2).unwrap().block_table_ids(0).to_vec();
    let c = s.get(3).unwrap().block_table_ids(0).to_vec();
    assert_eq!(a[..3], b[..3]);
    assert_eq!(a[..2], c[..2]);
    assert_ne!(a[2], c[2]);
    assert_eq!(s.block(a[0]).unwrap().ref_count(), 3);
    assert_eq!(s.block(a[2]).unwrap().ref_count(), 2);
    let rows: Vec<_> = out.scheduled.iter().map(|r| (r.seq_id, r.context_len, r.num_query_tokens)).collect();
    assert_eq!(rows, vec![(1, 13, 1), (2, 12, 2), (3, 8, 4)]);
    let stats = s.prefix_cache_stats();
    assert_eq!((stats.queries, stats.hits), (13 + 14 + 12, 12 + 8));

    for id in 1..=3 {
        s.finish(id, FinishReason::Stop).unwrap();
    }
    assert_eq!(s.num_free_blocks(), s.num_total_blocks());
    s.add(with_prefix(4, &[9, 9, 9])).unwrap();
    let out = s.schedule();
    assert_eq!(out.scheduled[0].context_len, 12);
    assert_eq!(out.scheduled[0].seq_id, 4);
    assert_eq!(s.get(4).unwrap().block_table_ids(0)[..3], a[..3]);
    s.check_invariants().unwrap();
}

#[test]
fn cached_blocks_are_evicted_only_when_needed_empty_blocks_then_tails_first() {
    let mut s = Scheduler::new(cached_config(6)).unwrap();
    s.add(with_prefix(1, &[1])).unwrap();
    step(&mut s);
    let a = s.get(1).unwrap().block_table_ids(0).to_vec();
    s.finish(1, FinishReason::Stop).unwrap();
    assert_eq!(s.num_cached_blocks(), 3);
    let hashes: Vec<_> = a[..3].iter().map(|&b| s.block(b).unwrap().hash()).collect();
    assert!(hashes.iter().all(Option::is_some));

    // Two never-used blocks are still free: the cache is left alone.
    s.add(NewSequence {
        id: 2,
        prompt_token_ids: vec![5; 8],
        max_tokens: 1,
        skip_prefix_cache: false,
        ttft_target: None,
    })
    .unwrap();
    s.schedule();
    assert_eq!(s.num_cached_blocks(), 3);
    let b = s.get(2).unwrap().block_table_ids(0).to_vec();
    assert_eq!(b[0], a[3], "seq 1's uncached tail is reused before a never-used block");
    s.abort(2);

    // Blocks that hold nothing cached are reused first, most recently freed first: seq 1's
    // tail and seq 2's blocks, then the last never-used one; only then is a cached block
    // evicted, seq 1's last prefix block before the ones in front of it.
    s.add(NewSequence {
        id: 3,
        prompt_token_ids: vec![6; 16],
        max_tokens: 1,
        skip_prefix_cache: false,
        ttft_target: None,
    })
    .unwrap();
    s.schedule();
    let c = s.get(3).unwrap().block_table_ids(0).to_vec();
    assert_eq!(c[..2], b[..]);
    assert!(!a.contains(&c[2]) && !b.contains(&c[2]), "the never-used block before any cached one");
    assert_eq!(c[3], a[2]);
    assert_eq!(s.block(a[2]).unwrap().hash(), None);
    assert_eq!(s.block(a[1]).unwrap().hash(), hashes[1]);
    assert_eq!(s.num_cached_blocks(), 2);
    s.abort(3);

    s.add(with_prefix(4, &[4])).unwrap();
    let out = s.schedule();
    assert_eq!(out.scheduled[0].context_len, 8);
    assert_eq!(out.scheduled[0].seq_id, 4);
    assert_eq!(s.get(4).unwrap().block_table_ids(0)[..2], a[..2]);
}

#[test]
fn preempted_sequences_hit_their_own_blocks_on_resume() {
    let mut s = Scheduler::new(cached_config(4)).unwrap();
    s.add(NewSequence {
        id: 1,
        prompt_token_ids: (0..4).collect(),
        max_tokens: 8,
        skip_prefix_cache: false,
        ttft_target: None,
    })
    .unwrap();
    s.add(NewSequence {
        id: 2,
        prompt_token_ids: (10..18).collect(),
        max_tokens: 4,
        skip_prefix_cache: false,
        ttft_target: None,
    })
    .unwrap();
    // Seq 2 needs a third block for its first generated token while seq 1 grows into the
    // last free one, so seq 2 (latest arrival) preempts itself.
    let mut preempted = false;
    for _ in 0..3 {
        if step(&mut s).preempted == vec![2] {
            preempted = true;
            break;
        }
    }
    assert!(preempted);
    s.finish(1, FinishReason::Stop).unwrap();
    let out = s.schedule();
    assert_eq!(out.scheduled[0].seq_id, 2);
    assert_eq!(out.scheduled[0].context_len, 8, "its two full prompt blocks were cached before preemption");
}

#[test]
fn a_failed_step_does_not_poison_the_cache() {
    let mut s = Scheduler::new(cached_config(16)).unwrap();
    s.add(with_prefix(1, &[1])).unwrap();
    s.schedule();
    s.finish(1, FinishReason::Error).unwrap();
    assert_eq!(s.num_cached_blocks(), 0);
    s.add(with_prefix(2, &[1])).unwrap();
    assert_eq!(s.schedule().scheduled[0].context_len, 0);
}

#[test]
fn a_sequence_that_skips_the_prefix_cache_computes_its_whole_prompt() {
    let mut s = Scheduler::new(cached_config(16)).unwrap();
    s.add(with_prefix(1, &[1])).unwrap();
    step(&mut s);
    let cached = s.get(1).unwrap().block_table_ids(0).to_vec();
    s.add(NewSequence { skip_prefix_cache: true, ..with_prefix(2, &[2]) }).unwrap();
    let out = s.schedule();
    let row = out.scheduled.iter().find(|r| r.seq_id == 2).expect("scheduled");
    // All 13 prompt tokens are query rows, from position 0, in blocks of its own.
    assert_eq!((row.context_len, row.num_query_tokens), (0, 13));
    let own = s.get(2).unwrap().block_table_ids(0).to_vec();
    assert!(own.iter().all(|b| !cached.contains(b)), "{own:?} shares with {cached:?}");
    assert_eq!(s.get(2).unwrap().num_cached_prompt_tokens(), 0);
    s.check_invariants().unwrap();
}

#[test]
fn the_prefix_probe_sees_what_admission_would_hit() {
    let mut s = Scheduler::new(cached_config(16)).unwrap();
    let probe = s.prefix_probe();
    let prompt = with_prefix(1, &[1]).prompt_token_ids;
    assert_eq!(probe.cached_tokens(&prompt), 0, "nothing computed yet");
    s.add(with_prefix(1, &[1])).unwrap();
    step(&mut s);
    // Computed blocks are registered once their step is committed, at the next schedule.
    step(&mut s);
    // Another thread's view: the three shared blocks, never the block holding the last token.
    let from_another_thread = std::thread::spawn({
        let probe = probe.clone();
        move || {
            (
                probe.cached_tokens(&with_prefix(2, &[2, 2]).prompt_token_ids),
                probe.cached_tokens(&(100..112).collect::<Vec<u32>>()),
            )
        }
    });
    assert_eq!(from_another_thread.join().unwrap(), (12, 8));
    assert_eq!(probe.cached_tokens(&[7; 20]), 0, "another prompt hits nothing");
    // Admission agrees: the second prompt computes only what the probe did not find.
    s.add(with_prefix(2, &[2, 2])).unwrap();
    let out = step(&mut s);
    assert!(out.scheduled.iter().any(|r| r.seq_id == 2 && r.context_len == 12 && r.num_query_tokens == 2));
}
