//! `POST /v1/chat/completions`, with `<think>` split into `reasoning_content` for chat
//! templates that have a thinking switch.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use entrobatch::{ChatMessage, FinishReason, GenerationOutput, Prompt, Request, RequestHandle};
use serde_json::Value;

use super::format::{chat_logprobs, ChatFormat};
use super::messages::{chat_message, check_tool_order};
use super::protocol::ChatRequest;
use super::reasoning::ReasoningSplitter;
use super::response::{ChatChoice, ChatCompletion, ResponseMessage};
use super::tools::{parse_tools, tool_calls, ToolUse};
use crate::request::extract::ApiJson;
use crate::request::params::{engine_request, parse_common, parse_logprobs_pair, refuse_unknown, ParsedParams};
use crate::response::collect::collect_choices;
use crate::response::error::ApiError;
use crate::response::format::{Extras, Frame};
use crate::response::stream::sse_response;
use crate::response::TokenExtras;
use crate::state::AppState;

pub async fn chat_completions(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    state.check_model(req.common.model.as_deref())?;
    let chat = parse_chat(req, &state)?;
    let ParsedChat { parsed, logprobs, tools, echo, .. } = &chat;
    let n = parsed.n;
    let handles = state.submit_copies(vec![chat.request()], chat.parsed.n).await?;
    let frame_id = handles.first().map_or(0, |h| h.id);
    let extras = Extras { return_metrics: parsed.params.return_metrics, return_token_ids: parsed.return_token_ids };
    let thinking = state.thinking_template && parsed.params.enable_thinking != Some(false);
    let choices: Vec<(RequestHandle, ChatFormat)> = handles
        .into_iter()
        .map(|handle| {
            let format = ChatFormat {
                frame: Frame::new(&state, "chatcmpl", frame_id),
                logprobs: logprobs.is_some(),
                extras,
                splitter: thinking
                    .then(|| ReasoningSplitter::new(prompt_opens_think(&state, &handle.prompt_token_ids))),
                tool_stream: tools.as_ref().map(ToolUse::stream),
                echo: echo.clone(),
            };
            (handle, format)
        })
        .collect();
    if parsed.stream {
        return Ok(sse_response(choices, n, parsed.include_usage));
    }
    let (outputs, usage) = collect_choices(choices, n).await?;
    let mut body_choices = Vec::with_capacity(outputs.len());
    let mut frame = None;
    for (index, (output, mut format)) in outputs.into_iter().enumerate() {
        body_choices.push(chat_choice(&state, &mut format, &output, tools.as_ref(), index));
        frame.get_or_insert(format.frame);
    }
    let Some(frame) = frame else { return Err(ApiError::internal("no choices")) };
    let body: ChatCompletion = frame.body("chat.completion", body_choices, Some(usage));
    Ok(Json(body).into_response())
}

/// One finished copy as a whole-response choice: reasoning split, tool calls parsed from the
/// content, the echo in front.
fn chat_choice(
    state: &AppState,
    format: &mut ChatFormat,
    output: &GenerationOutput,
    tools: Option<&ToolUse>,
    index: usize,
) -> ChatChoice {
    let mut split = format.split(&output.text);
    let rest = format.split_finish();
    split.reasoning.push_str(&rest.reasoning);
    split.content.push_str(&rest.content);
    let calls = tools.map(|t| t.parse(&split.content)).filter(|p| !p.calls.is_empty());
    let mut finish_reason = output.finish_reason.as_str();
    let mut message = ResponseMessage {
        role: "assistant",
        content: Some(split.content),
        tool_calls: None,
        // Only templates with a thinking switch have the field; `null` when nothing was thought.
        reasoning_content: format.splitter.is_some().then(|| Some(split.reasoning).filter(|r| !r.is_empty())),
    };
    if let Some(calls) = calls {
        message.tool_calls = Some(tool_calls(&calls));
        message.content = calls.content;
        if output.finish_reason == FinishReason::Stop {
            finish_reason = "tool_calls";
        }
    }
    if let Some(echo) = format.echo.take() {
        message.content = Some(echo + message.content.as_deref().unwrap_or_default());
    }
    ChatChoice {
        index,
        message,
        logprobs: format.logprobs.then(|| chat_logprobs(&state.engine, &output.tokens)),
        finish_reason,
        extras: TokenExtras { schema_errors: output.schema_errors.clone(), ..format.extras.for_tokens(&output.tokens) },
    }
}

