//! The engine loop: one thread that owns the scheduler, the model runner and every live
//! request's state, so a step needs no locks. It reads `Command`s between steps and runs
//! schedule -> forward -> sample -> apply while any request is live. Admission (a submitted
//! request becoming a sequence) is its child module `admission`.

mod admission;
mod branches;
mod decide;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, TryRecvError};
use entrobatch_model_runner::{ForwardOutput, ModelRunner, Tokenizer};
use entrobatch_scheduler::{Appended, Scheduler, SeqId};
use rayon::prelude::*;

use self::admission::{refuse, Admission, Live};
use self::decide::{decide, Decision, Work};
use crate::batch_builder::{build_batch, SpanResult};
use crate::command::Command;
use crate::event::{FinishReason, RequestId};
#[cfg(feature = "faults")]
use crate::faults::FaultInjection;
use crate::latency_gate::LatencyGate;
use crate::metrics::EngineMetrics;
use crate::request_state::{RequestState, SequenceCounts};
use crate::speculative::{SharedAcceptance, SpeculativeMethod, SuffixIndex};
use crate::strategy::{StrategyInput, StrategyOutput};
use crate::structured::Constraint;

/// Output tokens the shared suffix index holds: the last few hundred answers of a busy server,
/// enough to find the recurring ones (SuffixDecoding keeps a similar window), in a few MB.
const SUFFIX_INDEX_TOKENS: usize = 200_000;
/// The longest context suffix matched and continuation walked in it.
const SUFFIX_MAX_DEPTH: usize = 32;

/// Whether the loop goes on after reading a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LoopControl {
    Continue,
    /// Stop at once, aborting whatever is still live.
    Stop,
}

/// The engine's single thread: owns the scheduler, the model runner and every request's
/// state. Data flows one way per step: schedule -> forward -> sample -> apply.
pub(crate) struct EngineLoop {
    scheduler: Scheduler,
    runner: ModelRunner,
    tokenizer: Arc<Tokenizer>,
    metrics: Arc<EngineMetrics>,
    gate: Arc<LatencyGate>,
    commands: Receiver<Command>,
    requests: HashMap<RequestId, RequestState>,
    admission: Admission,
    /// No new request is taken; the loop ends once the live ones are done.
    draining: bool,
    /// Recent outputs of every request, for suffix drafts (`SpeculativeMethod::Suffix`).
    suffix: Option<SuffixIndex>,
    /// Every speculating request's verified drafts pooled: where a new request's rate starts.
    shared_acceptance: SharedAcceptance,
    /// The request each live branch continuation belongs to (`Decoding::Branch`).
    branch_owners: HashMap<SeqId, RequestId>,
    next_branch_seq_id: SeqId,
    #[cfg(feature = "faults")]
    faults: FaultInjection,
    /// Forwards run so far; `faults` counts in it.
    #[cfg(feature = "faults")]
    forwards: u64,
}

impl EngineLoop {
    pub(crate) fn new(
        scheduler: Scheduler,
        runner: ModelRunner,
        tokenizer: Arc<Tokenizer>,
        metrics: Arc<EngineMetrics>,
        gate: Arc<LatencyGate>,
        commands: Receiver<Command>,
        speculative_method: Option<SpeculativeMethod>,
    ) -> Self {
        let admission = Admission::new(tokenizer.eos_token_ids.clone());
        let suffix = (speculative_method == Some(SpeculativeMethod::Suffix))
            .then(|| SuffixIndex::new(SUFFIX_INDEX_TOKENS, SUFFIX_MAX_DEPTH));
        Self {
            scheduler,
            runner,
            tokenizer,
            metrics,
            gate,
            commands,
            requests: HashMap::new(),
            admission,
            draining: false,
            suffix,
            shared_acceptance: SharedAcceptance::default(),
            branch_owners: HashMap::new(),
            next_branch_seq_id: branches::FIRST_BRANCH_SEQ_ID,
            #[cfg(feature = "faults")]
            faults: FaultInjection::default(),
            #[cfg(feature = "faults")]
            forwards: 0,
        }
    }

