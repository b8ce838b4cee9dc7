//! A windowed layer's attention, in the fused paged kernel and in the candle mirror, equals
//! softmax attention recomputed densely in f64 over the last `window` keys of each row.

use entrobatch_model_runner::attention::{paged_attention, AttentionShape};
use entrobatch_model_runner::attention_exact::exact_attention;
use entrobatch_model_runner::kv_cache::LayerKv;
use entrobatch_model_runner::{KvDtype, SeqSpan};

const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 16;
const BLOCK: usize = 4;
const KV_ROW: usize = KV_HEADS * HEAD_DIM;

fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len).map(|i| ((i * 2654435761 + seed * 40503) % 1999) as f32 / 999.5 - 1.0).collect()
}

/// Output of row `i` of `span` (`[heads, head_dim]`), attending to keys `first..num_keys`.
#[allow(clippy::too_many_arguments)]
fn dense_row(
    q: &[f32],
    cache: (&[f32], &[f32]),
    step: (&[f32], &[f32]),
    span: &SeqSpan,
    i: usize,
    window: Option<usize>,
    scale: f32,
) -> Vec<f32> {
    let num_keys = span.context_len + i + 1;
    let first = window.map_or(0, |w| num_keys.saturating_sub(w));
    let row = |j: usize| -> (&[f32], &[f32]) {
        let (k, v, at) = if j < span.context_len {
            let slot = span.block_tables[0][j / BLOCK] as usize * BLOCK + j % BLOCK;
            (cache.0, cache.1, slot * KV_ROW)
        } else {
            (step.0, step.1, (span.query_start + j - span.context_len) * KV_ROW)
        };
        (&k[at..at + KV_ROW], &v[at..at + KV_ROW])
    };
    let q_row = &q[(span.query_start + i) * HEADS * HEAD_DIM..][..HEADS * HEAD_DIM];
    let mut out = vec![0f32; HEADS * HEAD_DIM];
    for h in 0..HEADS {
        let g = h / (HEADS / KV_HEADS) * HEAD_DIM;
        let qh = &q_row[h * HEAD_DIM..(h + 1) * HEAD_DIM];
        let scores: Vec<f64> = (first..num_keys)
            .map(|j| qh.iter().zip(&row(j).0[g..g + HEAD_DIM]).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>())
            .map(|s| s * scale as f64)
            .collect();
        let max = scores.iter().cloned().fold(f64::MIN, f64::max);
        let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let total: f64 = exps.iter().sum();
        for d in 0..HEAD_DIM {
            let acc: f64 = (first..num_keys).zip(&exps).map(|(j, e)| e / total * row(j).1[g + d] as f64).sum();
            out[h * HEAD_DIM + d] = acc as f32;
        }
    }
    out
}

#[test]
fn windowed_attention_matches_a_dense_recomputation() {
    let table = vec![5, 2, 7, 0, 3, 6];
    let spans = vec![
        // A decode row far past the window, a chunk that crosses it, and a fresh prefill.
        SeqSpan { query_start: 0, query_len: 1, context_len: 21, block_tables: vec![table.clone()], ..span() },
        SeqSpan { query_start: 1, query_len: 6, context_len: 3, block_tables: vec![vec![1, 4]], ..span() },
        SeqSpan { query_start: 7, query_len: 9, context_len: 0, block_tables: vec![vec![]], ..span() },
    ];
    let rows = 16;
    let (ck, cv) = (values(32 * KV_ROW, 1), values(32 * KV_ROW, 2));
    let (sk, sv) = (values(rows * KV_ROW, 3), values(rows * KV_ROW, 4));
    let q = values(rows * HEADS * HEAD_DIM, 5);
    for window in [None, Some(1), Some(5), Some(8)] {
        let shape = shape(window);
        let cache = LayerKv::from_rows(KvDtype::F32, HEAD_DIM, KV_ROW, ck.clone(), cv.clone(), None);
        let step = LayerKv::from_rows(KvDtype::F32, HEAD_DIM, KV_ROW, sk.clone(), sv.clone(), None);
        let (fused, _) = paged_attention(shape, &q, &step, &cache, &spans, false).unwrap();
        let (mirror, _) = exact_attention(shape, &q, &step, &cache, &spans, false).unwrap();
        for span in &spans {
            for i in 0..span.query_len {
                let want = dense_row(&q, (&ck, &cv), (&sk, &sv), span, i, window, 0.3);
                let at = (span.query_start + i) * HEADS * HEAD_DIM;
                for (name, got) in [("fused", &fused), ("mirror", &mirror)] {
                    let got = &got[at..at + HEADS * HEAD_DIM];
                    let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                    assert!(err < 1e-5, "{name}, window {window:?}, row {} of a span: error {err}", i);
                }
            }
        }
    }
}

#[test]
fn blocks_before_the_window_are_never_read() {
    // Context 21 with a window of 5: the decode row attends to keys 17..=21, in blocks 4 and 5
    // of the table; a windowed group has given back blocks 0..4, which name no block at all.
    let full = vec![5, 2, 7, 0, 3, 6];
    let released = vec![u32::MAX, u32::MAX, u32::MAX, u32::MAX, 3, 6];
    let (ck, cv) = (values(32 * KV_ROW, 1), values(32 * KV_ROW, 2));
    let (sk, sv) = (values(KV_ROW, 3), values(KV_ROW, 4));
    let q = values(HEADS * HEAD_DIM, 5);
    let shape = shape(Some(5));
    let cache = LayerKv::from_rows(KvDtype::F32, HEAD_DIM, KV_ROW, ck, cv, None);
    let step = LayerKv::from_rows(KvDtype::F32, HEAD_DIM, KV_ROW, sk, sv, None);
    let run = |table: &Vec<u32>, exact: bool| {
        let spans = [SeqSpan { context_len: 21, block_tables: vec![table.clone()], ..span() }];
        let run = if exact { exact_attention } else { paged_attention };
        run(shape, &q, &step, &cache, &spans, false).unwrap().0
    };
    for exact in [false, true] {
        assert_eq!(run(&full, exact), run(&released, exact), "exact mirror: {exact}");
    }
}

fn shape(window: Option<usize>) -> AttentionShape {
    AttentionShape {
        num_heads: HEADS,
        num_kv_heads: KV_HEADS,
        head_dim: HEAD_DIM,
        block_size: BLOCK,
        scale: 0.3,
        window,
        kv_group: 0,
    }
}

fn span() -> SeqSpan {
    SeqSpan {
        query_start: 0,
        query_len: 1,
        context_len: 0,
        block_tables: vec![Vec::new()],
        want_attn_metrics: false,
        attn_pad_to: None,
    }
}
