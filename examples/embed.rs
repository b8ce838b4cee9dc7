//! Embedding entrobatch in a program, without HTTP: start one engine, submit requests from
//! several threads at once (the engine batches them together), and stream each one's text
//! as it is generated.
//!
//! ```text
//! cargo run --release --example embed [-- path/to/model.gguf]
//! ```
//!
//! In async code use the same handle as a `futures::Stream`:
//! `while let Some(event) = handle.next().await { ... }` (with `futures::StreamExt`).

use std::sync::Arc;

use entrobatch::{
    ChatMessage, Engine, EngineConfig, EngineError, Event, GenerationParams, Prompt, Request, SamplingParams,
    ShutdownMode,
};

fn main() -> Result<(), EngineError> {
    let model = std::env::args().nth(1).unwrap_or_else(|| entrobatch::DEFAULT_MODEL_PATH.into());
    // One engine per process: it owns the model, the paged KV cache and the batching thread.
    // `Engine` is Send + Sync; share it with an Arc.
    let engine = Arc::new(Engine::start(EngineConfig::new(model))?);

    let questions = ["What is the capital of France?", "Name three primary colours.", "Write a haiku about rain."];
    let workers: Vec<_> = questions
        .iter()
        .enumerate()
        .map(|(i, question)| {
            let engine = engine.clone();
            let prompt = Prompt::Chat(vec![ChatMessage::new("user", *question)]);
            std::thread::spawn(move || -> Result<(), EngineError> {
                let params = GenerationParams {
                    sampling: SamplingParams {
                        temperature: 0.7,
                        top_p: 0.9,
                        seed: Some(i as u64),
                        ..SamplingParams::default()
                    },
                    max_tokens: 48,
                    ..GenerationParams::default()
                };
                // `submit` validates and tokenizes on this thread: bad input fails here, with
                // an `EngineError`, and never reaches the engine loop.
                let handle = engine.submit(Request::new(prompt, params))?;
                // The handle is a blocking Iterator of events. Dropping it early aborts the
                // request and frees its KV blocks.
                for event in handle {
                    match event {
                        Event::Tokens { text, .. } => println!("[request {i}] {text:?}"),
                        Event::PromptLogprobs(_) => {}
                        Event::Finished { reason, completion_tokens, error, .. } => {
                            println!("[request {i}] done: {} after {completion_tokens} tokens", reason.as_str());
                            if let Some(e) = error {
                                eprintln!("[request {i}] failed: {e}");
                            }
                        }
                    }
                }
                Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker thread panicked")?;
    }
    // Finish anything still in flight, then stop the loop thread.
    engine.shutdown(ShutdownMode::Finish);
    Ok(())
}
