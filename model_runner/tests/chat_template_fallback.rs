//! A GGUF without `tokenizer.chat_template`: its family's turn format when its vocabulary has
//! the turn tokens (Gemma's base models), a clear refusal when it has none.

mod common;

use std::collections::HashMap;

use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};
use entrobatch_model_runner::testing::spm_tokenizer_metadata;
use entrobatch_model_runner::tokenizer::Tokenizer;
use entrobatch_model_runner::{ChatMessage, ChatTemplate};

fn messages(pairs: &[(&str, &str)]) -> Vec<ChatMessage> {
    pairs.iter().map(|(role, content)| ChatMessage::new(*role, *content)).collect()
}

#[test]
fn a_vocabulary_without_turn_tokens_refuses_chat_and_says_what_to_do() {
    let md: HashMap<String, Value> = spm_tokenizer_metadata(true).into_iter().collect();
    let content =
        Content { magic: VersionedMagic::GgufV3, metadata: md, tensor_infos: HashMap::new(), tensor_data_offset: 0 };
    let tok = Tokenizer::from_gguf(&content).unwrap();
    assert!(tok.chat_template.is_none());
    let template = ChatTemplate::for_tokenizer(&tok).unwrap();
    let err = template.apply(&messages(&[("user", "hi")]), true, None).unwrap_err().to_string();
    assert!(err.contains("no chat template") && err.contains("/v1/completions"), "{err}");
}

/// Gemma 3 270M is a base model with no template; its turn tokens are in the vocabulary.
#[test]
fn gemma3_base_model_chats_in_gemma_turns() {
    let Some(tok) = common::load_tokenizer("gemma-3-270m-q4_k_m.gguf") else { return };
    assert!(tok.chat_template.is_none());
    let template = ChatTemplate::for_tokenizer(&tok).unwrap();
    let prompt = template
        .apply(
            &messages(&[("system", "Be brief."), ("user", " Hi "), ("assistant", "Hello."), ("user", "Bye")]),
            true,
            None,
        )
        .unwrap();
    assert_eq!(
        prompt,
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n\
         <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
    );
    let end_of_turn = tok.token_id("<end_of_turn>").unwrap();
    assert!(tok.eos_token_ids.contains(&end_of_turn), "generation stops at the end of the model's turn");
}
