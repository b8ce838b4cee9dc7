//! The properties the fuzz targets check, shared with the default tests
//! (tests/fuzz_regressions.rs includes this file), so every seed and every crash input
//! found is replayed by `cargo test` without nightly or libFuzzer.

use entrobatch::detokenizer::Detokenizer;
use entrobatch::Engine;
use entrobatch_server::{validate_body, AppState, Endpoint};

/// The endpoint an input's first byte picks.
pub fn endpoint(selector: u8) -> Endpoint {
    match selector % 4 {
        0 => Endpoint::Completions,
        1 => Endpoint::ChatCompletions,
        2 => Endpoint::Messages,
        _ => Endpoint::OllamaChat,
    }
}

/// First byte: endpoint (modulo 4: completions, chat, Anthropic's messages, Ollama's chat);
/// the rest is the body. Never panics,
/// never answers 5xx to client input, and whatever it accepts the engine loop can run.
pub fn http_request(state: &AppState, data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else { return };
    let endpoint = endpoint(selector);
    match validate_body(state, endpoint, body) {
        Err(e) => {
            assert!(e.status.is_client_error(), "{endpoint:?} answered {} to client input: {}", e.status, e.message)
        }
        Ok(req) => {
            let info = state.engine.info();
            assert!(!req.prompt_token_ids.is_empty());
            assert!(req.prompt_token_ids.iter().all(|&id| (id as usize) < info.model_config.vocab_size));
            assert!(req.params.max_tokens >= 1);
            assert!(req.prompt_token_ids.len() + req.params.max_tokens <= info.max_model_len);
        }
    }
}

/// First byte: mode. Even: the rest as u16 token ids (bit 1 set: some outside the
/// vocabulary); odd: the rest as text, encoded (must round-trip) and then streamed.
/// Streaming never splits a UTF-8 character: the deltas of in-vocabulary ids concatenate
/// to exactly the one-shot decode.
pub fn detokenizer(engine: &Engine, data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let tokenizer = engine.tokenizer();
    let vocab = engine.info().model_config.vocab_size as u32;
    let ids: Vec<u32> = if mode & 1 == 0 {
        rest.chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c.get(1).copied().unwrap_or(0)]) as u32)
            .map(|x| if mode & 2 == 0 { x % vocab } else { x.wrapping_mul(3) })
            .collect()
    } else {
        let text = String::from_utf8_lossy(rest);
        let Ok(ids) = tokenizer.encode(&text, false) else { return };
        let back = tokenizer.decode(&ids, false).expect("decode what encode produced");
        // A byte-level vocabulary may lack some byte tokens (SmolLM2 has none for 0x04, 0x06,
        // 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2 and 0xF5..=0xFF: bytes of unassigned planes or of
        // no valid UTF-8 at all); Hugging Face's BPE without an unknown token drops them, and
        // so do we. The round trip holds for the bytes the vocabulary can spell.
        let spells: [bool; 256] =
            std::array::from_fn(|b| tokenizer.tokenizer.token_to_id(&byte_level_char(b as u8).to_string()).is_some());
        let kept: Vec<u8> = text.bytes().filter(|&b| spells[b as usize]).collect();
        let spellable = String::from_utf8_lossy(&kept);
        assert_eq!(back, spellable, "encode/decode does not round-trip");
        ids
    };
    let mut detok = Detokenizer::new();
    let mut streamed = String::new();
    for &id in &ids {
        streamed.push_str(&detok.push(tokenizer, id));
    }
    streamed.push_str(&detok.flush(tokenizer));
    if ids.iter().all(|&id| id < vocab) {
        let whole = tokenizer.decode(&ids, true).expect("decode in-vocabulary ids");
        assert_eq!(streamed, whole, "streamed text differs from the one-shot decode of {ids:?}");
    }
}

/// The character GPT-2's byte-level BPE uses for byte `b` (`bytes_to_unicode`): printable
/// Latin-1 bytes stand for themselves, the others are numbered from U+0100 in byte order.
fn byte_level_char(b: u8) -> char {
    let printable = |x: u8| (b'!'..=b'~').contains(&x) || (0xA1..=0xAC).contains(&x) || x >= 0xAE;
    if printable(b) {
        return b as char;
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + rank).unwrap_or(char::REPLACEMENT_CHARACTER)
}
