//! Arbitrary text through the tokenizer and arbitrary token ids through the incremental
//! detokenizer. The properties live in src/checks.rs.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    entrobatch_fuzz::checks::detokenizer(entrobatch_fuzz::engine(), data);
});
