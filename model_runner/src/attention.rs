use rayon::prelude::*;

use crate::batch::SeqSpan;
use crate::kv_cache::LayerKv;
use crate::metrics::{attention_metrics, AttnMetrics};

/// Shapes shared by every row of one layer's attention.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
}

/// The current step's rotated Q and K, and V, all `[rows, heads, head_dim]`.
pub struct StepQkv<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
}

/// Paged attention over a packed varlen batch. Keys before a span's `context_len` come from
/// the cache through its block table; the span's own rows come straight from this step's K/V,
/// so rows that are never persisted (slot -1) need no scratch slots. One rayon task per query
/// row; the query heads that share a KV head are scored together so each key row is loaded once.
///
/// Returns the attention output `[rows, heads, head_dim]` and, when `collect_metrics`, the
/// attention metrics of the last row of every span that asks for them.
pub fn paged_attention(
    shape: AttentionShape,
    qkv: &StepQkv<'_>,
    cache: &LayerKv,
    spans: &[SeqSpan],
    collect_metrics: bool,
) -> (Vec<f32>, Vec<Option<AttnMetrics>>) {
    let rows = qkv.q.len() / (shape.num_heads * shape.head_dim);
    let q_row_len = shape.num_heads * shape.head_dim;
    let mut row_span = vec![0usize; rows];
    for (s, span) in spans.iter().enumerate() {
        row_span[span.query_start..span.query_start + span.query_len].fill(s);
    }
    let mut out = vec![0f32; rows * q_row_len];
    let metrics: Vec<(usize, AttnMetrics)> = out
        .par_chunks_mut(q_row_len)
        .enumerate()
        .filter_map(|(row, out_row)| {
            let span = &spans[row_span[row]];
            let is_last = row + 1 == span.query_start + span.query_len;
            let want = collect_metrics && span.want_attn_metrics && is_last;
            attend_row(shape, qkv, cache, span, row, out_row, want).map(|m| (row_span[row], m))
        })
        .collect();
    let mut per_span = vec![None; spans.len()];
    for (s, m) in metrics {
        per_span[s] = Some(m);
    }
    (out, per_span)
}

fn attend_row(
    shape: AttentionShape,
    qkv: &StepQkv<'_>,
    cache: &LayerKv,
    span: &SeqSpan,
    row: usize,
    out_row: &mut [f32],
    want_metrics: bool,
) -> Option<AttnMetrics> {
    let AttentionShape { num_heads, num_kv_heads, head_dim, block_size } = shape;
    let group = num_heads / num_kv_heads;
    let kv_row_len = num_kv_heads * head_dim;
    let i = row - span.query_start;
    let num_keys = span.context_len + i + 1;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let q_row = &qkv.q[row * num_heads * head_dim..(row + 1) * num_heads * head_dim];

    // Where key j's K/V row starts: in the cache through the block table, or, for this step's
    // own rows, in the step's K/V (resolved once, not per head).
    let starts: Vec<(bool, usize)> = (0..num_keys)
        .map(|j| {
            if j < span.context_len {
                let slot = span.block_table[j / block_size] as usize * block_size + j % block_size;
                (false, slot * kv_row_len)
            } else {
                (true, (span.query_start + j - span.context_len) * kv_row_len)
            }
        })
        .collect();
    // scores[h * num_keys + j]
    let mut scores = vec![0f32; num_heads * num_keys];
    for (j, &(new, off)) in starts.iter().enumerate() {
        let keys = if new { qkv.k } else { &cache.k[..] };
        let k_row = &keys[off..off + kv_row_len];
        for h in 0..num_heads {
            let g = h / group;
            let k = &k_row[g * head_dim..(g + 1) * head_dim];
            scores[h * num_keys + j] = dot(&q_row[h * head_dim..(h + 1) * head_dim], k) * scale;
        }
    }
    let metrics = want_metrics.then(|| attention_metrics(&scores, num_heads, num_keys));
    for h in 0..num_heads {
        softmax_in_place(&mut scores[h * num_keys..(h + 1) * num_keys]);
    }
    for h in 0..num_heads {
        let g = h / group;
        let value = |j: usize| -> &[f32] {
            let (new, off) = starts[j];
            let values = if new { qkv.v } else { &cache.v[..] };
            &values[off + g * head_dim..off + (g + 1) * head_dim]
        };
        weighted_sum(&scores[h * num_keys..(h + 1) * num_keys], value, &mut out_row[h * head_dim..(h + 1) * head_dim]);
    }
    metrics
}

fn softmax_in_place(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= inv);
}

/// Eight fused lane accumulators (one vector register) summed as a tree: vectorises without
/// reassociating floats, and each key's score is one fma chain instead of a mul and an add.
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (a8, a_tail) = a.as_chunks::<8>();
    let (b8, b_tail) = b.as_chunks::<8>();
    for (x, y) in a8.iter().zip(b8) {
        for l in 0..8 {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    let mut sum = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (x, y) in a_tail.iter().zip(b_tail) {
        sum = x.mul_add(*y, sum);
    }
    sum
}

/// `out = sum_j probs[j] * value(j)`. Each chunk of the output row stays in registers over
/// all keys (the widest chunk first: 64 floats are 8 independent fma chains), instead of
/// loading and storing the output row once per key.
fn weighted_sum<'a>(probs: &[f32], value: impl Fn(usize) -> &'a [f32], out: &mut [f32]) {
    let mut d0 = weighted_chunks::<64>(probs, &value, out, 0);
    d0 = weighted_chunks::<16>(probs, &value, out, d0);
    for d in d0..out.len() {
        out[d] = probs.iter().enumerate().fold(0.0, |acc, (j, &p)| p.mul_add(value(j)[d], acc));
    }
}

/// `weighted_sum` for the `W`-wide chunks of `out` from `d0` on; returns where it stopped.
fn weighted_chunks<'a, const W: usize>(
    probs: &[f32],
    value: &impl Fn(usize) -> &'a [f32],
    out: &mut [f32],
    mut d0: usize,
) -> usize {
    while d0 + W <= out.len() {
        let mut acc = [0f32; W];
        for (j, &p) in probs.iter().enumerate() {
            if let Some(v) = value(j)[d0..].first_chunk::<W>() {
                for d in 0..W {
                    acc[d] = p.mul_add(v[d], acc[d]);
                }
            }
        }
        out[d0..d0 + W].copy_from_slice(&acc);
        d0 += W;
    }
    d0
}