    /// The faults this loop injects into its own steps (tests only).
    #[cfg(feature = "faults")]
    pub(crate) fn with_faults(mut self, faults: FaultInjection) -> Self {
        self.faults = faults;
        self
    }

    /// Runs until shut down or until every `Engine` is gone and the live requests are done;
    /// whatever is still live or queued then ends with an abort.
    pub(crate) fn run(mut self) {
        loop {
            if self.receive_commands() == LoopControl::Stop {
                break;
            }
            if self.requests.is_empty() {
                // Aborts free blocks without a step: show it before going idle.
                self.publish_gauges();
                self.publish_queue_load();
                if self.draining {
                    break;
                }
                continue;
            }
            self.step();
            self.publish_gauges();
            self.publish_queue_load();
        }
        self.admission.abort_all_followers();
        for (id, state) in self.requests.drain() {
            let counts = self.scheduler.get(id).map(SequenceCounts::of).unwrap_or_default();
            state.finish(FinishReason::Abort, Some("engine shut down".into()), counts, None);
        }
        // Submissions still queued in the channel never started: end their streams too.
        while let Ok(cmd) = self.commands.try_recv() {
            let Command::Submit(batch) = cmd else { continue };
            for req in batch {
                refuse(req, "engine shut down");
            }
        }
        self.publish_gauges();
    }

    /// Applies every queued command, blocking for one only when idle.
    fn receive_commands(&mut self) -> LoopControl {
        if self.requests.is_empty() && !self.draining {
            let Ok(cmd) = self.commands.recv() else { return LoopControl::Stop };
            if self.apply_command(cmd) == LoopControl::Stop {
                return LoopControl::Stop;
            }
        }
        loop {
            match self.commands.try_recv() {
                Ok(cmd) => {
                    if self.apply_command(cmd) == LoopControl::Stop {
                        return LoopControl::Stop;
                    }
                }
                Err(TryRecvError::Empty) => return LoopControl::Continue,
                // Every Engine handle is gone: finish what is in flight, then stop.
                Err(TryRecvError::Disconnected) => {
                    self.draining = true;
                    return LoopControl::Continue;
                }
            }
        }
    }

    fn apply_command(&mut self, cmd: Command) -> LoopControl {
        match cmd {
            Command::Submit(batch) => {
                let draining = self.draining;
                let (admission, mut live) = self.admission_and_live();
                admission.admit_batch(batch, &mut live, draining);
            }
            Command::Abort(id) => {
                if !self.admission.abort_follower(id) {
                    self.finish_request(id, FinishReason::Abort, None);
                }
            }
            Command::Shutdown { finish_in_flight } => {
                self.draining = true;
                if !finish_in_flight {
                    return LoopControl::Stop;
                }
            }
        }
        LoopControl::Continue
    }

    /// Admission beside the parts of the loop it writes to (disjoint borrows of `self`).
    fn admission_and_live(&mut self) -> (&mut Admission, Live<'_>) {
        let live = Live { scheduler: &mut self.scheduler, requests: &mut self.requests, metrics: &self.metrics };
        (&mut self.admission, live)
    }

    /// The leader's prompt is computed, or the leader ended: its waiting copies go in.
    fn admit_followers_of(&mut self, leader: RequestId) {
        let (admission, mut live) = self.admission_and_live();
        admission.admit_followers_of(leader, &mut live);
    }

