use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, TryRecvError};
use entrobatch_model_runner::{ForwardOutput, GgufTokenizer, ModelRunner};
use entrobatch_scheduler::{FinishReason as SeqFinish, NewSequence, Scheduler};
use rayon::prelude::*;
use tokio::sync::mpsc::UnboundedSender;

use crate::batch_builder::{build_batch, SpanResult};
use crate::event::{Event, FinishReason, RequestId};
use crate::faults::{check_logits_finite, FaultInjection};
use crate::metrics::EngineMetrics;
use crate::request::GenerationParams;
use crate::request_state::RequestState;
use crate::strategy::{build_strategy, SequenceStrategy, StrategyContext, StrategyInput, StrategyOutput};

pub struct PendingRequest {
    pub id: RequestId,
    pub prompt_token_ids: Vec<u32>,
    pub params: GenerationParams,
    pub seed: u64,
    pub sender: UnboundedSender<Event>,
}

pub enum Command {
    /// One or more requests, admitted together before the next step.
    Submit(Vec<PendingRequest>),
    Abort(RequestId),
    /// Stop taking work; `finish_in_flight` decides between draining and aborting.
    Shutdown { finish_in_flight: bool },
}

/// The engine's single thread: owns the scheduler, the model runner and every request's
/// state, so a step needs no locks. Data flows one way per step: schedule -> forward ->
/// sample -> apply.
pub struct EngineLoop {
    pub scheduler: Scheduler,
    pub runner: ModelRunner,
    pub tokenizer: Arc<GgufTokenizer>,
    pub metrics: Arc<EngineMetrics>,
    pub commands: Receiver<Command>,
    pub requests: HashMap<RequestId, RequestState>,
    pub draining: bool,
    pub faults: FaultInjection,
    /// Forwards run so far; `faults` counts in it.
    pub forwards: u64,
}

impl EngineLoop {
    pub fn run(mut self) {
        loop {
            if !self.receive_commands() {
                break;
            }
            if self.requests.is_empty() {
                // Aborts free blocks without a step: show it before going idle.
                self.publish_gauges();
                if self.draining {
                    break;
                }
                continue;
            }
            self.step();
            self.publish_gauges();
        }
        for (_, state) in self.requests.drain() {
            self.metrics.release_in_flight();
            state.finish(FinishReason::Abort, Some("engine shut down".into()));
        }
        // Submissions still queued in the channel never started: end their streams too.
        while let Ok(cmd) = self.commands.try_recv() {
            let Command::Submit(batch) = cmd else { continue };
            for req in batch {
                self.metrics.release_in_flight();
                let _ = req.sender.send(Event::Finished {
                    reason: FinishReason::Abort,
                    prompt_tokens: req.prompt_token_ids.len(),
                    completion_tokens: 0,
                    error: Some("engine shut down".into()),
                    strategy_stats: None,
                });
            }
        }
        self.publish_gauges();
    }

