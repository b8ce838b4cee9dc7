use std::ops::Range;

use rayon::prelude::*;

use crate::attention_f16;
use crate::attention_kernel::KvKernel;
use crate::attention_q8;
use crate::attention_simd as simd;
use crate::batch::SeqSpan;
use crate::error::{ModelError, Result};
use crate::kv_cache::LayerKv;
use crate::metrics::{attention_metrics_padded, AttnMetrics};
use crate::softmax::softmax_rows;

/// Shapes shared by every row of one layer's attention.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
    /// Multiplies `q . k` before the softmax.
    pub scale: f32,
    /// A row attends only to the last `window` keys, its own included (sliding-window layers).
    pub window: Option<usize>,
    /// The KV cache group of the layer: which of a span's block tables it reads through.
    pub kv_group: usize,
}

impl AttentionShape {
    /// The keys row `i` of a span attends to: `first..num_keys` of its `context_len + i + 1`.
    pub fn attended_keys(&self, span: &SeqSpan, i: usize) -> Range<usize> {
        let num_keys = span.context_len + i + 1;
        let first = self.window.map_or(0, |w| num_keys.saturating_sub(w));
        first..num_keys
    }
}

/// Paged attention over a packed varlen batch: `q` is the step's rotated queries
/// `[rows, heads, head_dim]`. Keys before a span's `context_len` come from the cache through
/// its block table; the span's own rows come from `step`, this step's K/V in the cache's value
/// type (so a key reads the same whether or not it is already cached), so rows that are never
/// persisted (slot -1) need no scratch slots. One rayon task per query row (over the f16 and
/// q8 caches, up to `TILE_ROWS` rows of one sequence's prompt chunk, which share each tile of
/// keys: `attention_runs::score_then_sum`), or, when the step has fewer rows than the pool has
/// threads, per run of a row's heads, one run per thread (a
/// decode step of one sequence would otherwise leave every core but one idle; more runs read a
/// KV head's keys from memory in more tasks, so one run per thread is fastest
/// (docs/benchmarks/notebook.md, "2026-11-26 09:04-10:00 UTC")). Within a task, the query
/// heads that share a KV head are scored together so each key row is loaded once. Each head's
/// operations are the same whichever task computes it, so the split does not change a bit.
///
/// Returns the attention output `[rows, heads, head_dim]` and, when `collect_metrics`, the
/// attention metrics of the last row of every span that asks for them.
pub fn paged_attention(
    shape: AttentionShape,
    q: &[f32],
    step: &LayerKv,
    cache: &LayerKv,
    spans: &[SeqSpan],
    collect_metrics: bool,
) -> Result<(Vec<f32>, Vec<Option<AttnMetrics>>)> {
    paged_attention_with(KvKernel::detect(), shape, q, step, cache, spans, collect_metrics)
}

/// `paged_attention` with the f16 and 8-bit caches' kernel chosen (tests compare them).
pub fn paged_attention_with(
    kv_kernel: KvKernel,
    shape: AttentionShape,
    q: &[f32],
    step: &LayerKv,
    cache: &LayerKv,
    spans: &[SeqSpan],
    collect_metrics: bool,
) -> Result<(Vec<f32>, Vec<Option<AttnMetrics>>)> {
    Ok(match (step, cache) {
        (LayerKv::F32(s), LayerKv::F32(c)) => attend_all(shape, q, spans, collect_metrics, |tasks| {
            tasks.into_iter().map(|task| attend_row(shape, (&s.k, &s.v), (&c.k, &c.v), task)).collect()
        }),
        (LayerKv::F16(s), LayerKv::F16(c)) => attend_all(shape, q, spans, collect_metrics, |tasks| {
            attention_f16::attend_rows(kv_kernel, shape, s, c, tasks)
        }),
        (LayerKv::Q8(s), LayerKv::Q8(c)) => attend_all(shape, q, spans, collect_metrics, |tasks| {
            attention_q8::attend_rows(kv_kernel, shape, s, c, tasks)
        }),
        (s, c) => {
            return Err(ModelError::KvCache(format!("{:?} step rows against a {:?} cache", s.dtype(), c.dtype())))
        }
    })
}