    fn step(&mut self) {
        let started = Instant::now();
        let plan = self.scheduler.schedule();
        self.metrics.preemptions.fetch_add(plan.preempted.len() as u64, Ordering::Relaxed);
        for id in &plan.preempted {
            if let Some(state) = self.requests.get_mut(id) {
                state.strategy.on_preempted();
            }
            // A branch uses only spare room: a continuation that loses its blocks leaves the race.
            self.drop_continuation(*id);
        }
        let (batch, spans) = build_batch(&plan, &self.scheduler, &mut self.requests, &self.branch_owners, started);
        if batch.num_rows() == 0 {
            return;
        }
        let output = catch_unwind(AssertUnwindSafe(|| self.forward(&batch)));
        let output: ForwardOutput = match output {
            Ok(Ok(out)) => out,
            failure => {
                let message = match failure {
                    Ok(Err(e)) => format!("model forward failed: {e}"),
                    _ => "model forward panicked".to_string(),
                };
                tracing::error!(%message, rows = batch.num_rows(), "step failed");
                self.metrics.step_errors.fetch_add(1, Ordering::Relaxed);
                for span in &spans {
                    self.finish_request(span.seq_id, FinishReason::Error, Some(message.clone()));
                }
                return;
            }
        };
        self.metrics.forward_rows.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        #[cfg(feature = "faults")]
        let output = self.inject_logit_faults(&spans, output);
        self.score_prompts(&output, &spans);
        for span in spans.iter().filter(|s| s.scoring_done) {
            self.finish_request(span.seq_id, FinishReason::Length, None);
        }
        let decisions = self.run_strategies(&output, &spans);
        // Branches in flight before this step's decisions, which may start new ones.
        self.run_branches(&output, &spans);
        for (id, decision) in decisions {
            match decision {
                Ok(decision) => self.apply_decision(id, decision),
                Err(e) => self.finish_request(id, FinishReason::Error, Some(e)),
            }
        }
        self.runner.recycle(output);
        let elapsed = started.elapsed();
        if tracing::enabled!(tracing::Level::TRACE) {
            let decodes = plan.scheduled.iter().filter(|s| s.needs_sample && s.num_query_tokens == 1).count();
            let draft_rows: usize = plan.scheduled.iter().map(|s| s.num_draft_tokens).sum();
            let chunks: Vec<(u64, usize, usize)> = plan
                .scheduled
                .iter()
                .filter(|s| s.num_query_tokens > 1)
                .map(|s| (s.seq_id, s.context_len, s.num_query_tokens))
                .collect();
            tracing::trace!(
                ms = elapsed.as_secs_f64() * 1e3,
                decodes,
                draft_rows,
                ?chunks,
                "step (seq, context, rows)"
            );
        }
        self.scheduler.record_step(elapsed);
        self.metrics.steps.fetch_add(1, Ordering::Relaxed);
        self.metrics.step_duration.observe(elapsed.as_secs_f64());
    }

    #[cfg(feature = "faults")]
    fn inject_logit_faults(&self, spans: &[SpanResult], mut output: ForwardOutput) -> ForwardOutput {
        if self.faults.is_active() {
            for span in spans {
                self.faults.after_forward(span.seq_id, &span.logits_indices, &mut output);
            }
        }
        output
    }

    fn forward(
        &mut self,
        batch: &entrobatch_model_runner::ForwardBatch,
    ) -> entrobatch_model_runner::Result<ForwardOutput> {
        #[cfg(feature = "faults")]
        {
            let forward = self.forwards;
            self.forwards += 1;
            self.faults.before_forward(forward)?;
        }
        self.runner.execute(batch)
    }

    /// Sends the prompt log-probabilities of the rows this step computed, to the requests that
    /// score their prompt.
    fn score_prompts(&mut self, output: &ForwardOutput, spans: &[SpanResult]) {
        for span in spans {
            let Some((rows, first)) = span.prompt_rows.clone() else { continue };
            let (Some(state), Some(seq)) = (self.requests.get_mut(&span.seq_id), self.scheduler.get(span.seq_id))
            else {
                continue;
            };
            let Some(scoring) = state.prompt_scoring.as_mut() else { continue };
            let logits = (first..first + rows.len()).map(|i| output.row(i));
            let prompt = &seq.token_ids()[..seq.num_prompt_tokens()];
            let scored = scoring.score(span.context_len, rows, logits, prompt);
            state.send_prompt_logprobs(scored);
        }
    }

