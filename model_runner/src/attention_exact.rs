use candle_core::{Device, Tensor, D};

use crate::attention::AttentionShape;
use crate::batch::SeqSpan;
use crate::error::Result;
use crate::kv_cache::LayerKv;
use crate::metrics::{attention_metrics_padded, AttnMetrics};

/// Attention computed span by span with the same candle tensor ops, in the same order, as
/// candle-transformers' `quantized_llama` / `quantized_qwen2` (`q.k^T / sqrt(d)`, masked fill,
/// `softmax_last_dim`, `att.v` over `repeat_kv`'d K/V gathered from the paged cache).
///
/// Why it exists: those models quantize activations to int8 before every matmul, which turns
/// a one-ulp difference in attention arithmetic into a visibly different logit a few layers
/// later. Mirroring their ops makes the engine's greedy tokens bit-comparable with theirs, so
/// the scheduler, paging, chunking and preemption are checked against an independent model.
/// The fused kernel in `attention.rs` is the fast path; this one is used in `Quantized` mode.
pub fn exact_attention(
    shape: AttentionShape,
    q: &[f32],
    step: &LayerKv,
    cache: &LayerKv,
    spans: &[SeqSpan],
    collect_metrics: bool,
) -> Result<(Vec<f32>, Vec<Option<AttnMetrics>>)> {
    let AttentionShape { num_heads, num_kv_heads, head_dim, block_size, scale, window, kv_group } = shape;
    let q_row_len = num_heads * head_dim;
    let kv_row_len = num_kv_heads * head_dim;
    let rows = q.len() / q_row_len;
    let device = Device::Cpu;
    let mut out = vec![0f32; rows * q_row_len];
    let mut metrics = vec![None; spans.len()];
    for (s, span) in spans.iter().enumerate() {
        let (q_len, ctx) = (span.query_len, span.context_len);
        let n = ctx + q_len;
        let q_rows = &q[span.query_start * q_row_len..(span.query_start + q_len) * q_row_len];
        let q = Tensor::from_slice(q_rows, (1, q_len, num_heads, head_dim), &device)?.transpose(1, 2)?.contiguous()?;
        let mut k_rows = Vec::with_capacity(n * kv_row_len);
        let mut v_rows = Vec::with_capacity(n * kv_row_len);
        // Keys before the first row's window are masked for every row, and a windowed group may
        // have released their blocks: zeros stand in for them.
        let first_read = window.map_or(0, |w| (ctx + 1).saturating_sub(w)).min(ctx);
        k_rows.resize(first_read * kv_row_len, 0.0);
        v_rows.resize(first_read * kv_row_len, 0.0);
        let block_table = &span.block_tables[kv_group];
        for j in first_read..ctx {
            let slot = block_table[j / block_size] as usize * block_size + j % block_size;
            let (k, v) = cache.read(slot, 1, kv_row_len);
            k_rows.extend(k);
            v_rows.extend(v);
        }
        let (k, v) = step.read(span.query_start, q_len, kv_row_len);
        k_rows.extend(k);
        v_rows.extend(v);
        if let Some(offset) = step.key_offset() {
            // q8 keys are stored less their layer's offset, the step's as the cache's.
            for row in k_rows[first_read * kv_row_len..].chunks_exact_mut(kv_row_len) {
                row.iter_mut().zip(offset).for_each(|(x, c)| *x += c);
            }
        }
        let to_heads = |rows: Vec<f32>| -> Result<Tensor> {
            let t = Tensor::from_vec(rows, (1, n, num_kv_heads, head_dim), &device)?.transpose(1, 2)?.contiguous()?;
            Ok(candle_transformers::utils::repeat_kv(t, num_heads / num_kv_heads)?)
        };
        let (k, v) = (to_heads(k_rows)?, to_heads(v_rows)?);
        // The default scale divides by sqrt(head_dim), as candle-transformers' models do.
        let att = q.matmul(&k.t()?)?;
        let mut att = if scale == crate::config::ModelConfig::default_attention_scale(head_dim) {
            (att / (head_dim as f64).sqrt())?
        } else {
            (att * scale as f64)?
        };
        let masked = |i: usize, j: usize| j > ctx + i || window.is_some_and(|w| j + w <= ctx + i);
        if q_len > 1 || window.is_some_and(|w| w < n) {
            let mask: Vec<u8> = (0..q_len).flat_map(|i| (0..n).map(move |j| u8::from(masked(i, j)))).collect();
            let mask = Tensor::from_vec(mask, (q_len, n), &device)?.broadcast_as(att.shape())?;
            let neg_inf = Tensor::new(f32::NEG_INFINITY, &device)?.broadcast_as(att.shape())?;
            att = mask.where_cond(&neg_inf, &att)?;
        }
        if collect_metrics && span.want_attn_metrics {
            let last = att.narrow(2, q_len - 1, 1)?.squeeze(2)?.squeeze(0)?;
            // Over the keys the row attends to, as in the fused kernel.
            let first = window.map_or(0, |w| n.saturating_sub(w));
            let scores = last.narrow(D::Minus1, first, n - first)?.flatten_all()?.to_vec1::<f32>()?;
            metrics[s] = Some(attention_metrics_padded(&scores, num_heads, n - first, span.attn_pad_to));
        }
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let y = att.matmul(&v.contiguous()?)?.transpose(1, 2)?.contiguous()?;
        let y = y.flatten_all()?.to_vec1::<f32>()?;
        out[span.query_start * q_row_len..(span.query_start + q_len) * q_row_len].copy_from_slice(&y);
    }
    Ok((out, metrics))
}
