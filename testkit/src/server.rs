//! Helpers for the server tests: an in-process server on a free loopback port, and a raw
//! blocking HTTP/1.1 client (raw so tests can send what no polite client would: broken
//! JSON, invalid UTF-8, oversized bodies, and hang up mid-stream).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use candle_core::quantized::gguf_file;
use entrobatch::model_runner::testing::{write_tiny_gguf, TinyModelSpec};
use entrobatch::{Engine, EngineConfig};
use entrobatch_server::{serve, ServerConfig};
use serde_json::Value;

pub fn smollm2_path() -> PathBuf {
    let path = crate::repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.is_file(), "{} missing: run `scripts/fetch-model smollm2`", path.display());
    path
}

/// A tiny random-weight model in a fresh temp dir.
pub fn tiny_model(name: &str, context_length: usize) -> PathBuf {
    write_tiny(name, &TinyModelSpec { context_length, ..TinyModelSpec::llama() })
}

/// A tiny model whose GGUF also carries `metadata` (a chat template, sampling
/// recommendations), replacing generated keys of the same name.
pub fn tiny_model_with(name: &str, metadata: Vec<(&str, gguf_file::Value)>) -> PathBuf {
    let extra_metadata = metadata.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    write_tiny(name, &TinyModelSpec { extra_metadata, ..TinyModelSpec::llama() })
}

fn write_tiny(name: &str, spec: &TinyModelSpec) -> PathBuf {
    let dir = entrobatch::model_runner::testing::unique_test_path(crate::tmp_dir(), &format!("server-test-{name}"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{name}.gguf"));
    write_tiny_gguf(&path, spec).expect("write tiny gguf");
    path
}

/// Small KV cache: the tests need a few sequences, not 1 GiB.
pub fn engine_config(path: PathBuf) -> EngineConfig {
    let mut config = EngineConfig::new(path);
    config.kv_cache_bytes = 64 << 20;
    config
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub engine: Arc<Engine>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    pub fn start(config: EngineConfig) -> Self {
        Self::start_with(config, ServerConfig::default())
    }

    pub fn start_with(config: EngineConfig, server_config: ServerConfig) -> Self {
        let engine = Arc::new(Engine::start(config).expect("engine starts"));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = engine.clone();
        let thread = std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
                addr_tx.send(listener.local_addr().expect("addr")).expect("send addr");
                serve(listener, served, server_config, async move {
                    let _ = stopped.await;
                })
                .await
                .expect("serve");
            });
        });
        let addr = addr_rx.recv_timeout(Duration::from_secs(30)).expect("server address");
        Self { addr, engine, stop: Some(stop), thread: Some(thread) }
    }

    /// Sends the shutdown signal (as SIGTERM would) without waiting for the server to stop.
    pub fn begin_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn post(&self, path: &str, body: &[u8]) -> HttpResponse {
        request(self.addr, "POST", path, body)
    }

    pub fn post_json(&self, path: &str, body: &Value) -> HttpResponse {
        self.post(path, body.to_string().as_bytes())
    }

    pub fn get(&self, path: &str) -> HttpResponse {
        request(self.addr, "GET", path, b"")
    }

    /// The value of one series on `/metrics`, e.g. `entrobatch_kv_blocks_used` or
    /// `entrobatch_requests_total{outcome="abort"}`, written without the `model_name` label
    /// that every series carries.
    pub fn metric(&self, series: &str) -> f64 {
        let text = self.get("/metrics").text();
        text.lines()
            .map(without_model_name)
            .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')).map(str::to_string))
            .unwrap_or_else(|| panic!("series {series} not on /metrics:\n{text}"))
            .trim()
            .parse()
            .expect("metric value")
    }

    /// Polls `/metrics` until `series` equals `value`, or panics after `timeout`.
    pub fn wait_for_metric(&self, series: &str, value: f64, timeout: Duration) {
        let start = Instant::now();
        loop {
            let now = self.metric(series);
            if now == value {
                return;
            }
            assert!(start.elapsed() < timeout, "{series} stayed at {now}, expected {value}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A `/metrics` sample line with its leading `model_name` label removed.
pub fn without_model_name(line: &str) -> String {
    let Some(open) = line.find("{model_name=\"") else { return line.to_string() };
    let value_start = open + "{model_name=\"".len();
    // The value's end: the first quote not escaped by a backslash.
    let mut end = value_start;
    let bytes = line.as_bytes();
    while end < bytes.len() && !(bytes[end] == b'"' && bytes[end - 1] != b'\\') {
        end += 1;
    }
    let rest = &line[(end + 1).min(line.len())..];
    match rest.strip_prefix(',') {
        Some(labels) => format!("{}{{{labels}", &line[..open]),
        None => format!("{}{}", &line[..open], rest.strip_prefix('}').unwrap_or(rest)),
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: String,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// The `data:` payloads of an SSE body.
    pub fn sse_data(&self) -> Vec<String> {
        self.text().lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_string).collect()
    }
}

/// Opens a connection and sends one JSON request (`Connection: close`).
pub fn send(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> TcpStream {
    send_typed(addr, method, path, "application/json", body)
}

/// `send` with any `Content-Type`.
pub fn send_typed(addr: SocketAddr, method: &str, path: &str, content_type: &str, body: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(300))).expect("timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // The server may answer (413) and close before reading a large body: a failed write
    // still leaves its response to read.
    let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(body));
    stream
}

/// A request with extra header lines (`name`, `value`).
pub fn request_with_headers(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).expect("send");
    read_response(stream)
}

pub fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> HttpResponse {
    read_response(send(addr, method, path, body))
}

pub fn request_typed(addr: SocketAddr, path: &str, content_type: &str, body: &[u8]) -> HttpResponse {
    read_response(send_typed(addr, "POST", path, content_type, body))
}

pub fn read_response(mut stream: TcpStream) -> HttpResponse {
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if raw.is_empty() => panic!("no response: {e}"),
            Err(_) => break,
        }
    }
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> HttpResponse {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("response head");
    let headers = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = headers.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("status code");
    let mut body = raw[split + 4..].to_vec();
    if headers.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    HttpResponse { status, headers, body }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        let end = (start + size).min(data.len());
        out.extend_from_slice(&data[start..end]);
        data = &data[(end + 2).min(data.len())..];
    }
    out
}
