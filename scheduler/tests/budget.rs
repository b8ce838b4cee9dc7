mod common;

use common::{config, modelled_step_seconds, new_seq, step};
use entrobatch_scheduler::{FinishReason, Scheduler, StepWork};

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

/// Sequence 2, an 800-token prompt, waiting beside sequence 1 decoding, so prefill is capped at
/// 16 tokens a step; and the steps the prompt needs alone.
fn long_prompt_beside_a_decode() -> (Scheduler, usize) {
    let mut config = config(64, 64, 4, 4096);
    config.max_prefill_tokens_with_decodes = 16;
    let mut s = Scheduler::new(config).unwrap();
    s.add(new_seq(1, 4, 1000)).unwrap();
    step(&mut s);
    s.add(new_seq(2, 800, 4)).unwrap();
    (s, 800usize.div_ceil(16))
}

/// Issue 44's starvation case: a long prompt is computing when short requests keep arriving.
/// The short ones pass it (shortest remaining prefill first), yet it keeps half of every
/// step's prefill tokens, so it still finishes within twice its time alone; once it decodes,
/// nothing is left behind.
#[test]
fn short_prompts_pass_a_long_one_which_still_progresses_every_step() {
    let (mut s, alone_steps) = long_prompt_beside_a_decode();
    let mut next_id = 3;
    let mut first_token_step = std::collections::HashMap::new();
    let mut long_done_at = None;
    for step_no in 0..4 * alone_steps {
        // A 6-token request every other step.
        if step_no % 2 == 0 {
            s.add(new_seq(next_id, 6, 2)).unwrap();
            first_token_step.insert(next_id, (step_no, None));
            next_id += 1;
        }
        let before = s.get(2).map(|q| q.num_computed_tokens());
        let out = step(&mut s);
        for row in out.scheduled.iter().filter(|r| r.needs_sample) {
            if let Some((_, first @ None)) = first_token_step.get_mut(&row.seq_id) {
                *first = Some(step_no);
            }
        }
        if let (Some(before), Some(seq)) = (before, s.get(2)) {
            if seq.num_output_tokens() == 0 {
                assert!(seq.num_computed_tokens() >= before + 8, "the long prompt got under half at step {step_no}");
            } else if long_done_at.is_none() {
                long_done_at = Some(step_no);
            }
        }
    }
    let long_done_at = long_done_at.expect("the long prompt finished its prefill");
    assert!(long_done_at < 2 * alone_steps, "{long_done_at} steps, {alone_steps} alone");
    // Every short one got its first token within two steps of arriving (it needs one).
    for (id, (arrived, first)) in first_token_step {
        if let Some(first) = first {
            assert!(first <= arrived + 1, "request {id} arrived at {arrived}, first token at {first}");
        } else {
            assert!(arrived + 2 >= 4 * alone_steps, "request {id} never started");
        }
    }
}

/// A short prompt that cannot finish beside the long one's half gets the whole step every
/// other step, so its first token comes as soon as with no long prompt present; the long one
/// sits out no two steps in a row and still finishes within about twice its time alone.
#[test]
fn a_short_prompt_takes_whole_steps_from_a_long_one_every_other_step() {
    let (mut s, alone_steps) = long_prompt_beside_a_decode();
    let (mut next_id, mut arrivals) = (3, std::collections::HashMap::new());
    let (mut sat_out, mut last_sat_out, mut long_done_at) = (0, false, None);
    for step_no in 0..4 * alone_steps {
        // A 20-token request every fourth step: alone it needs two steps (16 + 4); beside the
        // long prompt's half (8 a step) it would need three.
        if step_no % 4 == 1 {
            s.add(new_seq(next_id, 20, 2)).unwrap();
            arrivals.insert(next_id, step_no);
            next_id += 1;
        }
        let out = step(&mut s);
        for row in out.scheduled.iter().filter(|r| r.needs_sample) {
            if let Some(arrived) = arrivals.remove(&row.seq_id) {
                assert!(
                    step_no <= arrived + 1,
                    "request {} arrived at {arrived}, first token at {step_no}",
                    row.seq_id
                );
            }
        }
        let Some(long) = s.get(2) else { continue };
        if long.num_output_tokens() > 0 {
            long_done_at.get_or_insert(step_no);
            continue;
        }
        let served = out.scheduled.iter().any(|r| r.seq_id == 2);
        assert!(served || !last_sat_out, "the long prompt sat out two steps in a row at {step_no}");
        last_sat_out = !served;
        sat_out += usize::from(!served);
    }
    let long_done_at = long_done_at.expect("the long prompt finished its prefill");
    assert!(sat_out > 0, "the long prompt never gave way");
    assert!(long_done_at < 2 * alone_steps, "{long_done_at} steps, {alone_steps} alone");
}

