//! `ChatTemplate::render`: extra variables (vLLM's `chat_template_kwargs`) reach the template
//! without displacing the renderer's own, and a conversation the template refuses
//! (`raise_exception`) is told apart from a template that fails to run.

use entrobatch_model_runner::chat_template::{ChatMessage, ChatTemplate, RenderError, TemplateInputs};
use serde_json::json;

fn template(source: &str) -> ChatTemplate {
    ChatTemplate::new(source, None, None).expect("template compiles")
}

#[test]
fn kwargs_become_template_variables_of_any_json_type() {
    let tpl = template(
        "{{ messages[0].content }}|{{ persona }}|{{ level * 2 }}|{{ flags.tag }}|{{ tags | join(',') }}\
         |{{ 'gen' if add_generation_prompt else 'no' }}|{{ missing is defined }}",
    );
    let kwargs = json!({ "persona": "pirate", "level": 21, "flags": { "tag": "x" }, "tags": ["a", "b"],
        // A kwarg may not displace what the renderer sets itself.
        "messages": [], "add_generation_prompt": false });
    let inputs = TemplateInputs { add_generation_prompt: true, kwargs: kwargs.as_object(), ..Default::default() };
    let text = tpl.render(&[ChatMessage::new("user", "hi")], &inputs).expect("render");
    assert_eq!(text, "hi|pirate|42|x|a,b|gen|False");
}

#[test]
fn a_refusal_is_told_from_a_failure() {
    let alternating = template(
        "{% for m in messages %}{% if (m.role == 'user') != loop.index0 is even %}\
         {{ raise_exception('roles must alternate') }}{% endif %}{{ m.content }}{% endfor %}",
    );
    let inputs = TemplateInputs::default();
    let ok = [ChatMessage::new("user", "a"), ChatMessage::new("assistant", "b")];
    assert_eq!(alternating.render(&ok, &inputs).expect("alternating renders"), "ab");
    let twice = [ChatMessage::new("user", "a"), ChatMessage::new("user", "b")];
    match alternating.render(&twice, &inputs) {
        Err(RenderError::Raised { message }) => assert_eq!(message, "roles must alternate"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Calling a string is a template that cannot run, whatever the conversation.
    let broken = template("{{ messages[0].content() }}");
    match broken.render(&ok, &inputs) {
        Err(RenderError::Failed(detail)) => assert!(!detail.is_empty()),
        other => panic!("expected a failure, got {other:?}"),
    }
}