/// Step K/V and cached K/V, each as (K, V).
type KvPair<'a> = (&'a [f32], &'a [f32]);

/// One task of `attend_all`: heads `heads` of query row `row` (of `span`) into `out_heads`
/// (those heads' `head_dim` values each); `want_metrics` needs `heads` to be all of them.
pub(crate) struct RowTask<'a> {
    pub q_row: &'a [f32],
    pub span: &'a SeqSpan,
    pub row: usize,
    pub heads: Range<usize>,
    pub out_heads: &'a mut [f32],
    pub want_metrics: bool,
}

/// Splits the step into tasks over the pool and runs `attend` on each (the kernel of the
/// cache's dtype): a task is one row's heads, or, when every row is a task of all its heads,
/// up to `TILE_ROWS` consecutive rows of one sequence, which read the same keys (a prompt
/// chunk's rows: the kernels share each tile of keys between them).
fn attend_all(
    shape: AttentionShape,
    q: &[f32],
    spans: &[SeqSpan],
    collect_metrics: bool,
    attend: impl Fn(Vec<RowTask<'_>>) -> Vec<Option<AttnMetrics>> + Sync,
) -> (Vec<f32>, Vec<Option<AttnMetrics>>) {
    let q_row_len = shape.num_heads * shape.head_dim;
    let rows = q.len() / q_row_len;
    let mut row_span = vec![0usize; rows];
    for (s, span) in spans.iter().enumerate() {
        row_span[span.query_start..span.query_start + span.query_len].fill(s);
    }
    let wants_metrics = |row: usize| {
        let span = &spans[row_span[row]];
        collect_metrics && span.want_attn_metrics && row + 1 == span.query_start + span.query_len
    };
    let threads = rayon::current_num_threads();
    let heads_per_task = match threads.div_ceil(rows.max(1)) {
        0 | 1 => shape.num_heads,
        runs => shape.num_heads.div_ceil(runs.min(shape.num_heads)),
    };
    // Tiles only as long as every thread still gets a few of them.
    let tile_rows = if heads_per_task == shape.num_heads { (rows / (4 * threads)).clamp(1, TILE_ROWS) } else { 1 };
    // (rows, first head, last head + 1); a row whose metrics are wanted stays whole, since
    // they read every head's scores.
    let mut tasks: Vec<(Range<usize>, usize, usize)> = Vec::with_capacity(rows);
    for row in 0..rows {
        match tasks.last_mut() {
            Some((tile, _, _)) if tile.len() < tile_rows && row_span[tile.start] == row_span[row] => tile.end += 1,
            _ => {
                let per_task = if wants_metrics(row) { shape.num_heads } else { heads_per_task };
                for h in (0..shape.num_heads).step_by(per_task) {
                    tasks.push((row..row + 1, h, (h + per_task).min(shape.num_heads)));
                }
            }
        }
    }
    let mut out = vec![0f32; rows * q_row_len];
    let mut rest = out.as_mut_slice();
    let outs: Vec<&mut [f32]> = tasks
        .iter()
        .map(|(tile, h0, h1)| {
            let (task_out, tail) = std::mem::take(&mut rest).split_at_mut(tile.len() * (h1 - h0) * shape.head_dim);
            rest = tail;
            task_out
        })
        .collect();
    let metrics: Vec<(usize, AttnMetrics)> = tasks
        .par_iter()
        .zip(outs)
        .flat_map_iter(|((tile, h0, h1), out)| {
            let row_tasks = tile
                .clone()
                .zip(out.chunks_mut((h1 - h0) * shape.head_dim))
                .map(|(row, out_heads)| RowTask {
                    q_row: &q[row * q_row_len..(row + 1) * q_row_len],
                    span: &spans[row_span[row]],
                    row,
                    heads: *h0..*h1,
                    out_heads,
                    want_metrics: wants_metrics(row),
                })
                .collect();
            let span = row_span[tile.start];
            attend(row_tasks).into_iter().flatten().map(move |m| (span, m))
        })
        .collect();
    let mut per_span = vec![None; spans.len()];
    for (s, m) in metrics {
        per_span[s] = Some(m);
    }
    (out, per_span)
}

/// Most rows of one sequence a task takes: enough that a tile of keys read from memory serves
/// several rows, few enough that a task's scores (rows x heads x keys) stay near the core.
const TILE_ROWS: usize = 8;

/// One task over an f32 cache.
fn attend_row(shape: AttentionShape, step: KvPair<'_>, cache: KvPair<'_>, task: RowTask<'_>) -> Option<AttnMetrics> {
    let RowTask { q_row, span, row, heads, out_heads, want_metrics } = task;
    let AttentionShape { num_heads, num_kv_heads, head_dim, block_size, scale, kv_group, .. } = shape;
    let block_table = &span.block_tables[kv_group];
    let group = num_heads / num_kv_heads;
    let kv_row_len = num_kv_heads * head_dim;
    let keys = shape.attended_keys(span, row - span.query_start);
    let num_keys = keys.len();

    // The K and V rows of each attended key j: in the cache through the block table, or, for
    // this step's own rows, in the step's K/V (resolved once, not per head).
    let rows: Vec<KvPair<'_>> = keys
        .map(|j| {
            let ((k, v), off) = if j < span.context_len {
                let slot = block_table[j / block_size] as usize * block_size + j % block_size;
                (cache, slot * kv_row_len)
            } else {
                (step, (span.query_start + j - span.context_len) * kv_row_len)
            };
            (&k[off..off + kv_row_len], &v[off..off + kv_row_len])
        })
        .collect();
    let vectorized = head_dim % 8 == 0 && simd::available();
    // scores[(h - h0) * num_keys + j]
    let h0 = heads.start;
    let mut scores = vec![0f32; heads.len() * num_keys];
    let mut j0 = 0;
    if vectorized {
        while j0 < num_keys {
            for &(k, v) in rows.iter().skip(j0 + PREFETCH_KEYS).take(8) {
                simd::prefetch(k);
                simd::prefetch(v);
            }
            // A last block of fewer than 8 keys repeats its last key in the spare lanes: a
            // lane's score depends on its own key alone, so the real keys' scores are the
            // same bits as in a full block (and as the scalar `dot`'s).
            let n = (num_keys - j0).min(8);
            let keys: [&[f32]; 8] = std::array::from_fn(|j| rows[j0 + j.min(n - 1)].0);
            for h in heads.clone() {
                let q = &q_row[h * head_dim..(h + 1) * head_dim];
                let mut out = [0f32; 8];
                // SAFETY: `available()` checked; `q` holds `head_dim` values (a multiple of 8),
                // every key row `(h / group + 1) * head_dim`, `out` eight.
                unsafe { simd::dot8(q, &keys, h / group * head_dim, scale, &mut out) };
                let at = (h - h0) * num_keys + j0;
                scores[at..at + n].copy_from_slice(&out[..n]);
            }
            j0 += n;
        }
    }
    for (j, &(k_row, _)) in rows.iter().enumerate().skip(j0) {
        for h in heads.clone() {
            let k = &k_row[h / group * head_dim..(h / group + 1) * head_dim];
            scores[(h - h0) * num_keys + j] = dot(&q_row[h * head_dim..(h + 1) * head_dim], k) * scale;
        }
    }
    let metrics = (want_metrics && heads.len() == num_heads)
        .then(|| attention_metrics_padded(&scores, num_heads, num_keys, span.attn_pad_to));
    softmax_rows(&mut scores, num_keys);
    for h in heads.clone() {
        let at = h / group * head_dim;
        let probs = &scores[(h - h0) * num_keys..(h - h0 + 1) * num_keys];
        let out = &mut out_heads[(h - h0) * head_dim..(h - h0 + 1) * head_dim];
        if vectorized {
            // SAFETY: `available()` checked; `out` holds `head_dim` (a multiple of 8) values
            // and every value row `at + head_dim`.
            unsafe { simd::weighted_sum(probs, |j| rows[j].1[at..].as_ptr(), out) };
        } else {
            weighted_sum(probs, |j| &rows[j].1[at..at + head_dim], out);
        }
    }
    metrics
}

/// How many keys ahead of the scoring loop a row's keys and values are prefetched: a
/// decode row's keys sit in blocks scattered over the pool, beyond what the hardware
/// prefetcher follows.
const PREFETCH_KEYS: usize = 16;

/// Eight fused lane accumulators (lane `l` takes elements `8c + l`) summed as the pairwise
/// tree `simd::dot8` uses, so a key's score is the same whichever path computes it.
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
    let mut sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (x, y) in a_tail.iter().zip(b_tail) {
        sum = x.mul_add(*y, sum);
    }
    sum
}

