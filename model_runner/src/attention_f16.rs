//! Attention over the f16 cache (`F16Slots`), read in place: keys interleaved per 16 slots, so
//! a query head scores 16 keys with one f16 conversion and one fma per value of the head, the
//! conversion shared by every query head of the KV head; the softmax runs in f32, and the value
//! sum widens a key's value row once for up to eight query heads.
//!
//! Every kernel performs the same operations, so the result does not depend on the CPU: a
//! key's score is eight fma chains over the head's values (value `d` into chain `d % 8`, in
//! value order from zero), summed as the tree `((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7))` and
//! multiplied by the attention scale: the f32 cache's `dot`, so both caches score a key alike
//! and a big channel's rounding stays in its own chain. The value sum is, per output value, one
//! fma per key in key order of the probability with the value.

use std::ops::Range;

use crate::attention::{AttentionShape, RowTask};
use crate::attention_f16_simd as simd;
use crate::attention_kernel::KvKernel;
use crate::attention_runs::{key_runs, score_then_sum, Geometry, KeyRun, RowKernel, RowPass};
use crate::kv_f16::F16Slots;
use crate::metrics::AttnMetrics;

/// The rows of one task of `attention::attend_all` over the f16 cache, as
/// `attention::attend_row` does for the f32 cache (the same keys, the same metrics), each row's
/// metrics in order. `kernel` picks the instructions: scalar, 256- or 512-bit registers (the
/// 8-bit cache's detection decides for both caches).
pub(crate) fn attend_rows(
    kernel: KvKernel,
    shape: AttentionShape,
    step: &F16Slots,
    cache: &F16Slots,
    tasks: Vec<RowTask<'_>>,
) -> Vec<Option<AttnMetrics>> {
    let AttentionShape { num_heads, num_kv_heads, head_dim, scale, .. } = shape;
    let vectorized = kernel != KvKernel::Scalar && head_dim.is_multiple_of(32) && kernel.supported();
    let rows = tasks.into_iter().map(|task| {
        let runs = key_runs(&shape, &task, step, cache);
        let RowTask { q_row, span, row, heads, out_heads, want_metrics } = task;
        let keys = shape.attended_keys(span, row - span.query_start);
        let geometry = Geometry {
            h0: heads.start,
            heads_per_kv: num_heads / num_kv_heads,
            head_dim,
            group: head_dim,
            num_keys: keys.len(),
        };
        RowPass {
            runs,
            first_key: keys.start,
            num_rows: heads.len(),
            num_keys: keys.len(),
            metrics: (want_metrics && heads.len() == num_heads).then_some((num_heads, span.attn_pad_to)),
            kernel: F16Row {
                kernel: vectorized.then_some(kernel),
                geometry,
                q: &q_row[heads.start * head_dim..heads.end * head_dim],
                heads,
                scale,
                out_heads,
            },
        }
    });
    score_then_sum(rows.collect())
}

/// One row's heads over the f16 cache; `kernel` is `None` where the scalar kernel runs.
struct F16Row<'a> {
    kernel: Option<KvKernel>,
    geometry: Geometry,
    q: &'a [f32],
    heads: Range<usize>,
    scale: f32,
    out_heads: &'a mut [f32],
}

impl RowKernel<F16Slots> for F16Row<'_> {
    fn score(&mut self, run: &KeyRun<'_, F16Slots>, scores: &mut [f32]) {
        let (g, heads) = (&self.geometry, self.heads.clone());
        match self.kernel {
            // SAFETY: `supported()` checked; the run's slots and the heads are inside their
            // buffers and `head_dim` is a multiple of 32 (`score_run`'s contract).
            Some(kernel) => unsafe { simd::score_run(kernel, g, self.q, heads, self.scale, run, scores) },
            None => score_run(g, self.q, heads, self.scale, run, scores),
        }
    }

    fn sum_values(&mut self, run: &KeyRun<'_, F16Slots>, probs: &[f32], _tile_done: bool) {
        let (g, heads) = (&self.geometry, self.heads.clone());
        match self.kernel {
            // SAFETY: as above (`value_run`'s contract).
            Some(kernel) => unsafe { simd::value_run(kernel, g, probs, heads, run, self.out_heads) },
            None => value_run(g, probs, heads, run, self.out_heads),
        }
    }
}

/// The scores of a run's keys for `heads`, one key at a time.
fn score_run(g: &Geometry, q: &[f32], heads: Range<usize>, scale: f32, run: &KeyRun<'_, F16Slots>, scores: &mut [f32]) {
    let src = run.src;
    for i in 0..run.len {
        let slot = run.slot + i;
        for h in heads.clone() {
            let (kv_head, q) = (h / g.heads_per_kv, &q[(h - g.h0) * g.head_dim..(h - g.h0 + 1) * g.head_dim]);
            let mut c = [0f32; 8];
            for (d, &x) in q.iter().enumerate() {
                c[d % 8] = x.mul_add(src.k[src.k_at(slot, kv_head, d)].to_f32(), c[d % 8]);
            }
            let sum = ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));
            scores[(h - g.h0) * g.num_keys + run.key + i] = sum * scale;
        }
    }
}

/// Adds a run's keys to `out_heads`: `out[d] = fma(p, v[d], out[d])` key by key.
fn value_run(g: &Geometry, probs: &[f32], heads: Range<usize>, run: &KeyRun<'_, F16Slots>, out_heads: &mut [f32]) {
    let src = run.src;
    for i in 0..run.len {
        let slot = run.slot + i;
        for h in heads.clone() {
            let p = probs[(h - g.h0) * g.num_keys + run.key + i];
            let out = &mut out_heads[(h - g.h0) * g.head_dim..(h - g.h0 + 1) * g.head_dim];
            let v = &src.v[src.v_at(slot, h / g.heads_per_kv, 0)..][..g.head_dim];
            for (o, x) in out.iter_mut().zip(v) {
                *o = p.mul_add(x.to_f32(), *o);
            }
        }
    }
}