/// What a step takes on the modelled machine: 10 ms a step, 1 ms a row, 2 ms per thousand keys
/// attended.
fn cost(out: &entrobatch_scheduler::SchedulerOutput) -> f64 {
    modelled_step_seconds(out, 0.010, 0.001, 0.002)
}

/// With a TPOT target, prefill beside decodes gets what the target leaves once the fitted
/// step cost has paid for the decodes, each row priced at its depth in its context: a long
/// prompt's chunks shrink as its context grows, and every step stays within the target.
#[test]
fn a_tpot_target_sizes_prefill_from_the_measured_step_cost() {
    use std::time::Duration;
    let tpot = 0.100;
    let mut config = config(512, 64, 16, 4096);
    config.max_prefill_tokens_with_decodes = 16;
    config.latency_targets.tpot = Some(Duration::from_secs_f64(tpot));
    // Warm the fit up on steps of every size: prompts of varied lengths, then decodes.
    let mut s = eight_decoding_after(config, 40);
    s.add(new_seq(100, 3000, 4)).unwrap();
    let mut chunks = Vec::new();
    while s.get(100).is_some_and(|q| q.num_output_tokens() == 0) {
        let out = step(&mut s);
        let secs = cost(&out);
        s.record_step(Duration::from_secs_f64(secs));
        let left = s.get(100).map_or(0, |q| q.num_tokens() - q.num_computed_tokens());
        let chunk = out.scheduled.iter().find(|r| r.seq_id == 100).map_or(0, |r| r.num_query_tokens);
        assert!(chunk >= 16.min(chunk + left), "the prompt stalled");
        assert!(secs <= tpot * 1.05 || chunk == 16, "{secs} s with a {chunk}-token chunk");
        chunks.push(chunk);
        assert!(chunks.len() < 400);
    }
    // Deeper into the prompt, each row costs more: the chunks shrink.
    let (first, last) = (chunks[0], chunks[chunks.len() - 2]);
    assert!(first > 2 * last, "{chunks:?}");
    assert!(first > 16, "more than the fixed cap while the target allows it: {chunks:?}");
}

/// Without a target the token caps hold for ordinary prompts, and deep in a long one each cap
/// buys the time its rows take in an ordinary prompt (1k tokens of context): a chunk 4k tokens
/// into its context costs about twice that a row here, so the same 64 rows would make every
/// step beside it (and a step of it alone, which an arrival waits for) several times longer.
#[test]
fn without_a_target_the_caps_buy_what_their_rows_cost_in_an_ordinary_prompt() {
    let mut config = config(512, 64, 16, 4096);
    config.max_prefill_tokens_with_decodes = 64;
    let (mut s, decode_only) = eight_decoding(config);
    // 64 rows after 1,024 tokens of context: 64 ms a row's worth, 135 ms of keys.
    let cap_time = 0.001 * 64.0 + 0.002 * StepWork::span(1024, 64).kilo_keys;
    s.add(new_seq(100, 4000, 4)).unwrap();
    let mut chunks = Vec::new();
    seconds_to_first_token(&mut s, 100, 60.0, |out, secs| {
        let chunk = out.scheduled.iter().find(|r| r.seq_id == 100).map_or(0, |r| r.num_query_tokens);
        assert!(secs <= (decode_only + cap_time) * 1.05 || chunk <= 16, "{secs} s with a {chunk}-token chunk");
        chunks.push(chunk);
    });
    assert_eq!(chunks[..8], [64; 8], "an ordinary prompt's chunks are the cap in tokens");
    let last = chunks[chunks.len() - 2];
    assert!((16..40).contains(&last), "4k tokens deep: {last} rows ({chunks:?})");

    // Alone, a long prompt takes the whole step while it is shallow, and deep in its context no
    // more than what the whole step's rows take at 1k, where all 512 rows would take 4.4 s.
    for id in 1..=8 {
        assert!(s.abort(id));
    }
    let full_step_time = 0.001 * 512.0 + 0.002 * StepWork::span(1024, 512).kilo_keys;
    s.add(new_seq(200, 6000, 4)).unwrap();
    let mut alone = Vec::new();
    seconds_to_first_token(&mut s, 200, 120.0, |out, secs| {
        let chunk = out.scheduled.iter().find(|r| r.seq_id == 200).map_or(0, |r| r.num_query_tokens);
        assert!(secs <= 0.010 + full_step_time * 1.05, "{secs} s with a {chunk}-token chunk");
        alone.push(chunk);
    });
    assert_eq!(alone.iter().max(), Some(&512), "{alone:?}");
    assert!(alone[alone.len() - 2] < 300, "{alone:?}");
}

