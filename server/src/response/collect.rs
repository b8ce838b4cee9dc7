//! A whole (non-streamed) response's choices: every copy's output once all have finished, and
//! the response's `usage`.

use entrobatch::{FinishReason, GenerationOutput, RequestHandle};

use super::error::ApiError;
use super::Usage;

/// Waits for every choice (`n` per prompt, prompt-major); the first failure fails the response.
/// `usage` counts each prompt's tokens once, however many copies it has.
pub async fn collect_choices<F>(
    choices: Vec<(RequestHandle, F)>,
    n: usize,
) -> Result<(Vec<(GenerationOutput, F)>, Usage), ApiError> {
    let outputs = futures::future::join_all(
        choices.into_iter().map(|(handle, format)| async move { (handle.collect_async().await, format) }),
    )
    .await;
    let mut usage = Usage::new(0, 0, 0);
    for (index, (output, _)) in outputs.iter().enumerate() {
        if output.finish_reason == FinishReason::Error {
            return Err(ApiError::internal(output.error.clone().unwrap_or_else(|| "generation failed".into())));
        }
        let first_copy = index % n.max(1) == 0;
        let (prompt, cached) = if first_copy { (output.prompt_token_ids.len(), output.cached_tokens) } else { (0, 0) };
        usage.add(prompt, cached, output.token_ids.len());
        usage.add_branch_tokens(output.strategy_stats.as_ref());
        usage.add_prediction(output.prediction);
    }
    Ok((outputs, usage))
}

/// A request that failed, or was refused after admission, as the error the client gets.
pub fn check_finish(reason: FinishReason, error: Option<&str>) -> Result<(), ApiError> {
    match (reason, error) {
        (FinishReason::Error, error) => Err(ApiError::internal(error.unwrap_or("generation failed"))),
        (FinishReason::Abort, Some(error)) => Err(ApiError::unavailable(error)),
        _ => Ok(()),
    }
}

/// [`check_finish`] of a collected output.
pub fn check_output(output: &GenerationOutput) -> Result<(), ApiError> {
    check_finish(output.finish_reason, output.error.as_deref())
}
