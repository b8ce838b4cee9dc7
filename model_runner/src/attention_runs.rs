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
/// merged where pages follow each other), then the step's own rows. No run crosses a multiple
/// of `TILE_KEYS` positions, so each lies in one tile of `score_then_sum`.
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
    let mut runs: Vec<KeyRun<'a, S>> =
        Vec::with_capacity(cached_end.saturating_sub(keys.start) / bs + keys.len() / TILE_KEYS + 2);
    let mut j = keys.start;
    while j < cached_end {
        let end = (j / bs + 1) * bs;
        let end = end.min(cached_end).min(tile_end(j));
        let slot = table[j / bs] as usize * bs + j % bs;
        match runs.last_mut() {
            Some(last) if last.slot + last.len == slot && !j.is_multiple_of(TILE_KEYS) => last.len += end - j,
            _ => runs.push(KeyRun { src: cache, slot, key: j - keys.start, len: end - j }),
        }
        j = end;
    }
    let mut j = keys.start.max(span.context_len);
    while j < keys.end {
        let end = keys.end.min(tile_end(j));
        let slot = span.query_start + j - span.context_len;
        runs.push(KeyRun { src: step, slot, key: j - keys.start, len: end - j });
        j = end;
    }
    runs
}

/// The first position of the tile after the one that holds `position`.
fn tile_end(position: usize) -> usize {
    (position / TILE_KEYS + 1) * TILE_KEYS
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

/// One query row of a task (`RowTask`) for `score_then_sum`: where its keys lie, and the
/// kernel that scores a run of them and adds a run's values.
pub(crate) struct RowPass<'a, S, K> {
    pub runs: Vec<KeyRun<'a, S>>,
    /// The position of the row's first attended key (0 without a window): a run's tile is that
    /// of its position, so every row of a tile reads the same tile of keys.
    pub first_key: usize,
    /// Rows of scores (the task's heads) and their length.
    pub num_rows: usize,
    pub num_keys: usize,
    /// The head count and padding of the attention metrics, when the row takes them.
    pub metrics: Option<(usize, Option<usize>)>,
    pub kernel: K,
}

/// A cache's kernel for one query row, called by `score_then_sum` run by run: every run's
/// scores, then, after the softmax, every run's values, both in key order.
pub(crate) trait RowKernel<S> {
    /// Scores a run's keys into the row's scores (`scores[(h - h0) * num_keys + j]`).
    fn score(&mut self, run: &KeyRun<'_, S>, scores: &mut [f32]);
    /// Adds a run's values, weighted by the row's probabilities; `tile_done` when the run is
    /// the last of its tile (or of the row).
    fn sum_values(&mut self, run: &KeyRun<'_, S>, probs: &[f32], tile_done: bool);
}

/// The order every interleaved-cache kernel follows for a task's rows: score each row's runs,
/// take the attention metrics where a row asks for them, softmax, then add each run's values.
///
/// The rows of a task (query rows of one sequence's prompt chunk) read the same keys. Each
/// pass goes through the keys a tile of `TILE_KEYS` at a time, every row over the tile before
/// the next tile, so the tile's keys and values come from memory once for all the rows and
/// from the core's caches for the rest; a row's operations and their order are those of the
/// row alone (a key's score is its own; the value sum goes in key order, carried between runs
/// by the row's kernel), so the bits do not depend on the rows beside it.
///
/// Runs of a shuffled block table are scattered pages, which the hardware prefetchers do not
/// follow: the first row's passes ask for the memory of the run `PREFETCH_RUNS` ahead while
/// they work on this one (its start: see `PREFETCH_SLOTS`), and its score pass's last runs ask
/// for the first runs' values.
pub(crate) fn score_then_sum<S: PagedRows, K: RowKernel<S>>(rows: Vec<RowPass<'_, S, K>>) -> Vec<Option<AttnMetrics>> {
    let tile_of = |row: &RowPass<'_, S, K>, run: &KeyRun<'_, S>| (row.first_key + run.key) / TILE_KEYS;
    let mut rows: Vec<_> = rows.into_iter().map(|mut row| (std::mem::take(&mut row.runs), row)).collect();
    let num_tiles =
        rows.iter().filter_map(|(runs, row)| runs.last().map(|run| tile_of(row, run) + 1)).max().unwrap_or(0);
    let mut scores: Vec<Vec<f32>> = rows.iter().map(|(_, row)| vec![0f32; row.num_rows * row.num_keys]).collect();
    let ahead = |i: usize| i + PREFETCH_RUNS;
    let mut next = vec![0usize; rows.len()];
    for tile in 0..num_tiles {
        for (r, ((runs, row), scores)) in rows.iter_mut().zip(&mut scores).enumerate() {
            while let Some(run) = runs.get(next[r]).filter(|run| tile_of(row, run) == tile) {
                if r == 0 {
                    match runs.get(ahead(next[r])) {
                        Some(far) => far.src.prefetch_keys(far.slot, far.len.min(PREFETCH_SLOTS)),
                        None => {
                            if let Some(first) = runs.get(ahead(next[r]) - runs.len()) {
                                first.src.prefetch_values(first.slot, first.len.min(PREFETCH_SLOTS));
                            }
                        }
                    }
                }
                row.kernel.score(run, scores);
                next[r] += 1;
            }
        }
    }
    let metrics = rows
        .iter()
        .zip(&mut scores)
        .map(|((_, row), scores)| {
            let metrics = row
                .metrics
                .map(|(num_heads, pad_to)| attention_metrics_padded(scores, num_heads, row.num_keys, pad_to));
            softmax_rows(scores, row.num_keys);
            metrics
        })
        .collect();
    next.fill(0);
    for tile in 0..num_tiles {
        for (r, ((runs, row), scores)) in rows.iter_mut().zip(&scores).enumerate() {
            while let Some(run) = runs.get(next[r]).filter(|run| tile_of(row, run) == tile) {
                if let Some(far) = runs.get(ahead(next[r])).filter(|_| r == 0) {
                    far.src.prefetch_values(far.slot, far.len.min(PREFETCH_SLOTS));
                }
                let tile_done = runs.get(next[r] + 1).is_none_or(|after| tile_of(row, after) != tile);
                row.kernel.sum_values(run, scores, tile_done);
                next[r] += 1;
            }
        }
    }
    metrics
}

/// Keys a tile of `score_then_sum` holds: 512 keys of two to three KV heads' 64 values are
/// 128-192 KiB of f16 keys, which stay in a core's L2 while the task's rows read them. The q8
/// value sum's int32 sums hold at most a tile (`attention_q8_values`).
pub(crate) const TILE_KEYS: usize = 512;

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

/// Asks for the cache lines of `data[range]` (clamped to `data`) into L2 and below, not L1: a
/// run asked for two runs ahead is up to a few KiB, more lines than the core can have in flight
/// to L1, and the kernel's own loads then find them in L2 at its latency. On Zen 4 the hint for
/// L1 left attention over a shuffled cache waiting on memory (one layer at 64 x 2048, q8,
/// about 1.5x slower).
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
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(base.add(offset)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, range);
}
