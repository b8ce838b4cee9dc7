//! Attention over the 8-bit cache (`kv_q8`), read in place: the query is quantized per head
//! in the cache's 32-value groups (as the projections quantize activations), a key's score is
//! the integer dot product of each group times the two groups' scales, the softmax runs in f32, and the value sum
//! multiplies int8 values by `probability * scale` as it goes. Nothing is converted back to a
//! wider copy of the cache, so a decode step reads about half the bytes of the f16 cache.
//!
//! Every kernel performs the same operations, so the result does not depend on the CPU: a
//! key's group `c` gives eight exact i32 lane sums (lane `l` takes the group's values
//! `4l..4l + 4`, what `vpdpbusd` and `pmaddubsw` + `pmaddwd` both produce), each converted to
//! f32 and fused-multiply-added with `query scale * key scale` of the group into lane `l`'s
//! accumulator; the lanes are summed as the tree `((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7))`
//! and multiplied by the attention scale. The value sum is, per output value, one fma per key in key
//! order of `probability * value scale` with the int8 value.

use std::sync::OnceLock;

use crate::attention::{AttentionShape, RowTask};
use crate::attention_q8_simd as simd;
use crate::attention_simd::prefetch;
use crate::kv_q8::{quantize_groups, Q8Values, Q8_GROUP};
use crate::metrics::{attention_metrics_padded, AttnMetrics};
use crate::softmax::softmax_in_place;

/// Which instructions score the keys; all give the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Q8Kernel {
    Scalar,
    /// `pmaddubsw` + `pmaddwd`.
    Avx2,
    /// `vpdpbusd`, VEX encoded (Alder Lake, Zen 4 and later).
    AvxVnni,
    /// `vpdpbusd` on 256-bit registers from AVX-512 VNNI.
    Avx512Vnni,
}

impl Q8Kernel {
    pub const ALL: [Q8Kernel; 4] = [Q8Kernel::Scalar, Q8Kernel::Avx2, Q8Kernel::AvxVnni, Q8Kernel::Avx512Vnni];

    /// The fastest kernel this CPU runs, decided once.
    pub fn detect() -> Self {
        static KERNEL: OnceLock<Q8Kernel> = OnceLock::new();
        *KERNEL.get_or_init(|| {
            [Q8Kernel::Avx512Vnni, Q8Kernel::AvxVnni, Q8Kernel::Avx2]
                .into_iter()
                .find(|k| k.supported())
                .unwrap_or(Q8Kernel::Scalar)
        })
    }

    pub fn supported(self) -> bool {
        match self {
            Q8Kernel::Scalar => true,
            Q8Kernel::Avx2 => simd::supports_avx2(),
            Q8Kernel::AvxVnni => simd::supports_avx_vnni(),
            Q8Kernel::Avx512Vnni => simd::supports_avx512_vnni(),
        }
    }
}

/// A key's K and V rows: which values hold it and at which row.
type KeyRow<'a> = (&'a Q8Values, usize);