/// A chat body that passed every check before the engine.
pub(crate) struct ParsedChat {
    pub messages: Vec<ChatMessage>,
    pub parsed: ParsedParams,
    pub logprobs: Option<usize>,
    /// The parser for tool calls, when the request lets the model call tools.
    pub tools: Option<ToolUse>,
    /// `echo`: the final assistant message's content, sent ahead of the output.
    pub echo: Option<String>,
}

impl ParsedChat {
    /// Thinking asked for by name (`param`) on a model whose template cannot think is a 400,
    /// not a silent answer without it. OpenAI's route has no such field: there
    /// `enable_thinking` is a template variable a template may ignore.
    pub fn check_thinking(&self, state: &AppState, param: &str) -> Result<(), ApiError> {
        if self.parsed.params.enable_thinking == Some(true) && !state.thinking_template {
            let message =
                format!("`{}` does not support thinking: its chat template has no thinking switch", state.model_id);
            return Err(ApiError::invalid_param(param, message));
        }
        Ok(())
    }

    /// The engine request; the server submits `n` copies of it, copy `i` of a seeded request
    /// drawing from `seed + i`.
    pub fn request(&self) -> Request {
        engine_request(Prompt::Chat(self.messages.clone()), self.parsed.params.clone(), self.parsed.max_tokens, None)
    }
}

/// Everything a chat body must pass before it reaches the engine: the messages, the parsed
/// parameters (with `enable_thinking`, tools and any structured output) and the logprobs count.
pub(crate) fn parse_chat(mut req: ChatRequest, state: &AppState) -> Result<ParsedChat, ApiError> {
    refuse_unknown(&req.unknown)?;
    let logprobs = parse_logprobs_pair(req.logprobs, req.top_logprobs)?;
    let mut parsed = parse_common(&mut req.common, logprobs, &state.generation_defaults)?;
    let mut kwargs = req.chat_template_kwargs.unwrap_or_default();
    // `enable_thinking` also decides whether the reply is split into `reasoning_content`, so it
    // travels in its own field; the kwarg wins over the top-level convenience field.
    let kwarg_thinking = match kwargs.remove("enable_thinking") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(b),
        Some(_) => {
            return Err(ApiError::invalid_param(
                "chat_template_kwargs.enable_thinking",
                "enable_thinking must be a boolean",
            ))
        }
    };
    parsed.params.enable_thinking = kwarg_thinking.or(req.enable_thinking);
    parsed.params.chat_template_kwargs = kwargs;
    let renders_tools = state.engine.supports_tools();
    let tools = parse_tools(req.tools, req.tool_choice, req.parallel_tool_calls, &mut parsed.params, renders_tools)?;
    let continue_final = req.continue_final_message.unwrap_or(false);
    if continue_final && req.add_generation_prompt == Some(true) {
        return Err(ApiError::invalid_param(
            "continue_final_message",
            "continue_final_message and add_generation_prompt: true are mutually exclusive",
        ));
    }
    parsed.params.continue_final_message = continue_final;
    parsed.params.add_generation_prompt = req.add_generation_prompt.unwrap_or(!continue_final);
    let messages =
        req.messages.into_iter().enumerate().map(|(i, m)| chat_message(i, m)).collect::<Result<Vec<_>, _>>()?;
    if messages.is_empty() {
        return Err(ApiError::invalid_param("messages", "messages must not be empty"));
    }
    check_tool_order(&messages)?;
    let messages = match &tools.generic {
        Some(generic) => generic.rewrite(messages),
        None => messages,
    };
    // vLLM echoes the last message when its role is the one the reply takes, and a reply
    // here is always the assistant's.
    let echo = messages
        .last()
        .filter(|m| req.echo == Some(true) && m.role == "assistant" && !m.content.is_empty())
        .map(|m| m.content.clone());
    Ok(ParsedChat { messages, parsed, logprobs, tools: tools.parser, echo })
}

/// Templates that put `<think>` at the end of the generation prompt start the output inside
/// the think block.
pub(super) fn prompt_opens_think(state: &AppState, prompt: &[u32]) -> bool {
    let tail = &prompt[prompt.len().saturating_sub(4)..];
    let text = state.engine.tokenizer().decode(tail, false).unwrap_or_default();
    text.trim_end().ends_with("<think>")
}
