//! The playground route: `GET /` serves the self-contained page, and `GET /playground/info`
//! reports whether WeDLM is usable, which must follow the checkpoint (a GGUF model has no
//! mask token, a WeDLM checkpoint names one). The page's behaviour in a browser is checked
//! by `scripts/playground-check`, outside the default test command; here the page's script
//! is checked by its text, e.g. that the "output format" setting reaches the request body.

use entrobatch_testkit::server as server_support;

use entrobatch::model_runner::testing_hf::{write_tiny_hf, TinyHfSpec};
use server_support::{engine_config, tiny_model, TestServer};

fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
    headers.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// The text of the page script's top-level `function name(...) { ... }` (or `async function`),
/// up to its closing brace at the start of a line.
fn js_function<'a>(html: &'a str, name: &str) -> &'a str {
    let start = [format!("\nfunction {name}("), format!("\nasync function {name}(")]
        .iter()
        .find_map(|head| html.find(head.as_str()))
        .unwrap_or_else(|| panic!("the page has no function {name}"));
    let len = html[start..].find("\n}\n").unwrap_or_else(|| panic!("function {name} never closes"));
    &html[start..start + len + 2]
}

#[test]
fn root_serves_the_page_and_info_follows_the_model() {
    let server = TestServer::start(engine_config(tiny_model("playground", 256)));

    let page = server.get("/");
    assert_eq!(page.status, 200, "{}", page.text());
    let content_type = header(&page.headers, "content-type").unwrap_or_default();
    assert!(content_type.starts_with("text/html"), "content-type {content_type:?}");
    let html = page.text();
    assert!(html.starts_with("<!doctype html>"), "{}", &html[..html.len().min(200)]);
    assert!(html.contains("<title>entrobatch playground</title>"));
    // Self-contained: no external script, stylesheet or font is fetched.
    assert!(!html.contains("<script src") && !html.contains("<link "), "the page must not load external resources");
    // It talks to the real endpoints with metrics on, and fetches its model info.
    for needle in ["id=\"prompt\"", "id=\"generate\"", "/v1/chat/completions", "return_metrics", "/playground/info"] {
        assert!(html.contains(needle), "page lacks {needle}");
    }

    // Structured output is a shared setting: a select with its five formats, the inputs the
    // formats need (the schema prefilled with a usable example), read into `common` with the
    // other shared settings and sent by `requestBody` as `response_format` or
    // `structured_outputs`; a schema that does not parse stops the request with a message.
    assert!(html.contains("<select id=\"output-format\">"), "page lacks the output format select");
    for option in [
        "<option value=\"text\" selected>free text</option>",
        "<option value=\"json_object\">JSON object</option>",
        "<option value=\"json_schema\">JSON schema</option>",
        "<option value=\"regex\">regex</option>",
        "<option value=\"choice\">choice</option>",
    ] {
        assert!(html.contains(option), "output format lacks {option}");
    }
    for id in ["id=\"format-schema\"", "id=\"format-regex\"", "id=\"format-choice\""] {
        assert!(html.contains(id), "page lacks {id}");
    }
    let schema_start = html.find("id=\"format-schema\"").unwrap();
    let schema = &html[schema_start..];
    let schema_end = schema.find("</textarea>").expect("the schema textarea closes");
    let schema = &schema[schema.find('>').unwrap() + 1..schema_end];
    let schema: serde_json::Value = serde_json::from_str(schema).expect("the prefilled schema is JSON");
    assert_eq!(schema["type"], "object", "{schema}");
    assert_eq!(schema["properties"]["name"]["type"], "string", "{schema}");
    assert_eq!(schema["properties"]["age"]["type"], "integer", "{schema}");
    assert_eq!(schema["properties"]["age"]["minimum"], 0, "{schema}");
    assert_eq!(schema["properties"]["age"]["maximum"], 120, "{schema}");
    assert_eq!(schema["required"], serde_json::json!(["name", "age"]), "{schema}");
    assert_eq!(schema["additionalProperties"], false, "{schema}");

    let read = js_function(&html, "readOutputFormat");
    for needle in [
        "$(\"#output-format\").value",
        "JSON.parse($(\"#format-schema\").value)",
        "throw new Error(`the JSON schema does not parse",
        "{ type: \"json_object\" }",
        "{ type: \"json_schema\", json_schema: { name: \"playground\", schema } }",
        "{ regex }",
        "$(\"#format-choice\").value.split(\",\")",
        "{ choice }",
    ] {
        assert!(read.contains(needle), "readOutputFormat lacks {needle}:\n{read}");
    }
    let body = js_function(&html, "requestBody");
    for needle in ["body.response_format = common.responseFormat", "body.structured_outputs = common.structuredOutputs"]
    {
        assert!(body.contains(needle), "requestBody lacks {needle}:\n{body}");
    }
    // Read inside generate's try, so a bad schema shows in the error banner and sends nothing.
    let generate = js_function(&html, "generate");
    let collected = &generate[..generate.find("} catch (e) {").expect("generate catches bad settings")];
    assert!(collected.contains("...readOutputFormat()"), "generate does not read the output format:\n{generate}");
    assert!(generate.contains("showGlobalError(e.message)"), "{generate}");
    // A 400 for an invalid schema or regex shows the OpenAI error's message and parameter.
    let errors = js_function(&html, "errorMessage");
    assert!(errors.contains("parsed.error.message") && errors.contains("e.param"), "{errors}");

    let info = server.get("/playground/info");
    assert_eq!(info.status, 200, "{}", info.text());
    let info = info.json();
    assert_eq!(info["model"], "playground");
    assert_eq!(info["wedlm"], false, "a GGUF llama has no mask token: {info}");
    assert!(info["max_model_len"].as_u64().is_some_and(|n| n > 0), "{info}");

    // Other routes still answer as before: the page did not swallow the fallback.
    assert_eq!(server.get("/no-such-page").status, 404);
    drop(server);

    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("entrobatch-playground-wedlm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    write_tiny_hf(&dir, &TinyHfSpec::qwen3()).expect("write tiny WeDLM checkpoint");
    let server = TestServer::start(engine_config(dir.clone()));
    let info = server.get("/playground/info").json();
    assert_eq!(info["wedlm"], true, "a WeDLM checkpoint names a mask token: {info}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
