//! One client session: sends its conversation's turns in order, each after the previous one
//! ended, and turns every request into an outcome (completed, failed with a reason, or not
//! sent because the time limit came first).

use std::sync::Arc;
use std::time::Instant;

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use super::client::{self, RequestOutcome};
use super::stats::NOT_SENT;
use super::target::Target;
use super::workload::{Conversation, Turn};

const CUT_OFF: &str = "time limit reached before the response ended";
const EARLIER_TURN_FAILED: &str = "not sent: an earlier turn of its conversation failed";

/// What every session of one run shares.
pub struct Run {
    pub target: Arc<Target>,
    pub model: Option<String>,
    pub start: Instant,
    pub deadline: tokio::time::Instant,
    pub permits: Arc<Semaphore>,
    pub bar: ProgressBar,
}

pub async fn drive(run: Arc<Run>, conversation: Conversation, send_at: tokio::time::Instant) -> Vec<RequestOutcome> {
    let mut history: Vec<Value> = Vec::new();
    let mut outcomes = Vec::with_capacity(conversation.turns.len());
    let mut stop: Option<&str> = (send_at >= run.deadline).then_some(NOT_SENT);
    for turn in &conversation.turns {
        // The time limit may come while waiting for a slot; nothing starts after it.
        let permit = match stop {
            Some(_) => None,
            None => tokio::time::timeout_at(run.deadline, run.permits.clone().acquire_owned())
                .await
                .ok()
                .and_then(Result::ok),
        };
        let Some(permit) = permit else {
            let reason = stop.unwrap_or(NOT_SENT);
            stop = Some(reason);
            outcomes.push(RequestOutcome { index: turn.index, error: Some(reason.into()), ..Default::default() });
            run.bar.inc(1);
            continue;
        };
        let (route, body) = if conversation.chat {
            history.push(json!({ "role": "user", "content": turn.user }));
            ("/v1/chat/completions", request_body(&run, turn, json!({ "messages": history })))
        } else {
            ("/v1/completions", request_body(&run, turn, json!({ "prompt": turn.user })))
        };
        let out = send(&run, route, &body, conversation.session.as_deref(), turn).await;
        drop(permit);
        run.bar.inc(1);
        if out.error.is_some() {
            stop = Some(EARLIER_TURN_FAILED);
        } else if conversation.chat {
            history.push(json!({ "role": "assistant", "content": out.text }));
        }
        outcomes.push(out);
    }
    outcomes
}

async fn send(run: &Run, route: &str, body: &Value, session: Option<&str>, turn: &Turn) -> RequestOutcome {
    let mut out = RequestOutcome { index: turn.index, start: run.start.elapsed().as_secs_f64(), ..Default::default() };
    let result =
        tokio::time::timeout_at(run.deadline, client::stream_request(&run.target, route, body, session, &mut out))
            .await;
    let expected = turn.output_len;
    out.error = match result {
        Err(_) => Some(CUT_OFF.into()),
        Ok(Err(e)) => Some(format!("{e:#}")),
        Ok(Ok(())) if out.output_tokens != expected => {
            Some(format!("incomplete response: {} tokens, expected {expected}", out.output_tokens))
        }
        Ok(Ok(())) => None,
    };
    out
}

fn request_body(run: &Run, turn: &Turn, input: Value) -> Value {
    let mut body = json!({
        "max_tokens": turn.output_len,
        "temperature": 0.0,
        "ignore_eos": true,
        "stream": true,
        "stream_options": { "include_usage": true },
    });
    if let (Some(map), Value::Object(input)) = (body.as_object_mut(), input) {
        map.extend(input);
    }
    if let Some(model) = &run.model {
        body["model"] = json!(model);
    }
    body
}
