//! Attention over the 8-bit cache (`kv_q8`), read in place: the query is quantized per head
//! in the cache's 32-value groups (as the projections quantize activations), a key's score is
//! the integer dot product of each group times the two groups' scales, the softmax runs in f32,
//! and the value sum multiplies int8 values by int16 weights (`attention_q8_values`). Nothing is
//! converted back to a wider copy of the cache, so a decode step reads about half the bytes of
//! the f16 cache.
//!
//! The keys' interleaved layout (`Q8Slots`) lets the vector kernels score 16 (or 8) keys of one
//! query head with one `vpdpbusd` per four values of the head, the key bytes loaded once for
//! every query head that shares their KV head; the value sum widens two keys' value rows once
//! for up to eight such heads.
//!
//! Keys are stored less their layer's key offset (`kv_q8`), so each score starts from the f32
//! query's product with it: `base = q . key_offset` (0 without one).
//!
//! Every kernel performs the same operations, so the result does not depend on the CPU: a
//! key's group `c` gives its exact i32 dot product with the query's group; the score is
//! `acc = base; acc = fma(f32(dot_c), q_scale_c * k_scale_c, acc)` over the groups in order,
//! times the attention scale. The value sum is integers until each tile's end
//! (`attention_q8_values`).

use std::ops::Range;

use crate::attention::{AttentionShape, RowTask};
use crate::attention_kernel::KvKernel;
use crate::attention_q8_simd as simd;
use crate::attention_q8_values::{value_run, Layout, ValueSum};
use crate::attention_runs::{key_runs, score_then_sum, Geometry, KeyRun, RowKernel, RowPass};
use crate::kv_q8::{quantize_groups, Q8Slots, Q8_GROUP};
use crate::metrics::AttnMetrics;

/// A task's query heads quantized in the cache's groups: values, and per head and group the
/// scale and the sum of the int8 values (what the VNNI kernels' unsigned offset adds); per
/// head, where its scores start (`base`: the head's product with the key offset).
pub(crate) struct Query {
    pub q8: Vec<i8>,
    pub scales: Vec<f32>,
    pub sums: Vec<i32>,
    pub base: Vec<f32>,
}

impl Query {
    /// `q`: the heads `g.h0..` of one row; `key_offset`: the layer's, one row of the cache.
    fn new(q: &[f32], g: &Geometry, key_offset: Option<&[f32]>) -> Self {
        let (q8, scales) = quantize_groups(q, g.group);
        let sums = q8.chunks_exact(g.group).map(|x| x.iter().map(|&x| x as i32).sum()).collect();
        let base = q
            .chunks_exact(g.head_dim)
            .enumerate()
            .map(|(i, head)| {
                let kv_head = (g.h0 + i) / g.heads_per_kv;
                key_offset.map_or(0.0, |c| {
                    let c = &c[kv_head * g.head_dim..(kv_head + 1) * g.head_dim];
                    head.iter().zip(c).fold(0f32, |acc, (q, c)| q.mul_add(*c, acc))
                })
            })
            .collect();
        Self { q8, scales, sums, base }
    }
}

