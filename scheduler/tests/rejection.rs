mod common;

use common::{config, new_seq, step};
use entrobatch_scheduler::{NeverFitsReason, NewSequence, Scheduler, SchedulerConfig, SchedulerError};

#[test]
fn never_fitting_requests_are_rejected_at_add() {
    let mut cfg = config(64, 8, 4, 2);
    cfg.max_model_len = 16;
    let mut s = Scheduler::new(cfg).unwrap();

    let err = s.add(new_seq(1, 10, 7)).unwrap_err();
    assert_eq!(
        err,
        SchedulerError::NeverFits { seq_id: 1, needed_tokens: 17, limit: 16, reason: NeverFitsReason::MaxModelLen }
    );
    let err = s.add(new_seq(2, 5, 4)).unwrap_err();
    assert_eq!(
        err,
        SchedulerError::NeverFits { seq_id: 2, needed_tokens: 9, limit: 8, reason: NeverFitsReason::KvCacheCapacity }
    );
    let err = s
        .add(NewSequence {
            id: 3,
            prompt_token_ids: vec![],
            max_tokens: 4,
            skip_prefix_cache: false,
            ttft_target: None,
        })
        .unwrap_err();
    assert!(matches!(err, SchedulerError::InvalidRequest { seq_id: 3, .. }));
    let err = s.add(new_seq(4, 3, 0)).unwrap_err();
    assert!(matches!(err, SchedulerError::InvalidRequest { seq_id: 4, .. }));
    let err = s.add(new_seq(5, 3, usize::MAX)).unwrap_err();
    assert!(matches!(err, SchedulerError::NeverFits { reason: NeverFitsReason::MaxModelLen, .. }));
    assert!(!s.has_unfinished());
    assert!(s.schedule().is_empty());

    // Exactly the whole pool is fine, and runs to the end alone.
    s.add(new_seq(6, 4, 4)).unwrap();
    assert_eq!(s.add(new_seq(6, 4, 4)).unwrap_err(), SchedulerError::DuplicateId(6));
    let mut steps = 0;
    while s.has_unfinished() {
        step(&mut s);
        steps += 1;
        assert!(steps <= 5);
    }
    assert_eq!(s.num_free_blocks(), 2);
}

#[test]
fn hooks_and_updates_reject_bad_input() {
    let mut s = Scheduler::new(config(8, 8, 4, 4)).unwrap();
    s.add(new_seq(1, 3, 1)).unwrap();
    assert!(matches!(
        s.request_scratch_rows(1, 8),
        Err(SchedulerError::NeverFits { reason: NeverFitsReason::TokenBudget, .. })
    ));
    s.request_scratch_rows(1, 7).unwrap();
    assert!(matches!(
        s.set_lookahead_slots(1, 13),
        Err(SchedulerError::NeverFits { reason: NeverFitsReason::KvCacheCapacity, .. })
    ));
    s.set_lookahead_slots(1, 12).unwrap();
    assert_eq!(s.append_token(9, 1), Err(SchedulerError::UnknownSequence(9)));
    assert_eq!(s.request_scratch_rows(9, 1), Err(SchedulerError::UnknownSequence(9)));
    assert_eq!(s.set_lookahead_slots(9, 1), Err(SchedulerError::UnknownSequence(9)));
    assert_eq!(s.finish(9, entrobatch_scheduler::FinishReason::Stop), Err(SchedulerError::UnknownSequence(9)));
    s.append_token(1, 5).unwrap();
    assert_eq!(s.append_token(1, 5), Err(SchedulerError::MaxTokensReached { seq_id: 1, max_tokens: 1 }));
}

#[test]
fn config_is_validated() {
    for broken in [
        SchedulerConfig { block_size: 0, ..SchedulerConfig::default() },
        SchedulerConfig { num_blocks: 0, ..SchedulerConfig::default() },
        SchedulerConfig { max_num_batched_tokens: 0, ..SchedulerConfig::default() },
        SchedulerConfig { max_num_seqs: 0, ..SchedulerConfig::default() },
        SchedulerConfig { max_model_len: 0, ..SchedulerConfig::default() },
        SchedulerConfig { num_blocks: u32::MAX as usize + 1, ..SchedulerConfig::default() },
        SchedulerConfig { branch_row_share: 0.0, ..SchedulerConfig::default() },
        SchedulerConfig { branch_row_share: f64::NAN, ..SchedulerConfig::default() },
    ] {
        assert!(matches!(Scheduler::new(broken), Err(SchedulerError::InvalidConfig(_))));
    }
    assert!(Scheduler::new(SchedulerConfig::default()).is_ok());
}