/// A TPOT target holds a step of prefill alone to the target as well: with nothing decoding, a
/// long prompt deep in its context would otherwise take the whole budget of its most expensive
/// rows, and a short prompt arriving during that step waits for all of it.
#[test]
fn a_tpot_target_also_bounds_a_step_of_prefill_alone() {
    use std::time::Duration;
    let tpot = 0.100;
    let mut config = config(512, 64, 16, 4096);
    config.latency_targets.tpot = Some(Duration::from_secs_f64(tpot));
    let mut s = Scheduler::new(config).unwrap();
    // Warm the fit up on steps of every size, then let everything finish.
    for id in 1..=8 {
        s.add(new_seq(id, 40 * id as usize, 4)).unwrap();
    }
    while s.num_running() + s.num_waiting() > 0 {
        let out = step(&mut s);
        s.record_step(Duration::from_secs_f64(cost(&out)));
    }
    // A long prompt alone: every step within the target (or its one-block floor), where the
    // whole budget of 512 rows would cost 0.52 s at the start and 4.6 s at 4k of context.
    s.add(new_seq(100, 6000, 4)).unwrap();
    let mut steps = 0;
    let mut short_arrived_at = None;
    let mut longest: f64 = 0.0;
    while s.get(100).is_some_and(|q| q.num_output_tokens() == 0) {
        if steps == 40 {
            s.add(new_seq(200, 60, 4)).unwrap();
            short_arrived_at = Some(steps);
        }
        let out = step(&mut s);
        let secs = cost(&out);
        s.record_step(Duration::from_secs_f64(secs));
        let chunk = out.scheduled.iter().find(|r| r.seq_id == 100).map_or(0, |r| r.num_query_tokens);
        assert!(secs <= tpot * 1.05 || chunk <= 16, "step {steps}: {secs} s with a {chunk}-token chunk");
        if chunk > 16 {
            longest = longest.max(secs);
        }
        if short_arrived_at.is_some() && s.get(200).is_some_and(|q| q.num_output_tokens() == 1) {
            assert!(steps - 40 < 2, "the short prompt's first token took {} steps", steps - 40 + 1);
        }
        steps += 1;
        assert!(steps < 2000, "the long prompt stalled");
    }
    assert!(s.get(200).is_none_or(|q| q.num_output_tokens() >= 1), "the short prompt never sampled");
    // No request's TPOT averages a step of prefill alone: one above the one-block floor is
    // planned to the whole target, not to the share that steps with decodes keep.
    assert!(longest > tpot * 0.95, "the longest step of prefill alone took {longest} s");
}

/// With a TPOT target, admission stops where decoding one more sequence would take a step past
/// the target (the fitted cost of a row each, beside a block of prefill for the shortest and
/// the oldest prompt), and the rest wait their turn instead of slowing everyone down.
#[test]
fn a_tpot_target_caps_how_many_sequences_decode_at_once() {
    // Steps are planned to 90 ms of the 100 ms target: 90 - 10 ms - two blocks of prefill (8
    // rows, 40 ms) leaves 40 ms: 8 rows at 5 ms.
    assert_eq!(most_decoding_at_once(4), 8);
    // Two blocks of 16 rows (160 ms) would fill the budget by themselves: they keep no more than
    // half of the 80 ms above the base, and decodes get the other 40 ms: 8 rows.
    assert_eq!(most_decoding_at_once(16), 8);
}

/// The most sequences running at once in the first 20 steps after 30 short requests arrive,
/// under a 100 ms TPOT target, on a machine taking 10 ms a step and 5 ms a row; the queue must
/// drain.
fn most_decoding_at_once(block_size: usize) -> usize {
    use std::time::Duration;
    let cost = |out: &entrobatch_scheduler::SchedulerOutput| 0.010 + 0.005 * out.num_batched_tokens as f64;
    let mut config = config(512, 64, block_size, 4096);
    config.latency_targets.tpot = Some(Duration::from_millis(100));
    let mut s = Scheduler::new(config).unwrap();
    // Steps of every size teach the fit what a row costs.
    for id in 1..=8 {
        s.add(new_seq(id, 10 * id as usize, 6)).unwrap();
    }
    for _ in 0..20 {
        let out = step(&mut s);
        s.record_step(Duration::from_secs_f64(cost(&out)));
    }
    assert_eq!(s.num_running(), 0);
    for id in 100..130 {
        s.add(new_seq(id, 8, 40)).unwrap();
    }
    let mut most = 0;
    let mut steps = 0;
    while s.num_running() + s.num_waiting() > 0 {
        let out = step(&mut s);
        s.record_step(Duration::from_secs_f64(cost(&out)));
        if steps < 20 {
            most = most.max(s.num_running());
        }
        steps += 1;
        assert!(steps < 2000, "the queue never drained");
    }
    most
}