/// `out = sum_j probs[j] * value(j)`, one fma per key in key order (the operations of
/// `simd::weighted_sum`, which serves every head size that is a multiple of 8).
fn weighted_sum<'a>(probs: &[f32], value: impl Fn(usize) -> &'a [f32], out: &mut [f32]) {
    for (d, o) in out.iter_mut().enumerate() {
        *o = probs.iter().enumerate().fold(0.0, |acc, (j, &p)| p.mul_add(value(j)[d], acc));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key's score is the same bits whether it falls in a block of 8 (the vector path) or
    /// in the tail (the scalar `dot`), so a row's scores do not depend on its key count.
    fn value(i: usize) -> f32 {
        ((i * 2654435761) % 1999) as f32 / 999.5 - 1.0
    }

    /// A key's score is the same bits whether it falls in a block of 8 (the vector path) or
    /// in the tail (the scalar `dot`), so a row's scores do not depend on its key count.
    #[test]
    fn blocked_scores_match_the_scalar_dot() {
        if !simd::available() {
            return;
        }
        let (head_dim, at) = (64, 64);
        let q: Vec<f32> = (0..head_dim).map(|i| value(i + 7)).collect();
        let keys: Vec<Vec<f32>> = (0..8).map(|j| (0..2 * head_dim).map(|i| value(1000 * j + i)).collect()).collect();
        let mut out = [0f32; 8];
        let rows: [&[f32]; 8] = std::array::from_fn(|j| keys[j].as_slice());
        // SAFETY: `available()` checked above; every key row holds `at + head_dim` values.
        unsafe { simd::dot8(&q, &rows, at, 0.125, &mut out) };
        for j in 0..8 {
            assert_eq!(out[j].to_bits(), (dot(&q, &keys[j][at..]) * 0.125).to_bits(), "key {j}");
        }
    }

    /// The vector weighted sum is the scalar one bit for bit.
    #[test]
    fn vector_weighted_sum_matches_the_scalar_one() {
        if !simd::available() {
            return;
        }
        let (keys, width) = (37, 72);
        let probs: Vec<f32> = (0..keys).map(|j| value(j + 3).abs() / keys as f32).collect();
        let values: Vec<Vec<f32>> = (0..keys).map(|j| (0..width).map(|d| value(500 * j + d)).collect()).collect();
        let (mut scalar, mut vector) = (vec![0f32; width], vec![0f32; width]);
        weighted_sum(&probs, |j| values[j].as_slice(), &mut scalar);
        // SAFETY: `available()` checked; every value row holds `width` (a multiple of 8) values.
        unsafe { simd::weighted_sum(&probs, |j| values[j].as_ptr(), &mut vector) };
        assert_eq!(scalar, vector);
    }
}
