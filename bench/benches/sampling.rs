//! The sampler's passes over whole rows of logits, on SmolLM2's (49,152) and Qwen2.5's (151,936)
//! vocabularies, 64 rows as a decode step at 64 sequences hands them over: a draw at T = 1, a
//! draw at T = 0.8 with top-p 0.95, one with Ollama's defaults (top-k 40, top-p 0.9), entropy and varentropy (entropix, MTI, branching, every
//! step), and the log-partition (logprobs). Each case runs `BENCH_ROUNDS` times (default 5)
//! and keeps its fastest round.
//! Env: BENCH_ROUNDS.

mod common;

use std::hint::black_box;
use std::time::Instant;

use common::random;

use entrobatch::sampler::{entropy_varentropy_nats, logsumexp, sample_filtered, FilterConfig};

/// One pass over a row; the `usize` is the row's index (it varies the draw's uniform).
type Pass<'a> = dyn Fn(&[f32], usize) -> f32 + 'a;

const ROWS: usize = 64;
const VOCABS: [(&str, usize); 2] = [("smollm2", 49_152), ("qwen", 151_936)];

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let t1 = FilterConfig { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0 };
    let nucleus = FilterConfig { temperature: 0.8, top_k: 0, top_p: 0.95, min_p: 0.0 };
    // Ollama's defaults.
    let ollama = FilterConfig { temperature: 0.8, top_k: 40, top_p: 0.9, min_p: 0.0 };
    println!("{:<8} {:<22} {:>10} {:>10}", "vocab", "pass", "us/row", "ns/token");
    for (model, vocab) in VOCABS {
        // Logits of a small model's spread: random values scaled to about [-10, 10).
        let rows: Vec<Vec<f32>> =
            (0..ROWS).map(|r| random(vocab, r as u64 + 1).into_iter().map(|v| v * 100.0).collect()).collect();
        let cases: [(&str, &Pass<'_>); 5] = [
            ("draw T=1", &|row, i| sample_filtered(row, &t1, (i as f64 * 0.618).fract()) as f32),
            ("draw T=0.8 top-p 0.95", &|row, i| sample_filtered(row, &nucleus, (i as f64 * 0.618).fract()) as f32),
            ("draw T=0.8 k 40 p 0.9", &|row, i| sample_filtered(row, &ollama, (i as f64 * 0.618).fract()) as f32),
            ("entropy + varentropy", &|row, _| entropy_varentropy_nats(row).1),
            ("log-partition", &|row, _| logsumexp(row)),
        ];
        for (name, pass) in cases {
            let best = (0..rounds)
                .map(|_| {
                    let start = Instant::now();
                    for (i, row) in rows.iter().enumerate() {
                        black_box(pass(black_box(row), i));
                    }
                    start.elapsed().as_secs_f64() / ROWS as f64
                })
                .fold(f64::INFINITY, f64::min);
            println!("{model:<8} {name:<22} {:>10.1} {:>10.2}", best * 1e6, best * 1e9 / vocab as f64);
        }
    }
}
