//! Parameter defaults, validation messages and the serde wire format.

use entrobatch_sampler::{SamplerError, SamplingParams};

fn rejected_field(p: &SamplingParams) -> &'static str {
    match p.validate(100) {
        Err(SamplerError::InvalidParam { field, message }) => {
            let shown = p.validate(100).unwrap_err().to_string();
            assert!(shown.contains(field), "`{shown}` should name `{field}`");
            assert!(!message.is_empty());
            field
        }
        other => panic!("expected InvalidParam for {p:?}, got {other:?}"),
    }
}

#[test]
fn defaults_are_off_and_valid() {
    let d = SamplingParams::default();
    assert_eq!((d.temperature, d.top_p, d.repetition_penalty), (1.0, 1.0, 1.0));
    assert_eq!((d.top_k, d.min_p, d.no_repeat_ngram_size), (0, 0.0, 0));
    assert_eq!(d.validate(10), Ok(()));
    assert_eq!(SamplingParams::greedy().temperature, 0.0);
    let edges = SamplingParams {
        top_p: 1.0,
        min_p: 1.0,
        presence_penalty: -2.0,
        frequency_penalty: 2.0,
        logprobs: Some(20),
        logit_bias: vec![(99, -100.0)],
        ..Default::default()
    };
    assert_eq!(edges.validate(100), Ok(()));
}

#[test]
fn out_of_range_values_are_rejected_by_name() {
    let d = SamplingParams::default;
    let cases: Vec<(SamplingParams, &str)> = vec![
        (SamplingParams { temperature: -0.1, ..d() }, "temperature"),
        (SamplingParams { temperature: f32::NAN, ..d() }, "temperature"),
        (SamplingParams { temperature: f32::INFINITY, ..d() }, "temperature"),
        (SamplingParams { top_p: 0.0, ..d() }, "top_p"),
        (SamplingParams { top_p: 1.01, ..d() }, "top_p"),
        (SamplingParams { top_p: f32::NAN, ..d() }, "top_p"),
        (SamplingParams { min_p: -0.01, ..d() }, "min_p"),
        (SamplingParams { min_p: 1.5, ..d() }, "min_p"),
        (SamplingParams { min_p: f32::NAN, ..d() }, "min_p"),
        (SamplingParams { repetition_penalty: 0.0, ..d() }, "repetition_penalty"),
        (SamplingParams { repetition_penalty: f32::NAN, ..d() }, "repetition_penalty"),
        (SamplingParams { presence_penalty: 2.5, ..d() }, "presence_penalty"),
        (SamplingParams { presence_penalty: f32::NAN, ..d() }, "presence_penalty"),
        (SamplingParams { frequency_penalty: -2.01, ..d() }, "frequency_penalty"),
        (SamplingParams { logprobs: Some(21), ..d() }, "logprobs"),
        (SamplingParams { logit_bias: vec![(100, 1.0)], ..d() }, "logit_bias"),
        (SamplingParams { logit_bias: vec![(3, f32::NEG_INFINITY)], ..d() }, "logit_bias"),
    ];
    for (params, field) in cases {
        assert_eq!(rejected_field(&params), field, "{params:?}");
    }
}

#[test]
fn json_fills_missing_fields_with_defaults_and_round_trips() {
    let p: SamplingParams =
        serde_json::from_str(r#"{"temperature": 0.0, "top_k": 5, "logit_bias": [[7, -1.5]]}"#).expect("valid json");
    assert_eq!(p.temperature, 0.0);
    assert_eq!(p.top_k, 5);
    assert_eq!(p.logit_bias, vec![(7, -1.5)]);
    assert_eq!(p.top_p, 1.0);
    assert_eq!(p.seed, None);
    let back: SamplingParams = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
    assert_eq!(back, p);
}