/// Under both targets, prefill beside decodes runs no faster than the prompts waiting for their
/// first token need: while they are on time, a step carrying a prompt stays within three
/// decode-only steps (tokens stream evenly) and the prompt still makes its TTFT target; a burst
/// that the even pace would make late gets everything the TPOT plan allows.
#[test]
fn under_both_targets_prefill_beside_decodes_keeps_the_pace_the_ttft_target_needs() {
    use std::time::Duration;
    let (ttft, tpot) = (2.0, 0.100);
    let mut config = config(512, 64, 16, 8192);
    config.latency_targets.ttft = Some(Duration::from_secs_f64(ttft));
    config.latency_targets.tpot = Some(Duration::from_secs_f64(tpot));
    let (mut s, decode_only) = eight_decoding(config);

    // One prompt of 300 tokens: the plan would allow ~70 rows a step (90 ms); the even pace gives
    // it twice a decode-only step's time, and its first token still comes well within 2 s.
    s.add(new_seq(100, 300, 4)).unwrap();
    let waited = seconds_to_first_token(&mut s, 100, 2.0 * ttft, |out, secs| {
        let chunk = out.scheduled.iter().find(|r| r.seq_id == 100).map_or(0, |r| r.num_query_tokens);
        assert!(secs <= 3.0 * decode_only * 1.05 || chunk <= 16, "{secs} s with a {chunk}-token chunk");
    });
    assert!(waited <= ttft, "its first token came after {waited} s");

    // Forty such prompts at once need 12 s of prefill: more than the even pace clears in time, so
    // prefill takes what the plan allows.
    for id in 200..240 {
        s.add(new_seq(id, 300, 4)).unwrap();
    }
    let mut longest: f64 = 0.0;
    for _ in 0..20 {
        let out = step(&mut s);
        let secs = cost(&out);
        s.record_step(Duration::from_secs_f64(secs));
        longest = longest.max(secs);
    }
    assert!(longest > 0.9 * tpot * 0.9, "the burst's steps took at most {longest} s");
}

/// A request's own TTFT target paces its prefill, not the server's: at the even pace the server's
/// 2 s target allows, a 300-token prompt has its first token after 0.61 s here, past its own
/// 0.6 s; at what the TPOT plan allows, after 0.52 s.
#[test]
fn a_requests_own_ttft_target_paces_its_prefill() {
    use std::time::Duration;
    let mut config = config(512, 64, 16, 8192);
    config.latency_targets.ttft = Some(Duration::from_secs(2));
    config.latency_targets.tpot = Some(Duration::from_millis(100));
    let (mut s, _) = eight_decoding(config);
    let own = Duration::from_millis(600);
    s.add(entrobatch_scheduler::NewSequence { ttft_target: Some(own), ..new_seq(100, 300, 4) }).unwrap();
    let waited = seconds_to_first_token(&mut s, 100, 2.0, |_, _| {});
    assert!(waited <= own.as_secs_f64(), "its first token came after {waited} s");
}

/// Steps `s` at `cost` until sequence `id` has its first token, handing each step and its
/// seconds to `each`; the seconds that took, which must stay under `limit` (else it stalled).
fn seconds_to_first_token(
    s: &mut Scheduler,
    id: entrobatch_scheduler::SeqId,
    limit: f64,
    mut each: impl FnMut(&entrobatch_scheduler::SchedulerOutput, f64),
) -> f64 {
    let mut waited = 0.0;
    while s.get(id).is_some_and(|q| q.num_output_tokens() == 0) {
        let out = step(s);
        let secs = cost(&out);
        s.record_step(std::time::Duration::from_secs_f64(secs));
        waited += secs;
        each(&out, secs);
        assert!(waited < limit, "the prompt stalled");
    }
    waited
}

/// A scheduler with eight sequences decoding long outputs, its step cost fitted on steps of
/// every size, and the cost of a decode-only step.
fn eight_decoding(config: entrobatch_scheduler::SchedulerConfig) -> (Scheduler, f64) {
    use std::time::Duration;
    let mut s = eight_decoding_after(config, 60);
    let decode_only = cost(&step(&mut s));
    s.record_step(Duration::from_secs_f64(decode_only));
    (s, decode_only)
}

/// Eight sequences of varied prompts and long outputs, after `steps` steps at `cost`.
fn eight_decoding_after(config: entrobatch_scheduler::SchedulerConfig, steps: usize) -> Scheduler {
    use std::time::Duration;
    let mut s = Scheduler::new(config).unwrap();
    for id in 1..=8 {
        s.add(new_seq(id, 40 * id as usize, 4000)).unwrap();
    }
    for _ in 0..steps {
        let out = step(&mut s);
        s.record_step(Duration::from_secs_f64(cost(&out)));
    }
    s
}
