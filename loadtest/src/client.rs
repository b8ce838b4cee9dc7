//! A minimal streaming HTTP/1.1 client over hyper: one connection per request, the
//! response's SSE `data:` lines timed as they arrive.

use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::net::TcpStream;

use super::target::Target;

/// One request as the client saw it; times in seconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RequestOutcome {
    pub index: usize,
    /// Send time relative to the start of the run.
    pub start: f64,
    pub ttft: Option<f64>,
    pub e2el: f64,
    /// Gaps between successive token chunks.
    pub itl: Vec<f64>,
    pub prompt_tokens: usize,
    /// Prompt tokens the server found in its prefix cache (`usage.prompt_tokens_details`).
    #[serde(default)]
    pub cached_tokens: usize,
    pub output_tokens: usize,
    /// Set when the request failed or its response was incomplete.
    pub error: Option<String>,
    /// The generated text (a conversation's next turn resends it); not in the report.
    #[serde(skip)]
    pub text: String,
}

/// POSTs `body` (with `X-Session-Id: session` when given) and reads the SSE stream to its end.
pub async fn stream_request(
    target: &Target,
    route: &str,
    body: &Value,
    session: Option<&str>,
    out: &mut RequestOutcome,
) -> Result<()> {
    let started = Instant::now();
    let stream = TcpStream::connect(target.addr).await.with_context(|| format!("connect {}", target.addr))?;
    stream.set_nodelay(true)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let conn = tokio::spawn(conn);
    let mut request =
        hyper::Request::post(target.path(route)).header(HOST, &target.host).header(CONTENT_TYPE, "application/json");
    if let Some(session) = session {
        request = request.header("x-session-id", session);
    }
    let request = request.body(Full::new(Bytes::from(body.to_string())))?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let mut body = response.into_body();
    if !status.is_success() {
        let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let message = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        bail!("HTTP {}: {message}", status.as_u16());
    }
    let mut sse = SseReader::default();
    let mut last_token: Option<Instant> = None;
    let mut token_chunks = 0usize;
    let mut usage_tokens: Option<usize> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.context("reading the stream")?;
        let Some(data) = frame.data_ref() else { continue };
        for payload in sse.feed(data) {
            let now = Instant::now();
            if payload == "[DONE]" {
                sse.done = true;
                continue;
            }
            let chunk: Value = serde_json::from_str(&payload).with_context(|| format!("bad chunk {payload:?}"))?;
            if let Some(message) = chunk.get("error").and_then(|e| e["message"].as_str()) {
                bail!("stream error: {message}");
            }
            if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
                usage_tokens = usage["completion_tokens"].as_u64().map(|n| n as usize);
                out.prompt_tokens = usage["prompt_tokens"].as_u64().unwrap_or(0) as usize;
                out.cached_tokens = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0) as usize;
            }
            let Some(choice) = chunk["choices"].as_array().and_then(|c| c.first()) else { continue };
            // A completion chunk carries `text`; a chat chunk `delta.content`, and chat's first
            // chunk (the role alone) is not a token.
            let text = choice["text"].as_str().or_else(|| choice["delta"]["content"].as_str());
            let is_token_chunk = choice["finish_reason"].is_null()
                && (choice.get("text").is_some() || text.is_some_and(|t| !t.is_empty()));
            out.text.push_str(text.unwrap_or_default());
            if is_token_chunk {
                token_chunks += 1;
                match last_token {
                    None => out.ttft = Some((now - started).as_secs_f64()),
                    Some(prev) => out.itl.push((now - prev).as_secs_f64()),
                }
                last_token = Some(now);
            }
        }
    }
    out.e2el = started.elapsed().as_secs_f64();
    out.output_tokens = usage_tokens.unwrap_or(token_chunks);
    conn.abort();
    if !sse.done {
        return Err(anyhow!("the stream ended without [DONE]"));
    }
    Ok(())
}

/// Splits a byte stream into SSE events and returns their `data:` payloads.
#[derive(Default)]
struct SseReader {
    buf: Vec<u8>,
    done: bool,
}

impl SseReader {
    fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut payloads = Vec::new();
        while let Some(end) = find(&self.buf, b"\n\n") {
            let event: Vec<u8> = self.buf.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&event);
            let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
            if !data.is_empty() {
                payloads.push(data.join("\n"));
            }
        }
        payloads
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::SseReader;

    #[test]
    fn sse_events_split_across_reads() {
        let mut r = SseReader::default();
        assert!(r.feed(b"data: {\"a\"").is_empty());
        assert_eq!(r.feed(b":1}\n\ndata: [DONE]\n\n: comment\n\n"), vec!["{\"a\":1}", "[DONE]"]);
    }
}
