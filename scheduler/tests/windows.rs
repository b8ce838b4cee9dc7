//! KV cache groups with sliding windows: a windowed group holds a bounded number of blocks
//! however long the sequence grows, gives back nothing its window still reads, and serves
//! prefix-cache hits with only the blocks its window needs.

mod common;

use common::{config, step};
use entrobatch_scheduler::{FinishReason, NewSequence, Scheduler, SchedulerConfig, NULL_BLOCK};

const BS: usize = 4;
const WINDOW: usize = 8;

/// One full-attention group and two windowed ones, as Gemma 3's layers are grouped.
fn windowed_config(num_blocks: usize, caching: bool) -> SchedulerConfig {
    let mut cfg = config(8, 4, BS, num_blocks);
    cfg.kv_group_windows = vec![None, Some(WINDOW), Some(WINDOW)];
    cfg.enable_prefix_caching = caching;
    cfg
}

fn held(s: &Scheduler, id: u64, group: usize) -> usize {
    s.get(id).map_or(0, |seq| seq.block_table_ids(group).iter().filter(|&&b| b != NULL_BLOCK).count())
}

#[test]
fn a_windowed_group_holds_a_bounded_number_of_blocks() {
    let mut s = Scheduler::new(windowed_config(64, false)).unwrap();
    let prompt: Vec<u32> = (0..40).collect();
    s.add(NewSequence { id: 1, prompt_token_ids: prompt, max_tokens: 40, skip_prefix_cache: false, ttft_target: None })
        .unwrap();
    let mut most_windowed = 0;
    while s.has_unfinished() {
        step(&mut s);
        let Some(seq) = s.get(1) else { break };
        let computed = seq.num_computed_tokens();
        assert_eq!(held(&s, 1, 0), seq.block_table_ids(0).len(), "a full group never gives a block back");
        assert!(held(&s, 1, 0) >= computed.div_ceil(BS));
        for group in [1, 2] {
            most_windowed = most_windowed.max(held(&s, 1, group));
            // The window, the step's 8 tokens, and the partial blocks at either end.
            assert!(held(&s, 1, group) <= (WINDOW + 8) / BS + 2, "group {group} holds {}", held(&s, 1, group));
        }
        let used = s.num_total_blocks() - s.num_free_blocks();
        assert_eq!(used, held(&s, 1, 0) + held(&s, 1, 1) + held(&s, 1, 2));
    }
    assert!(most_windowed >= WINDOW / BS, "the windowed tables were used");
    assert_eq!(s.num_free_blocks(), s.num_total_blocks());
}

#[test]
fn the_pool_admits_what_the_windows_leave_room_for() {
    // 80 tokens: 20 blocks in the full group; a windowed group needs at most
    // blocks_for(8 + 8) + 2 = 6, so 32 pages hold it where three full groups would need 60.
    let cfg = windowed_config(32, false);
    assert_eq!(cfg.pages_for(80), 20 + 6 + 6);
    assert!(cfg.check_fits(1, 40, 40, 0).is_ok());
    let all_full = SchedulerConfig { kv_group_windows: vec![None; 3], ..cfg.clone() };
    assert!(all_full.check_fits(1, 40, 40, 0).is_err());
    assert_eq!(cfg.max_tokens_in_cache(), 80);
    let mut s = Scheduler::new(cfg).unwrap();
    s.add(NewSequence {
        id: 1,
        prompt_token_ids: (0..40).collect(),
        max_tokens: 40,
        skip_prefix_cache: false,
        ttft_target: None,
    })
    .unwrap();
    let mut steps = 0;
    while s.has_unfinished() {
        let out = step(&mut s);
        assert!(out.preempted.is_empty(), "the sequence fits alone");
        steps += 1;
        assert!(steps < 200);
    }
    assert_eq!(s.num_preemptions(), 0);
}

#[test]
fn a_prefix_hit_takes_only_the_blocks_a_window_reads() {
    let mut s = Scheduler::new(windowed_config(64, true)).unwrap();
    let prompt: Vec<u32> = (0..33).map(|i| 500 + i).collect();
    s.add(NewSequence {
        id: 1,
        prompt_token_ids: prompt.clone(),
        max_tokens: 1,
        skip_prefix_cache: false,
        ttft_target: None,
    })
    .unwrap();
    while s.has_unfinished() {
        step(&mut s);
    }
    let mut longer = prompt.clone();
    longer.extend([9, 9, 9]);
    s.add(NewSequence { id: 2, prompt_token_ids: longer, max_tokens: 4, skip_prefix_cache: false, ttft_target: None })
        .unwrap();
    let out = s.schedule();
    let row = out.scheduled.iter().find(|r| r.seq_id == 2).expect("admitted");
    // 33 tokens: 8 full blocks, all cached in every group.
    assert_eq!(row.context_len, 32);
    let seq = s.get(2).unwrap();
    assert_eq!(seq.num_cached_prompt_tokens(), 32);
    // The next token (position 32) attends to keys 25..=32: blocks 6.. are held, 0..6 are not.
    for group in [1, 2] {
        let table = seq.block_table_ids(group);
        assert!(table[..6].iter().all(|&b| b == NULL_BLOCK), "group {group}: {table:?}");
        assert!(table[6..].iter().all(|&b| b != NULL_BLOCK), "group {group}: {table:?}");
    }
    assert!(seq.block_table_ids(0).iter().all(|&b| b != NULL_BLOCK));
    s.check_invariants().unwrap();
    s.finish(2, FinishReason::Abort).unwrap();
    s.check_invariants().unwrap();
    assert_eq!(s.num_free_blocks(), s.num_total_blocks());
}
