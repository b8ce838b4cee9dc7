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
///
/// Runs of a shuffled block table are scattered pages, which the hardware prefetchers do not
/// follow: each pass asks for the memory of the run `PREFETCH_RUNS` ahead while it works on
/// this one (its start: see `PREFETCH_SLOTS`), and the score pass's last runs ask for the
/// first runs' values.
pub(crate) fn score_then_sum<S: PagedRows>(
    runs: &[KeyRun<'_, S>],
    num_rows: usize,
    num_keys: usize,
    metrics: Option<(usize, Option<usize>)>,
    mut score: impl FnMut(&KeyRun<'_, S>, &mut [f32]),
    mut sum_values: impl FnMut(&KeyRun<'_, S>, &[f32]),
) -> Option<AttnMetrics> {
    let mut scores = vec![0f32; num_rows * num_keys];
    let ahead = |i: usize| i + PREFETCH_RUNS;
    for (i, run) in runs.iter().enumerate() {
        match runs.get(ahead(i)) {
            Some(next) => next.src.prefetch_keys(next.slot, next.len.min(PREFETCH_SLOTS)),
            None => {
                if let Some(first) = runs.get(ahead(i) - runs.len()) {
                    first.src.prefetch_values(first.slot, first.len.min(PREFETCH_SLOTS));
                }
            }
        }
        score(run, &mut scores);
    }
    let metrics = metrics.map(|(num_heads, pad_to)| attention_metrics_padded(&scores, num_heads, num_keys, pad_to));
    softmax_rows(&mut scores, num_keys);
    for (i, run) in runs.iter().enumerate() {
        if let Some(next) = runs.get(ahead(i)) {
            next.src.prefetch_values(next.slot, next.len.min(PREFETCH_SLOTS));
        }
        sum_values(run, &scores);
    }
    metrics
}

/// Runs a pass asks the memory for ahead of the one it works on.
const PREFETCH_RUNS: usize = 2;
/// Slots of a run asked for ahead: pages that follow each other merge into one long run, which
/// the hardware prefetchers do follow once it has started.
const PREFETCH_SLOTS: usize = 2 * SLOT_CHUNK;

/// A cache's pages, which can ask the memory for a run of slots' keys or values ahead of use.
pub(crate) trait PagedRows {
    fn prefetch_keys(&self, slot: usize, len: usize);
    fn prefetch_values(&self, slot: usize, len: usize);
}

/// Asks for the cache lines of `data[range]` (clamped to `data`) into every cache level.
#[inline]
pub(crate) fn prefetch<T>(data: &[T], range: Range<usize>) {
    #[cfg(target_arch = "x86_64")]
    {
        let end = range.end.min(data.len());
        let (first, last) = (range.start.min(end), end);
        let bytes = (last - first) * std::mem::size_of::<T>();
        let base = data[first..last].as_ptr() as *const i8;
        for offset in (0..bytes).step_by(64) {
            // SAFETY: prefetching is a hint that never faults, and `offset` stays inside the
            // slice anyway.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(base.add(offset)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, range);
}