/// One task of `attention::attend_all` over the 8-bit cache, as `attention::attend_row` does
/// for f32 and f16 caches (the same keys, the same metrics), with kernel `kernel`.
pub(crate) fn attend_row(
    kernel: Q8Kernel,
    shape: AttentionShape,
    step: &Q8Values,
    cache: &Q8Values,
    task: RowTask<'_>,
) -> Option<AttnMetrics> {
    let RowTask { q_row, span, row, heads, out_heads, want_metrics } = task;
    let AttentionShape { num_heads, num_kv_heads, head_dim, block_size, scale, kv_group, .. } = shape;
    let block_table = &span.block_tables[kv_group];
    let heads_per_kv = num_heads / num_kv_heads;
    let kv_row_len = num_kv_heads * head_dim;
    let group = cache.group;
    let (scales_per_row, scales_per_head) = (kv_row_len / group, head_dim / group);
    let keys = shape.attended_keys(span, row - span.query_start);
    let num_keys = keys.len();
    let rows: Vec<KeyRow<'_>> = keys
        .map(|j| {
            if j < span.context_len {
                (cache, block_table[j / block_size] as usize * block_size + j % block_size)
            } else {
                (step, span.query_start + j - span.context_len)
            }
        })
        .collect();
    // Scales widened once per key rather than once per query head sharing it.
    let widen = |scales: fn(&Q8Values) -> &[half::f16]| -> Vec<f32> {
        rows.iter()
            .flat_map(|&(src, r)| scales(src)[r * scales_per_row..(r + 1) * scales_per_row].iter().map(|s| s.to_f32()))
            .collect()
    };
    let (k_scales, v_scales) = (widen(|v| &v.k_scales), widen(|v| &v.v_scales));
    let key = |j: usize, kv_head: usize| {
        let (src, r) = rows[j];
        &src.k[r * kv_row_len + kv_head * head_dim..r * kv_row_len + (kv_head + 1) * head_dim]
    };
    let key_scales = |j: usize, kv_head: usize| &k_scales[j * scales_per_row + kv_head * scales_per_head..];

    let h0 = heads.start;
    let (q8, q_scales) = quantize_groups(&q_row[h0 * head_dim..heads.end * head_dim], group);
    let query_scales = |h: usize| &q_scales[(h - h0) * scales_per_head..(h - h0 + 1) * scales_per_head];
    let vectorized = kernel != Q8Kernel::Scalar && group == Q8_GROUP && kernel.supported();
    // scores[(h - h0) * num_keys + j]
    let mut scores = vec![0f32; heads.len() * num_keys];
    if vectorized {
        for j0 in (0..num_keys).step_by(8) {
            for &(src, r) in rows.iter().skip(j0 + PREFETCH_KEYS).take(8) {
                prefetch(&src.k[r * kv_row_len..(r + 1) * kv_row_len]);
                prefetch(&src.v[r * kv_row_len..(r + 1) * kv_row_len]);
            }
            // A last block of fewer than 8 keys repeats its last key in the spare lanes; each
            // lane depends on its own key alone.
            let n = (num_keys - j0).min(8);
            for h in heads.clone() {
                let kv_head = h / heads_per_kv;
                let keys: [&[i8]; 8] = std::array::from_fn(|l| key(j0 + l.min(n - 1), kv_head));
                let scales: [&[f32]; 8] = std::array::from_fn(|l| key_scales(j0 + l.min(n - 1), kv_head));
                let q = &q8[(h - h0) * head_dim..(h - h0 + 1) * head_dim];
                let mut sums = [0f32; 8];
                // SAFETY: `supported()` checked; `q` and every key hold `head_dim` values (a
                // multiple of 32), every scale slice at least `head_dim / 32`.
                unsafe { simd::dot8(kernel, q, query_scales(h), &keys, &scales, &mut sums) };
                let at = (h - h0) * num_keys + j0;
                scores[at..at + n].iter_mut().zip(sums).for_each(|(s, sum)| *s = sum * scale);
            }
        }
    } else {
        for j in 0..num_keys {
            for h in heads.clone() {
                let kv_head = h / heads_per_kv;
                let q = &q8[(h - h0) * head_dim..(h - h0 + 1) * head_dim];
                let sum = dot(q, query_scales(h), key(j, kv_head), key_scales(j, kv_head), group);
                scores[(h - h0) * num_keys + j] = sum * scale;
            }
        }
    }
    let metrics = (want_metrics && heads.len() == num_heads)
        .then(|| attention_metrics_padded(&scores, num_heads, num_keys, span.attn_pad_to));
    for probs in scores.chunks_exact_mut(num_keys) {
        softmax_in_place(probs);
    }
    for h in heads.clone() {
        let kv_head = h / heads_per_kv;
        let probs = &scores[(h - h0) * num_keys..(h - h0 + 1) * num_keys];
        let out = &mut out_heads[(h - h0) * head_dim..(h - h0 + 1) * head_dim];
        let value = |j: usize| {
            let (src, r) = rows[j];
            let at = r * kv_row_len + kv_head * head_dim;
            (&src.v[at..at + head_dim], &v_scales[j * scales_per_row + kv_head * scales_per_head..])
        };
        if vectorized {
            // SAFETY: `supported()` checked; `out` and every value row hold `head_dim` values
            // (a multiple of 32), every scale slice `head_dim / 32`.
            unsafe { simd::weighted_sum(probs, value, out) };
        } else {
            weighted_sum(probs, value, group, out);
        }
    }
    metrics
}

/// How many keys ahead of the scoring loop a row's keys and values are prefetched (as in
/// `attention.rs`).
const PREFETCH_KEYS: usize = 16;

/// A key's score before the attention scale: per group, eight exact lane sums, each fma'd
/// with the product of the query's and the key's group scales into its lane; then the lanes'
/// tree.
pub(crate) fn dot(q: &[i8], q_scales: &[f32], k: &[i8], k_scales: &[f32], group: usize) -> f32 {
    let mut acc = [0f32; 8];
    for (c, (qg, kg)) in q.chunks_exact(group).zip(k.chunks_exact(group)).enumerate() {
        let mut lanes = [0i32; 8];
        for (i, (&a, &b)) in qg.iter().zip(kg).enumerate() {
            lanes[(i / 4) % 8] += a as i32 * b as i32;
        }
        for (a, &lane) in acc.iter_mut().zip(&lanes) {
            *a = (lane as f32).mul_add(q_scales[c] * k_scales[c], *a);
        }
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

/// `out[d] = sum_j (probs[j] * scale_j(d)) * value_j[d]`, one fma per key in key order.
pub(crate) fn weighted_sum<'a>(
    probs: &[f32],
    value: impl Fn(usize) -> (&'a [i8], &'a [f32]),
    group: usize,
    out: &mut [f32],
) {
    for (d, o) in out.iter_mut().enumerate() {
        *o = probs.iter().enumerate().fold(0.0, |acc, (j, &p)| {
            let (v, scales) = value(j);
            (p * scales[d / group]).mul_add(v[d] as f32, acc)
        });
    }
}
