//! Where a query row's keys are, for the kernels over interleaved caches (`attention_q8`,
//! `attention_f16`): runs of consecutive slots, and the geometry of a task's heads.

use std::ops::Range;

use crate::attention::{AttentionShape, RowTask};
use crate::kv_layout::SLOT_CHUNK;
use crate::metrics::{attention_metrics_padded, AttnMetrics};
use crate::softmax::softmax_rows;

/// Keys `key..key + len` of a row's attended keys (counted from the first attended one), held
/// in consecutive slots `slot..slot + len` of `src`.
pub(crate) struct KeyRun<'a, S> {
    pub src: &'a S,
    pub slot: usize,
    pub key: usize,
    pub len: usize,
}

/// Where a row's attended keys lie: cached ones block by block through the block table (runs
/// merged where pages follow each other), then the step's own rows.
pub(crate) fn key_runs<'a, S>(
    shape: &AttentionShape,
    task: &RowTask<'_>,
    step: &'a S,
    cache: &'a S,
) -> Vec<KeyRun<'a, S>> {
    let span = task.span;
    let keys = shape.attended_keys(span, task.row - span.query_start);
    let (table, bs) = (&span.block_tables[shape.kv_group], shape.block_size);
    let cached_end = keys.end.min(span.context_len);
    let mut runs: Vec<KeyRun<'a, S>> = Vec::with_capacity(cached_end.saturating_sub(keys.start) / bs + 2);
    let mut j = keys.start;
    while j < cached_end {
        let end = ((j / bs + 1) * bs).min(cached_end);
        let slot = table[j / bs] as usize * bs + j % bs;
        match runs.last_mut() {
            Some(last) if last.slot + last.len == slot => last.len += end - j,
            _ => runs.push(KeyRun { src: cache, slot, key: j - keys.start, len: end - j }),
        }
        j = end;
    }
    let j = keys.start.max(span.context_len);
    if j < keys.end {
        let slot = span.query_start + j - span.context_len;
        runs.push(KeyRun { src: step, slot, key: j - keys.start, len: keys.end - j });
    }
    runs
}

/// The heads of `heads` that read KV head `kv_head`.
pub(crate) fn heads_of(kv_head: usize, heads: &Range<usize>, heads_per_kv: usize) -> Range<usize> {
    heads.start.max(kv_head * heads_per_kv)..heads.end.min((kv_head + 1) * heads_per_kv)
}

/// The task's geometry, shared by the kernels.
#[derive(Clone, Copy)]
pub(crate) struct Geometry {
    /// First query head of the task (scores and outputs are counted from it).
    pub h0: usize,
    pub heads_per_kv: usize,
    pub head_dim: usize,
    pub group: usize,
    /// Keys the row attends to (the scores' row length).
    pub num_keys: usize,
}

/// The chunks of `SLOT_CHUNK` slots a run touches: (first slot of the chunk, its lanes in the
/// run).
pub(crate) fn chunks<S>(run: &KeyRun<'_, S>) -> impl Iterator<Item = (usize, Range<usize>)> {
    let (first, end) = (run.slot, run.slot + run.len);
    (first / SLOT_CHUNK..end.div_ceil(SLOT_CHUNK)).map(move |c| {
        let base = c * SLOT_CHUNK;
        (base, first.max(base) - base..end.min(base + SLOT_CHUNK) - base)
    })
}

/// The mask of lanes `lanes` of a chunk.
#[inline(always)]
pub(crate) fn lane_mask(lanes: &Range<usize>) -> u16 {
    ((1u32 << lanes.end) - (1u32 << lanes.start)) as u16
}

/// Where lane 0 of the chunk at `base` falls in a row of scores (it may lie before the row:
/// only the run's lanes are ever read or written through it).
#[inline(always)]
pub(crate) fn lane0<S>(row: *const f32, run: &KeyRun<'_, S>, base: usize) -> *const f32 {
    row.wrapping_add(run.key + base).wrapping_sub(run.slot)
}

/// The order every interleaved-cache kernel follows for a task: score each run into the
/// task's rows of `num_keys` scores (`scores[(h - h0) * num_keys + j]`), take the attention
/// metrics when `metrics` gives the head count and padding, softmax, then add each run's values.
pub(crate) fn score_then_sum<S>(
    runs: &[KeyRun<'_, S>],
    num_rows: usize,
    num_keys: usize,
    metrics: Option<(usize, Option<usize>)>,
    mut score: impl FnMut(&KeyRun<'_, S>, &mut [f32]),
    mut sum_values: impl FnMut(&KeyRun<'_, S>, &[f32]),
) -> Option<AttnMetrics> {
    let mut scores = vec![0f32; num_rows * num_keys];
    for run in runs {
        score(run, &mut scores);
    }
    let metrics = metrics.map(|(num_heads, pad_to)| attention_metrics_padded(&scores, num_heads, num_keys, pad_to));
    softmax_rows(&mut scores, num_keys);
    for run in runs {
        sum_values(run, &scores);
    }
    metrics
}