/// The rows of one task of `attention::attend_all` over the 8-bit cache, as
/// `attention::attend_row` does for f32 and f16 caches (the same keys, the same metrics), with
/// kernel `kernel`; each row's metrics in order.
pub(crate) fn attend_rows(
    kernel: KvKernel,
    shape: AttentionShape,
    step: &Q8Slots,
    cache: &Q8Slots,
    tasks: Vec<RowTask<'_>>,
) -> Vec<Option<AttnMetrics>> {
    let AttentionShape { num_heads, num_kv_heads, head_dim, scale, .. } = shape;
    let group = cache.group;
    let vectorized = kernel != KvKernel::Scalar && group == Q8_GROUP && kernel.supported();
    let rows = tasks.into_iter().map(|task| {
        let runs = key_runs(&shape, &task, step, cache);
        let RowTask { q_row, span, row, heads, out_heads, want_metrics } = task;
        let keys = shape.attended_keys(span, row - span.query_start);
        let geometry =
            Geometry { h0: heads.start, heads_per_kv: num_heads / num_kv_heads, head_dim, group, num_keys: keys.len() };
        let query =
            Query::new(&q_row[heads.start * head_dim..heads.end * head_dim], &geometry, step.key_offset.as_deref());
        RowPass {
            runs,
            first_key: keys.start,
            num_rows: heads.len(),
            num_keys: keys.len(),
            metrics: (want_metrics && heads.len() == num_heads).then_some((num_heads, span.attn_pad_to)),
            kernel: Q8Row {
                kernel: vectorized.then_some(kernel),
                values: ValueSum::new(&geometry, &heads),
                geometry,
                query,
                heads,
                scale,
                out_heads,
            },
        }
    });
    score_then_sum(rows.collect())
}

/// One row's heads over the 8-bit cache; `kernel` is `None` where the scalar kernel runs.
struct Q8Row<'a> {
    kernel: Option<KvKernel>,
    geometry: Geometry,
    query: Query,
    heads: Range<usize>,
    scale: f32,
    values: ValueSum,
    out_heads: &'a mut [f32],
}

impl RowKernel<Q8Slots> for Q8Row<'_> {
    fn score(&mut self, run: &KeyRun<'_, Q8Slots>, scores: &mut [f32]) {
        let (g, heads) = (&self.geometry, self.heads.clone());
        match self.kernel {
            // SAFETY: `supported()` checked; the run's slots and the heads are inside their
            // buffers and groups are 32 values (`score_run`'s contract).
            Some(kernel) => unsafe { simd::score_run(kernel, g, &self.query, heads, self.scale, run, scores) },
            None => score_run(g, &self.query, heads, self.scale, run, scores),
        }
        self.values.note_scales(run);
    }

    fn sum_values(&mut self, run: &KeyRun<'_, Q8Slots>, probs: &[f32], tile_done: bool) {
        let (g, heads) = (&self.geometry, self.heads.clone());
        self.values.prepare(g, &heads, probs);
        match self.kernel {
            Some(kernel) => {
                // SAFETY: as above (`value_run`'s contract).
                unsafe { simd::value_run(kernel, g, probs, heads, run, &mut self.values) };
                if tile_done {
                    // SAFETY: as above (`flush`'s contract).
                    unsafe { simd::flush(kernel, g, &mut self.values, self.out_heads) };
                }
            }
            None => {
                value_run(g, probs, heads, run, &mut self.values);
                if tile_done {
                    self.values.flush(g, Layout::InOrder, self.out_heads);
                }
            }
        }
    }
}

/// The scores of a run's keys for `heads`, one key at a time.
fn score_run(
    g: &Geometry,
    query: &Query,
    heads: Range<usize>,
    scale: f32,
    run: &KeyRun<'_, Q8Slots>,
    scores: &mut [f32],
) {
    let groups = g.head_dim / g.group;
    let src = run.src;
    for i in 0..run.len {
        let slot = run.slot + i;
        for h in heads.clone() {
            let kv_head = h / g.heads_per_kv;
            let q = &query.q8[(h - g.h0) * g.head_dim..];
            let mut acc = query.base[h - g.h0];
            for c in 0..groups {
                let dot: i32 = (c * g.group..(c + 1) * g.group)
                    .map(|d| q[d] as i32 * src.k[src.k_at(slot, kv_head, d)] as i32)
                    .sum();
                let k_scale = src.k_scales[src.scale_at(slot, kv_head * groups + c)].to_f32();
                acc = (dot as f32).mul_add(query.scales[(h - g.h0) * groups + c] * k_scale, acc);
            }
            scores[(h - g.h0) * g.num_keys + run.key + i] = acc * scale;
        }
    }
}
