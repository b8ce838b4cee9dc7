//! The playground route: `GET /` serves the self-contained page, and `GET /playground/info`
//! reports whether WeDLM is usable, which must follow the checkpoint (a GGUF model has no
//! mask token, a WeDLM checkpoint names one). The page's behaviour in a browser is checked
//! by `scripts/playground-check`, outside the default test command.

mod server_support;

use entrobatch::model_runner::testing_hf::{write_tiny_hf, TinyHfSpec};
use server_support::{engine_config, tiny_model, TestServer};

fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
    headers.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
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
