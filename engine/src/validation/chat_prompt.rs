//! A chat prompt's text: the template rendered with the request's tools and
//! `chat_template_kwargs`, a new assistant turn opened or, with `continue_final_message`, cut
//! right after the final message's content; and, when the template refuses the conversation
//! (`raise_exception`), which message it refused.

use entrobatch_model_runner::chat_template::{RenderError, TemplateInputs, RESERVED_VARIABLES};
use entrobatch_model_runner::{ChatMessage, ChatTemplate};

use crate::error::{EngineError, Result};
use crate::request::GenerationParams;

/// The chat template's text for `messages`: a new assistant turn opened, or, with
/// `continue_final_message`, cut right after the final message's content (its end-of-turn
/// dropped) so the output continues it.
pub(super) fn render_chat(
    template: &ChatTemplate,
    messages: &[ChatMessage],
    params: &GenerationParams,
) -> Result<String> {
    if let Some(name) = params.chat_template_kwargs.keys().find(|k| RESERVED_VARIABLES.contains(&k.as_str())) {
        return Err(EngineError::invalid(
            "chat_template_kwargs",
            format!("`{name}` is set from the request itself, not through chat_template_kwargs"),
        ));
    }
    let inputs = TemplateInputs {
        add_generation_prompt: params.add_generation_prompt,
        enable_thinking: params.enable_thinking,
        tools: params.tools.as_deref(),
        kwargs: Some(&params.chat_template_kwargs),
    };
    if !params.continue_final_message {
        return render_or_locate(template, messages, &inputs);
    }
    if params.add_generation_prompt {
        return Err(EngineError::invalid(
            "continue_final_message",
            "continue_final_message and add_generation_prompt are mutually exclusive",
        ));
    }
    let Some(last) = messages.last().filter(|m| m.role == "assistant" && !m.content.is_empty()) else {
        return Err(EngineError::invalid(
            "continue_final_message",
            "continue_final_message needs a final assistant message with content to continue",
        ));
    };
    let rendered = render_or_locate(template, messages, &inputs)?;
    match rendered.rfind(last.content.as_str()) {
        Some(at) => Ok(rendered[..at + last.content.len()].to_string()),
        None => Err(EngineError::invalid(
            "continue_final_message",
            "the chat template does not render the final message's content verbatim, so it cannot be continued",
        )),
    }
}

/// Renders, and when the template refuses the conversation, names the first message it
/// refuses: the end of the shortest prefix it will not render (templates check order as
/// they walk the messages, so once a prefix is refused every longer one is too, and a
/// binary search finds it in a logarithmic number of renders, paid only by failing
/// requests).
fn render_or_locate(template: &ChatTemplate, messages: &[ChatMessage], inputs: &TemplateInputs<'_>) -> Result<String> {
    match template.render(messages, inputs) {
        Ok(text) => Ok(text),
        Err(RenderError::Raised { message }) => {
            let refused =
                |end: usize| matches!(template.render(&messages[..=end], inputs), Err(RenderError::Raised { .. }));
            // Invariant: the prefix ending at `hi` is refused (at first, the whole).
            let (mut lo, mut hi) = (0, messages.len().saturating_sub(1));
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if refused(mid) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            Err(EngineError::MessageRejected { index: hi, reason: message })
        }
        Err(failed) => Err(EngineError::Tokenizer(failed.into())),
    }
}
