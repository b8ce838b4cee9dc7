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

    let key_offset = |j: usize, buf_new: bool| -> usize {
        if buf_new {
            (span.query_start + j - span.context_len) * kv_row_len
        } else {
            let slot = span.block_table[j / block_size] as usize * block_size + j % block_size;
            slot * kv_row_len
        }
    };

    // scores[h * num_keys + j]
    let mut scores = vec![0f32; num_heads * num_keys];
    for j in 0..num_keys {
        let new = j >= span.context_len;
        let off = key_offset(j, new);
        let keys = if new { qkv.k } else { &cache.k[..] };
        for g in 0..num_kv_heads {
            let k = &keys[off + g * head_dim..off + (g + 1) * head_dim];
            for h in g * group..(g + 1) * group {
                let q = &q_row[h * head_dim..(h + 1) * head_dim];
                scores[h * num_keys + j] = dot(q, k) * scale;
            }
        }
    }
    let metrics = want_metrics.then(|| attention_metrics(&scores, num_heads, num_keys));
    for h in 0..num_heads {
        softmax_in_place(&mut scores[h * num_keys..(h + 1) * num_keys]);
    }
    out_row.fill(0.0);
    for j in 0..num_keys {
        let new = j >= span.context_len;
        let off = key_offset(j, new);
        let values = if new { qkv.v } else { &cache.v[..] };
        for g in 0..num_kv_heads {
            let v = &values[off + g * head_dim..off + (g + 1) * head_dim];
            for h in g * group..(g + 1) * group {
                let p = scores[h * num_keys + j];
                axpy(p, v, &mut out_row[h * head_dim..(h + 1) * head_dim]);
            }
        }
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

/// Eight independent accumulators let the compiler vectorise without reassociating floats.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += a[c * 8 + l] * b[c * 8 + l];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for idx in chunks * 8..a.len() {
        sum += a[idx] * b[idx];
    }
    sum
}

#[inline]
fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}