    /// Runs every span's strategy on its logits (or verifies its draft), in parallel across
    /// sequences (the sampler's vocabulary passes dominate this phase). A panicking strategy
    /// fails only its request.
    fn run_strategies(
        &mut self,
        output: &ForwardOutput,
        spans: &[SpanResult],
    ) -> Vec<(RequestId, Result<Decision, String>)> {
        let by_id: HashMap<RequestId, &SpanResult> =
            spans.iter().filter(|s| !s.logits_indices.is_empty()).map(|s| (s.seq_id, s)).collect();
        let scheduler = &self.scheduler;
        let suffix = self.suffix.as_ref();
        let shared_acceptance = &self.shared_acceptance;
        let mut work = Vec::new();
        for (id, state) in self.requests.iter_mut().filter(|(_, s)| s.branch.is_none()) {
            let (Some(span), Some(seq)) = (by_id.get(id), scheduler.get(*id)) else { continue };
            let RequestState { strategy, params, seed, constraint, speculation, .. } = state;
            let logits: Vec<&[f32]> = span.logits_indices.iter().map(|&i| output.row(i)).collect();
            let input = StrategyInput {
                logits,
                attn_metrics: output.attn_metrics.get(span.span_index).copied().flatten(),
                prompt_token_ids: &seq.token_ids()[..seq.num_prompt_tokens()],
                output_token_ids: seq.output_token_ids(),
                sampling: &params.sampling,
                seed: *seed,
                return_metrics: params.return_metrics,
                mask: None,
            };
            work.push(Work {
                id: *id,
                strategy: strategy.as_mut(),
                constraint: constraint.as_mut(),
                input,
                draft: seq.draft_token_ids().get(..span.num_draft_tokens).unwrap_or(&[]),
                speculation: speculation.as_mut(),
                suffix,
                shared_acceptance,
                token_ids: seq.token_ids(),
            });
        }
        work.into_par_iter()
            .map(|work| {
                let id = work.id;
                let result = catch_unwind(AssertUnwindSafe(|| decide(work)))
                    .unwrap_or_else(|_| Err("decoding strategy panicked".to_string()));
                (id, result)
            })
            .collect()
    }

    /// Settles a verified draft with the scheduler, appends the step's tokens, and hands the
    /// scheduler the next draft.
    fn apply_decision(&mut self, id: RequestId, decision: Decision) {
        let Decision { mut output, num_draft, num_accepted, verdict, next_draft, fork_constraints } = decision;
        if let Some(verdict) = verdict {
            self.shared_acceptance.record(verdict);
        }
        if num_draft > 0 {
            self.metrics.spec_decode.record(num_draft, num_accepted);
            if let Err(e) = self.scheduler.accept_draft(id, num_accepted) {
                self.finish_request(id, FinishReason::Error, Some(e.to_string()));
                return;
            }
        }
        if let Some(fork) = output.fork.take() {
            if self.start_branch(id, fork, fork_constraints) {
                return;
            }
        }
        self.commit_tokens(id, output, 0);
        if let Some((tokens, odds)) = next_draft {
            // Gone if those tokens finished it.
            let _ = self.scheduler.set_draft(id, tokens, odds);
        }
    }

    /// Appends a strategy's tokens to the request's sequence and streams them as one event,
    /// ending the request where they finish it. The first `already_appended` are in the
    /// sequence already (a kept branch continuation's); they are only streamed.
    fn commit_tokens(&mut self, id: RequestId, out: StrategyOutput, already_appended: usize) {
        let last = out.tokens.len().saturating_sub(1);
        let Some(seq) = self.scheduler.get(id) else { return };
        let (first_output, max_tokens) =
            (seq.num_output_tokens() - already_appended.min(seq.num_output_tokens()), seq.max_tokens());
        for (i, token) in out.tokens.into_iter().enumerate() {
            let Some(state) = self.requests.get_mut(&id) else { return };
            // The grammar has already advanced over this step's tokens: it may be complete
            // only after the last of them (a fast-forwarded run ends the output).
            let grammar_complete = i == last && state.constraint.as_ref().is_some_and(Constraint::is_finished);
            let appended = if i < already_appended {
                let num_output_tokens = first_output + i + 1;
                Appended { num_output_tokens, reached_max_tokens: num_output_tokens >= max_tokens }
            } else {
                match self.scheduler.append_token(id, token.token_id) {
                    Ok(appended) => appended,
                    Err(e) => {
                        let message = format!("scheduler rejected token: {e}");
                        self.finish_request(id, FinishReason::Error, Some(message));
                        return;
                    }
                }
            };
            let guided = token.metrics.as_ref().and_then(|m| m.guided);
            let (finish, timing) = state.append(token, appended, &self.tokenizer, grammar_complete);
            self.metrics.output_tokens.fetch_add(1, Ordering::Relaxed);
            self.metrics.record_guidance(guided);
            if let Some(t) = timing.time_to_first_token {
                self.metrics.time_to_first_token.observe(t);
            }
            if let Some(t) = timing.inter_token_latency {
                self.metrics.inter_token_latency.observe(t);
            }
            if appended.num_output_tokens == 1 {
                self.admit_followers_of(id);
            }
            if let Some(reason) = finish {
                self.finish_request(id, reason, None);
                return;
            }
        }
        if self.requests.get_mut(&id).is_some_and(|state| !state.flush()) {
            self.finish_request(id, FinishReason::Abort, None);
            return;
        }
        if out.next_scratch_rows > 0 {
            if let Err(e) = self.scheduler.request_scratch_rows(id, out.next_scratch_rows) {
                self.finish_request(id, FinishReason::Error, Some(e.to_string()));
            }
        }
    }

