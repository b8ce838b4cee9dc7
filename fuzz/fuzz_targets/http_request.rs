//! Hostile HTTP bodies: everything the server checks before a request reaches the engine
//! (UTF-8, JSON, OpenAI fields, `decoding`, tokenization, chat template, `Engine::validate`).
//! The properties live in src/checks.rs.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    entrobatch_fuzz::checks::http_request(entrobatch_fuzz::app_state(), data);
});
