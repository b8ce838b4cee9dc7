//! Paged attention's parallel split: with few query rows a row's heads are spread over the pool,
//! and the output must be the same bits as one task per row computes (a 1-thread pool never
//! splits; an 8-thread one gives a decode row one task per head).

use entrobatch_model_runner::attention::{paged_attention, AttentionShape};
use entrobatch_model_runner::kv_cache::LayerKv;
use entrobatch_model_runner::{AttnMetrics, KvDtype, SeqSpan};

const SHAPE: AttentionShape = AttentionShape {
    num_heads: 6,
    num_kv_heads: 2,
    head_dim: 16,
    block_size: 4,
    scale: 0.25,
    window: None,
    kv_group: 0,
};

fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len).map(|i| ((i * 2654435761 + seed * 40503) % 1999) as f32 / 999.5 - 1.0).collect()
}

fn span(query_start: usize, query_len: usize, context_len: usize, metrics: bool) -> SeqSpan {
    SeqSpan {
        query_start,
        query_len,
        context_len,
        block_tables: vec![vec![5, 2, 7, 0, 3]],
        want_attn_metrics: metrics,
        attn_pad_to: None,
    }
}

fn attend(threads: usize, dtype: KvDtype, spans: &[SeqSpan]) -> (Vec<u32>, Vec<Option<AttnMetrics>>) {
    let kv_row = SHAPE.num_kv_heads * SHAPE.head_dim;
    let rows: usize = spans.iter().map(|s| s.query_len).sum();
    let cache = LayerKv::from_rows(dtype, SHAPE.head_dim, kv_row, values(32 * kv_row, 1), values(32 * kv_row, 2), None);
    let step =
        LayerKv::from_rows(dtype, SHAPE.head_dim, kv_row, values(rows * kv_row, 3), values(rows * kv_row, 4), None);
    let q = values(rows * SHAPE.num_heads * SHAPE.head_dim, 5);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let (out, metrics) = pool.install(|| paged_attention(SHAPE, &q, &step, &cache, spans, true)).unwrap();
    (out.iter().map(|v| v.to_bits()).collect(), metrics)
}

#[test]
fn splitting_a_rows_heads_over_the_pool_keeps_every_bit() {
    let cases =
        [vec![span(0, 1, 13, false)], vec![span(0, 1, 13, true)], vec![span(0, 1, 19, false), span(1, 2, 6, true)]];
    for dtype in [KvDtype::F32, KvDtype::F16, KvDtype::Q8] {
        for spans in &cases {
            let whole = attend(1, dtype, spans);
            assert_eq!(attend(8, dtype, spans), whole, "{dtype:?}, {} spans", spans.len());
            assert_eq!(attend(3, dtype, spans), whole, "{dtype:?}, {} spans", spans.len());
            let wanted = spans.iter().filter(|s| s.want_attn_metrics).count();
            assert_eq!(whole.1.iter().flatten().count(), wanted, "metrics for each span that asks");
        }
    }
}