    /// Blocks only when idle. Returns false once the engine must stop at once.
    fn receive_commands(&mut self) -> bool {
        if self.requests.is_empty() && !self.draining {
            match self.commands.recv() {
                Ok(cmd) => {
                    if !self.handle(cmd) {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
        loop {
            match self.commands.try_recv() {
                Ok(cmd) => {
                    if !self.handle(cmd) {
                        return false;
                    }
                }
                Err(TryRecvError::Empty) => return true,
                // Every Engine handle is gone: finish what is in flight, then stop.
                Err(TryRecvError::Disconnected) => {
                    self.draining = true;
                    return true;
                }
            }
        }
    }

    fn handle(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Submit(batch) => batch.into_iter().for_each(|req| self.admit(req)),
            Command::Abort(id) => self.finish_request(id, FinishReason::Abort, None),
            Command::Shutdown { finish_in_flight } => {
                self.draining = true;
                if !finish_in_flight {
                    return false;
                }
            }
        }
        true
    }

    fn admit(&mut self, req: PendingRequest) {
        let PendingRequest { id, prompt_token_ids, params, seed, sender } = req;
        let num_prompt = prompt_token_ids.len();
        let ctx = StrategyContext {
            mask_token_id: self.runner.model().config().mask_token_id,
            max_model_len: self.scheduler.config().max_model_len,
            max_tokens: params.max_tokens,
            metrics: Some(self.metrics.clone()),
            ..StrategyContext::new(&self.tokenizer)
        };
        let strategy = build_strategy(&params.decoding, &ctx);
        let eos = self.tokenizer.eos_token_ids.clone();
        let strategy = match strategy {
            Ok(s) => s,
            Err(e) => {
                self.metrics.release_in_flight();
                let _ = sender.send(Event::Finished {
                    reason: FinishReason::Error,
                    prompt_tokens: num_prompt,
                    completion_tokens: 0,
                    error: Some(e),
                    strategy_stats: None,
                });
                return;
            }
        };
        let state = RequestState::new(params.clone(), seed, num_prompt, sender, eos, strategy);
        if self.draining {
            self.metrics.release_in_flight();
            state.finish(FinishReason::Abort, Some("engine is shutting down".into()));
            return;
        }
        let new_seq = NewSequence { id, prompt_token_ids, max_tokens: params.max_tokens };
        match self.scheduler.add(new_seq) {
            Ok(()) => {
                self.metrics.prompt_tokens.fetch_add(num_prompt as u64, Ordering::Relaxed);
                let lookahead = state.strategy.lookahead_slots();
                // A reservation, not a need (scratch rows never write the cache): a pool too
                // small for it just runs without.
                if lookahead > 0 && self.scheduler.set_lookahead_slots(id, lookahead).is_err() {
                    tracing::debug!(request = id, lookahead, "lookahead slots do not fit the KV pool; skipped");
                }
                self.requests.insert(id, state);
            }
            Err(e) => {
                self.metrics.requests_rejected.fetch_add(1, Ordering::Relaxed);
                self.metrics.release_in_flight();
                state.finish(FinishReason::Error, Some(e.to_string()));
            }
        }
    }

    fn step(&mut self) {
        let started = Instant::now();
        let plan = self.scheduler.schedule();
        self.metrics.preemptions.fetch_add(plan.preempted.len() as u64, Ordering::Relaxed);
        for id in &plan.preempted {
            if let Some(state) = self.requests.get_mut(id) {
                state.strategy.on_preempted();
            }
        }
        let (batch, spans) = build_batch(&plan, &mut self.requests);
        if batch.num_rows() == 0 {
            return;
        }
        let (runner, faults, forward) = (&mut self.runner, &self.faults, self.forwards);
        self.forwards += 1;
        let output = catch_unwind(AssertUnwindSafe(|| {
            faults.before_forward(forward)?;
            runner.execute(&batch)
        }));
        let mut output: ForwardOutput = match output {
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
        if self.faults.is_active() {
            for span in &spans {
                self.faults.after_forward(span.seq_id, &span.logits_indices, &mut output);
            }
        }
        let decisions = self.process_spans(&output, &spans);
        for (id, decision) in decisions {
            match decision {
                Ok(out) => self.apply(id, out),
                Err(e) => self.finish_request(id, FinishReason::Error, Some(e)),
            }
        }
        self.metrics.steps.fetch_add(1, Ordering::Relaxed);
        self.metrics.step_duration.observe(started.elapsed().as_secs_f64());
    }

    /// Runs every span's strategy on its logits, in parallel across sequences (the sampler's
    /// vocabulary passes dominate this phase). A panicking strategy fails only its request.
    fn process_spans(
        &mut self,
        output: &ForwardOutput,
        spans: &[SpanResult],
    ) -> Vec<(RequestId, Result<StrategyOutput, String>)> {
        let by_id: HashMap<RequestId, &SpanResult> = spans
            .iter()
            .filter(|s| !s.logits_indices.is_empty())
            .map(|s| (s.seq_id, s))
            .collect();
        let scheduler = &self.scheduler;
        let mut invalid = Vec::new();
        let mut work: Vec<(RequestId, &mut Box<dyn SequenceStrategy>, StrategyInput<'_>)> = Vec::new();
        for (id, state) in self.requests.iter_mut() {
            let (Some(span), Some(seq)) = (by_id.get(id), scheduler.get(*id)) else { continue };
            let RequestState { strategy, params, seed, .. } = state;
            let logits: Vec<&[f32]> = span.logits_indices.iter().map(|&i| output.row(i)).collect();
            // Sampling from NaN/inf would emit arbitrary tokens: fail just this request.
            if let Err(e) = check_logits_finite(&logits) {
                invalid.push((*id, Err(e)));
                continue;
            }
            let input = StrategyInput {
                logits,
                attn_metrics: output.attn_metrics.get(span.span_index).copied().flatten(),
                prompt_token_ids: &seq.token_ids()[..seq.num_prompt_tokens()],
                output_token_ids: seq.output_token_ids(),
                sampling: &params.sampling,
                seed: *seed,
                return_metrics: params.return_metrics,
            };
            work.push((*id, strategy, input));
        }
        work.into_par_iter()
            .map(|(id, strategy, input)| {
                let result = catch_unwind(AssertUnwindSafe(|| strategy.process(input)))
                    .unwrap_or_else(|_| Err("decoding strategy panicked".to_string()));
                (id, result)
            })
            .chain(invalid)
            .collect()
    }

    fn apply(&mut self, id: RequestId, out: StrategyOutput) {
        for token in out.tokens {
            let Some(state) = self.requests.get_mut(&id) else { return };
            if let Err(e) = self.scheduler.append_token(id, token.token_id) {
                let message = format!("scheduler rejected token: {e}");
                self.finish_request(id, FinishReason::Error, Some(message));
                return;
            }
            let guided = token.metrics.as_ref().and_then(|m| m.guided);
            let (finish, timing) = state.append(token, &self.tokenizer);
            self.metrics.output_tokens.fetch_add(1, Ordering::Relaxed);
            self.metrics.record_guidance(guided);
            if let Some(t) = timing.time_to_first_token {
                self.metrics.time_to_first_token.observe(t);
            }
            if let Some(t) = timing.inter_token_latency {
                self.metrics.inter_token_latency.observe(t);
            }
            if let Some(reason) = finish {
                self.finish_request(id, reason, None);
                return;
            }
        }
        if out.next_scratch_rows > 0 {
            if let Err(e) = self.scheduler.request_scratch_rows(id, out.next_scratch_rows) {
                self.finish_request(id, FinishReason::Error, Some(e.to_string()));
            }
        }
    }

    /// Ends a request whatever its state: frees its blocks (the scheduler drops its block
    /// table) and sends the final event.
    fn finish_request(&mut self, id: RequestId, reason: FinishReason, error: Option<String>) {
        let seq_reason = match reason {
            FinishReason::Stop => SeqFinish::Stop,
            FinishReason::Length => SeqFinish::Length,
            FinishReason::Abort => SeqFinish::Abort,
            FinishReason::Error => SeqFinish::Error,
        };
        if self.scheduler.finish(id, seq_reason).is_err() {
            self.scheduler.abort(id);
        }
        if let Some(state) = self.requests.remove(&id) {
            let index = match reason {
                FinishReason::Stop => 0,
                FinishReason::Length => 1,
                FinishReason::Abort => 2,
                FinishReason::Error => 3,
            };
            self.metrics.requests_finished[index].fetch_add(1, Ordering::Relaxed);
            self.metrics.release_in_flight();
            state.finish(reason, error);
        }
    }

    fn publish_gauges(&self) {
        let m = &self.metrics;
        let s = &self.scheduler;
        m.running.store(s.num_running() as u64, Ordering::Relaxed);
        m.waiting.store(s.num_waiting() as u64, Ordering::Relaxed);
        m.kv_blocks_total.store(s.num_total_blocks() as u64, Ordering::Relaxed);
        m.kv_blocks_used
            .store((s.num_total_blocks() - s.num_free_blocks()) as u64, Ordering::Relaxed);
        let prefix = s.prefix_cache_stats();
        m.prefix_cache_queries.store(prefix.queries, Ordering::Relaxed);
        m.prefix_cache_hits.store(prefix.hits, Ordering::Relaxed);
    }
}