    /// Ends a request whatever its state: frees its blocks (the scheduler drops its block
    /// table) and, in `RequestState::finish`, its in-flight slot, then sends the final event.
    fn finish_request(&mut self, id: RequestId, reason: FinishReason, error: Option<String>) {
        // A branch continuation's failure is its request's (a failed forward fails them all).
        let id = self.branch_owners.get(&id).copied().unwrap_or(id);
        self.abandon_branch(id);
        let counts = self.scheduler.get(id).map(SequenceCounts::of).unwrap_or_default();
        if let (Some(index), Some(seq), FinishReason::Stop | FinishReason::Length) =
            (self.suffix.as_mut(), self.scheduler.get(id), reason)
        {
            index.insert(seq.output_token_ids());
        }
        if self.scheduler.finish(id, reason.into()).is_err() {
            self.scheduler.abort(id);
        }
        if let Some(state) = self.requests.remove(&id) {
            let mut schema_errors = None;
            if let Some(constraint) = &state.constraint {
                self.metrics.record_grammar_masks(constraint.mask_stats());
                // Only an output its grammar ended is whole; a cut one fails for that alone.
                if reason == FinishReason::Stop {
                    schema_errors = constraint.check_output(&self.tokenizer);
                    if let Some(errors) = &schema_errors {
                        self.metrics.record_schema_check(errors.is_empty());
                    }
                }
            }
            self.metrics.requests_finished[reason.index()].fetch_add(1, Ordering::Relaxed);
            let generated = counts.completion_tokens;
            self.metrics.requests.observe_finished(&state.times, Instant::now(), state.num_prompt_tokens, generated);
            if let Some((estimated, ttft)) = state.times.ttft_against_estimate() {
                tracing::debug!(
                    request = id,
                    estimated_ms = estimated.as_millis() as u64,
                    ttft_ms = ttft.as_millis() as u64,
                    "TTFT against admission's estimate"
                );
            }
            // Whoever sees the final event may read the gauges: they must already show the
            // blocks freed (a few atomic stores).
            self.publish_gauges();
            state.finish(reason, error, counts, schema_errors);
        }
        self.admit_followers_of(id);
    }

    fn publish_gauges(&self) {
        let m = &self.metrics;
        let s = &self.scheduler;
        m.running.store(s.num_running() as u64, Ordering::Relaxed);
        m.waiting.store(s.num_waiting() as u64, Ordering::Relaxed);
        m.kv_blocks_total.store(s.num_total_blocks() as u64, Ordering::Relaxed);
        m.kv_blocks_used.store((s.num_total_blocks() - s.num_free_blocks()) as u64, Ordering::Relaxed);
        let prefix = s.prefix_cache_stats();
        m.prefix_cache_queries.store(prefix.queries, Ordering::Relaxed);
        m.prefix_cache_hits.store(prefix.hits, Ordering::Relaxed);
    }

    /// The queue for admission on the submitting threads: once a loop iteration, not on every
    /// finish (building it sorts the queue), so a finish reaches it one step later.
    fn publish_queue_load(&self) {
        self.gate.publish(self.scheduler.queue_load());
    }
}
