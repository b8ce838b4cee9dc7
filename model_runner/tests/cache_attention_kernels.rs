//! Attention over the 8-bit and f16 KV caches: every kernel this CPU runs gives the scalar
//! kernel's bits (over the attention shapes of the models we serve, windows, blocks smaller and
//! larger than the kernels' 16-slot chunks, and a row's heads split over threads), and the
//! result stays close to attention over the unquantized values computed densely in f64.

use std::sync::Arc;

use entrobatch_model_runner::attention::{paged_attention_with, AttentionShape};
use entrobatch_model_runner::attention_kernel::KvKernel;
use entrobatch_model_runner::kv_cache::LayerKv;
use entrobatch_model_runner::kv_layout::SLOT_CHUNK;
use entrobatch_model_runner::{AttnMetrics, KvDtype, SeqSpan};

/// Qwen2.5-0.5B's attention shape (14 query heads over 2 KV heads of 64).
const SHAPE: AttentionShape = AttentionShape {
    num_heads: 14,
    num_kv_heads: 2,
    head_dim: 64,
    block_size: 16,
    scale: 0.125,
    window: None,
    kv_group: 0,
};
const KV_ROW: usize = SHAPE.num_kv_heads * SHAPE.head_dim;
const Q_ROW: usize = SHAPE.num_heads * SHAPE.head_dim;
const CACHE_BLOCKS: usize = 12;

/// Deterministic values in [-1, 1) with a few large channels, as real keys have.
fn values(len: usize, seed: usize, row_len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let base = ((i * 2654435761 + seed * 40503) % 1999) as f32 / 999.5 - 1.0;
            if i % row_len % 29 == 3 {
                8.0 * base
            } else {
                base
            }
        })
        .collect()
}

fn span(query_start: usize, query_len: usize, context_len: usize) -> SeqSpan {
    SeqSpan {
        query_start,
        query_len,
        context_len,
        block_tables: vec![vec![5, 2, 11, 7, 0, 3, 9, 1]],
        want_attn_metrics: true,
        attn_pad_to: None,
    }
}

struct Inputs {
    q: Vec<f32>,
    cache: (Vec<f32>, Vec<f32>),
    step: (Vec<f32>, Vec<f32>),
}

fn inputs(rows: usize) -> Inputs {
    let slots = CACHE_BLOCKS * SHAPE.block_size;
    Inputs {
        q: values(rows * Q_ROW, 5, Q_ROW),
        cache: (values(slots * KV_ROW, 1, KV_ROW), values(slots * KV_ROW, 2, KV_ROW)),
        step: (values(rows * KV_ROW, 3, KV_ROW), values(rows * KV_ROW, 4, KV_ROW)),
    }
}

fn attend(kernel: KvKernel, inputs: &Inputs, spans: &[SeqSpan]) -> (Vec<f32>, Vec<Option<AttnMetrics>>) {
    let q8 = |(k, v): &(Vec<f32>, Vec<f32>)| {
        LayerKv::from_rows(KvDtype::Q8, SHAPE.head_dim, KV_ROW, k.clone(), v.clone(), None)
    };
    paged_attention_with(kernel, SHAPE, &inputs.q, &q8(&inputs.step), &q8(&inputs.cache), spans, true).unwrap()
}

/// Spans whose key counts are and are not multiples of the 8-key block, decodes and chunks.
fn cases() -> Vec<Vec<SeqSpan>> {
    vec![
        vec![span(0, 1, 1)],
        vec![span(0, 1, 100)],
        vec![span(0, 1, 37), span(1, 5, 60), span(6, 3, 0)],
        vec![span(0, 19, 41)],
    ]
}

/// (query heads, KV heads, head size, block size, window): SmolLM2, Qwen2.5-0.5B, Gemma 3
/// 270M (one KV head of 256, windowed), eight heads a KV head of 128, and blocks that share or
/// span the kernels' chunks.
const SHAPES: [(usize, usize, usize, usize, Option<usize>); 6] = [
    (9, 3, 64, 16, None),
    (14, 2, 64, 16, Some(23)),
    (4, 1, 256, 16, Some(40)),
    (16, 2, 128, 32, None),
    (6, 2, 64, 4, None),
    (6, 2, 64, 24, Some(9)),
];

/// Every kernel gives the scalar kernel's bits on every shape, for both caches, with a row's
/// heads split over 8 threads or not.
#[test]
fn every_kernel_gives_the_scalar_kernels_bits_on_every_shape() {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let cases = [KvDtype::Q8, KvDtype::F16].into_iter().flat_map(|dtype| SHAPES.map(|shape| (dtype, shape)));
    for (dtype, (num_heads, num_kv_heads, head_dim, block_size, window)) in cases {
        let shape = AttentionShape { num_heads, num_kv_heads, head_dim, block_size, scale: 0.125, window, kv_group: 0 };
        let (kv_row, q_row) = (num_kv_heads * head_dim, num_heads * head_dim);
        let table: Vec<u32> = vec![5, 2, 11, 7, 0, 3, 9, 1, 4, 6, 8, 10, 15, 12, 14, 13];
        let slots = table.len() * block_size;
        let span = |query_start, query_len, context_len| SeqSpan {
            query_start,
            query_len,
            context_len,
            block_tables: vec![table.clone()],
            want_attn_metrics: true,
            attn_pad_to: None,
        };
        let row_cases = [vec![span(0, 1, 3 * block_size + 5)], vec![span(0, 1, 37), span(1, 19, 60), span(20, 3, 0)]];
        let offset: Arc<[f32]> = values(kv_row, 9, kv_row).iter().map(|x| 40.0 * x).collect();
        let cases = row_cases.into_iter().flat_map(|spans| [(spans.clone(), None), (spans, Some(offset.clone()))]);
        for (spans, offset) in cases {
            let rows: usize = spans.iter().map(|s| s.query_len).sum();
            let q8 = |len, seed| {
                let (k, v) = (values(len, seed, kv_row), values(len, seed + 1, kv_row));
                LayerKv::from_rows(dtype, head_dim, kv_row, k, v, offset.clone())
            };
            let (cache, step) = (q8(slots * kv_row, 1), q8(rows * kv_row, 3));
            let q = values(rows * q_row, 5, q_row);
            let run = |kernel, threads| {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                pool.install(|| paged_attention_with(kernel, shape, &q, &step, &cache, &spans, true)).unwrap()
            };
            let (scalar, scalar_metrics) = run(KvKernel::Scalar, 1);
            for kernel in KvKernel::ALL.into_iter().filter(|k| k.supported()) {
                for threads in [1, 8] {
                    let (out, metrics) = run(kernel, threads);
                    let at = format!(
                        "{dtype:?}, {kernel:?}, {threads} threads, {shape:?}, {} spans, offset {}",
                        spans.len(),
                        offset.is_some()
                    );
                    assert_eq!(bits(&out), bits(&scalar), "{at}");
                    assert_eq!(metrics, scalar_metrics, "{at}");
                }
            }
        }
    }
    assert!(
        SHAPES.iter().any(|s| s.3 < SLOT_CHUNK) && SHAPES.iter().any(|s| s.3 % SLOT_CHUNK != 0 && s.3 > SLOT_CHUNK)
    );
}

#[test]
fn every_kernel_gives_the_scalar_kernels_bits() {
    for spans in cases() {
        let rows = spans.iter().map(|s| s.query_len).sum();
        let inputs = inputs(rows);
        let (scalar, scalar_metrics) = attend(KvKernel::Scalar, &inputs, &spans);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut compared = 0;
        for kernel in KvKernel::ALL.into_iter().filter(|k| *k != KvKernel::Scalar && k.supported()) {
            let (out, metrics) = attend(kernel, &inputs, &spans);
            assert_eq!(bits(&out), bits(&scalar), "{kernel:?}, {} spans", spans.len());
            assert_eq!(metrics, scalar_metrics, "{kernel:?} metrics");
            compared += 1;
        }
        eprintln!("compared {compared} vector kernels with the scalar one (detected {:?})", KvKernel::detect());
    }
}

/// How far the 8-bit kernel may land from dense attention over its stored values: a key's
/// weight is rounded to half a step of `P x S / 32767` (`attention_q8_values`), which, times an
/// int8 value of up to 127 of a group whose largest value is 8, is at most 1.2e-4 x P a key;
/// the roundings' signs vary, so a row of hundreds of keys stays within a few of those. A key
/// left out or counted twice moves an output by its probability times a value, orders more.
const STORED_VALUES_ERROR: f64 = 5e-4;

/// The same attention in f64 over the f32 values, no cache, no blocks.
fn dense(inputs: &Inputs, span: &SeqSpan) -> Vec<f64> {
    let table = &span.block_tables[0];
    let key_row = |j: usize| -> (&[f32], &[f32]) {
        if j < span.context_len {
            let slot = table[j / SHAPE.block_size] as usize * SHAPE.block_size + j % SHAPE.block_size;
            (&inputs.cache.0[slot * KV_ROW..][..KV_ROW], &inputs.cache.1[slot * KV_ROW..][..KV_ROW])
        } else {
            let r = span.query_start + j - span.context_len;
            (&inputs.step.0[r * KV_ROW..][..KV_ROW], &inputs.step.1[r * KV_ROW..][..KV_ROW])
        }
    };
    let hd = SHAPE.head_dim;
    let mut out = Vec::new();
    for i in 0..span.query_len {
        let q = &inputs.q[(span.query_start + i) * Q_ROW..][..Q_ROW];
        for h in 0..SHAPE.num_heads {
            let g = h / (SHAPE.num_heads / SHAPE.num_kv_heads) * hd;
            let n = span.context_len + i + 1;
            let scores: Vec<f64> = (0..n)
                .map(|j| {
                    let k = &key_row(j).0[g..g + hd];
                    q[h * hd..(h + 1) * hd].iter().zip(k).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>()
                        * SHAPE.scale as f64
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::MIN, f64::max);
            let exp: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = exp.iter().sum();
            for d in 0..hd {
                out.push((0..n).map(|j| exp[j] / total * key_row(j).1[g + d] as f64).sum::<f64>());
            }
        }
    }
    out
}

/// What 8-bit storage keeps of `x`: each group of 32 as `round(x / s) * s` with
/// `s = max |x| / 127` (the cache stores `s` as f16).
fn round_trip(x: &[f32], f16_scale: bool) -> Vec<f32> {
    x.chunks(32)
        .flat_map(|g| {
            let max = g.iter().fold(0f32, |m, v| m.max(v.abs()));
            let s = max / 127.0;
            let kept = if f16_scale { half::f16::from_f32(s).to_f32() } else { s };
            g.iter().map(move |v| if s > 0.0 { (v / s).round() * kept } else { 0.0 })
        })
        .collect()
}

fn max_error(out: &[f32], reference: &[f64]) -> f64 {
    out.iter().zip(reference).fold(0f64, |m, (a, b)| m.max((*a as f64 - b).abs()))
}

/// The kernel's arithmetic: against dense f64 attention over exactly the values it stores
/// (keys and values as the cache keeps them, the query as it quantizes it), only f32 rounding
/// and the value sum's int16 weights are left (`STORED_VALUES_ERROR`).
#[test]
fn q8_attention_is_dense_attention_over_the_stored_values() {
    for spans in cases() {
        let rows = spans.iter().map(|s| s.query_len).sum();
        let inputs = inputs(rows);
        let (out, _) = attend(KvKernel::detect(), &inputs, &spans);
        let stored = Inputs {
            q: round_trip(&inputs.q, false),
            cache: (round_trip(&inputs.cache.0, true), round_trip(&inputs.cache.1, true)),
            step: (round_trip(&inputs.step.0, true), round_trip(&inputs.step.1, true)),
        };
        let reference: Vec<f64> = spans.iter().flat_map(|s| dense(&stored, s)).collect();
        let error = max_error(&out, &reference);
        assert!(error < STORED_VALUES_ERROR, "largest error {error} over {} spans", spans.len());
    }
}

/// Fidelity to the unquantized values: bounded, and worse than the f16 cache's (so the
/// comparison above is not vacuous). Perplexity on real models is in BENCHMARKS.md.
#[test]
fn q8_attention_stays_close_to_attention_over_the_unquantized_values() {
    for spans in cases() {
        let rows = spans.iter().map(|s| s.query_len).sum();
        let inputs = inputs(rows);
        let (out, _) = attend(KvKernel::detect(), &inputs, &spans);
        let reference: Vec<f64> = spans.iter().flat_map(|s| dense(&inputs, s)).collect();
        let f16 = |(k, v): &(Vec<f32>, Vec<f32>)| {
            LayerKv::from_rows(KvDtype::F16, SHAPE.head_dim, KV_ROW, k.clone(), v.clone(), None)
        };
        let (out_f16, _) = paged_attention_with(
            KvKernel::detect(),
            SHAPE,
            &inputs.q,
            &f16(&inputs.step),
            &f16(&inputs.cache),
            &spans,
            true,
        )
        .unwrap();
        let (q8_error, f16_error) = (max_error(&out, &reference), max_error(&out_f16, &reference));
        // Values reach 8, so a group holding one has steps of 8 / 127 for all 32 of its values:
        // the format's own error here is about 0.12 (dense attention over the round-tripped
        // values), whatever the kernel.
        assert!(q8_error < 0.2, "largest error {q8_error} over {} spans", spans.len());
        assert!(f16_error < q8_error, "f16 {f16_error} against q8 {q8_error}");
    }
}

/// Keys with a large constant part (Qwen2's key biases reach 145-158 in the slowest-turning
/// RoPE pairs): stored less the layer's key offset, the other 31 values of such a group keep
/// their precision, and the scores are the keys' own (the offset's product with the query is
/// added back), so attention lands an order of magnitude closer to dense attention over the exact
/// values than with the constant quantized inside each group.
#[test]
fn a_key_offset_keeps_the_precision_a_large_constant_channel_would_take() {
    let mut constant = vec![0f32; KV_ROW];
    for kv_head in 0..SHAPE.num_kv_heads {
        constant[kv_head * SHAPE.head_dim + 31] = -150.0;
        constant[kv_head * SHAPE.head_dim + 63] = 120.0;
    }
    let with_constant =
        |k: &[f32]| -> Vec<f32> { k.iter().enumerate().map(|(i, x)| x + constant[i % KV_ROW]).collect() };
    for spans in cases() {
        let rows = spans.iter().map(|s| s.query_len).sum();
        let plain = inputs(rows);
        // Queries of 0.1: the constant adds up to 27 to each score, the same for every key.
        let inputs = Inputs {
            q: plain.q.iter().map(|x| 0.1 * x).collect(),
            cache: (with_constant(&plain.cache.0), plain.cache.1.clone()),
            step: (with_constant(&plain.step.0), plain.step.1.clone()),
        };
        let reference: Vec<f64> = spans.iter().flat_map(|s| dense(&inputs, s)).collect();
        let run = |offset: Option<Arc<[f32]>>| {
            let q8 = |(k, v): &(Vec<f32>, Vec<f32>)| {
                LayerKv::from_rows(KvDtype::Q8, SHAPE.head_dim, KV_ROW, k.clone(), v.clone(), offset.clone())
            };
            let (out, metrics) = paged_attention_with(
                KvKernel::detect(),
                SHAPE,
                &inputs.q,
                &q8(&inputs.step),
                &q8(&inputs.cache),
                &spans,
                true,
            )
            .unwrap();
            (max_error(&out, &reference), metrics)
        };
        let (plain_error, plain_metrics) = run(None);
        let (offset_error, offset_metrics) = run(Some(constant.clone().into()));
        assert!(offset_error * 8.0 < plain_error, "with the offset {offset_error}, without {plain_error}");
        // The metrics read the scores, which the offset leaves the keys' own.
        for (a, b) in plain_metrics.iter().flatten().zip(offset_metrics.iter().flatten()) {
            assert!(
                (a.interaction_strength - b.interaction_strength).abs() < 0.05 * a.interaction_strength.abs(),
                "{a:?} {b:?}"
            );
        }
    }
}

/// A prompt chunk's rows read their keys in tiles shared by several rows when the pool has few
/// threads, and one row a task when it has many: the bits are the same either way, tiles of
/// keys crossed or not, with or without a window, and the result is dense attention over the
/// stored values.
#[test]
fn a_chunks_rows_give_the_same_bits_in_tiles_as_alone() {
    let blocks = 48;
    // A fixed shuffle of the pool, as a server's block tables are after some churn.
    let table: Vec<u32> = (0..blocks).map(|b| (b * 29 % blocks) as u32).collect();
    let slots = blocks * SHAPE.block_size;
    let (rows, context) = (70, 600);
    let spans = vec![SeqSpan {
        query_start: 0,
        query_len: rows,
        context_len: context,
        block_tables: vec![table],
        want_attn_metrics: true,
        attn_pad_to: None,
    }];
    let inputs = Inputs {
        q: values(rows * Q_ROW, 5, Q_ROW),
        cache: (values(slots * KV_ROW, 1, KV_ROW), values(slots * KV_ROW, 2, KV_ROW)),
        step: (values(rows * KV_ROW, 3, KV_ROW), values(rows * KV_ROW, 4, KV_ROW)),
    };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for dtype in [KvDtype::Q8, KvDtype::F16] {
        let layer = |(k, v): &(Vec<f32>, Vec<f32>)| {
            LayerKv::from_rows(dtype, SHAPE.head_dim, KV_ROW, k.clone(), v.clone(), None)
        };
        let (step, cache) = (layer(&inputs.step), layer(&inputs.cache));
        for window in [None, Some(300)] {
            let shape = AttentionShape { window, ..SHAPE };
            for kernel in [KvKernel::Scalar, KvKernel::detect()] {
                let run = |threads| {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    pool.install(|| paged_attention_with(kernel, shape, &inputs.q, &step, &cache, &spans, true))
                        .unwrap()
                };
                // 1 thread: tiles of 8 rows; 64 threads: a row a task.
                let ((tiled, tiled_metrics), (alone, alone_metrics)) = (run(1), run(64));
                let at = format!("{dtype:?}, {kernel:?}, window {window:?}");
                assert_eq!(bits(&tiled), bits(&alone), "{at}");
                assert_eq!(tiled_metrics, alone_metrics, "{at}");
                if dtype == KvDtype::Q8 && window.is_none() {
                    let stored = Inputs {
                        q: round_trip(&inputs.q, false),
                        cache: (round_trip(&inputs.cache.0, true), round_trip(&inputs.cache.1, true)),
                        step: (round_trip(&inputs.step.0, true), round_trip(&inputs.step.1, true)),
                    };
                    let error = max_error(&tiled, &dense(&stored, &spans[0]));
                    assert!(error < STORED_VALUES_ERROR, "{at}: largest error {error}");
                }
            }
        }
    }
}

/// A row's keys split between the cache and the step's own rows wherever its prompt's chunks
/// ended (which depends on what else the step held): the row's output has the same bits
/// wherever the split falls, across a tile's end or not, for both caches and every kernel.
#[test]
fn a_rows_bits_do_not_depend_on_where_its_keys_split_between_cache_and_step() {
    let blocks = 48;
    let table: Vec<u32> = (0..blocks).map(|b| (b * 29 % blocks) as u32).collect();
    let bs = SHAPE.block_size;
    let keys = 600;
    let (k_all, v_all) = (values(keys * KV_ROW, 1, KV_ROW), values(keys * KV_ROW, 2, KV_ROW));
    let q_last = values(Q_ROW, 5, Q_ROW);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for dtype in [KvDtype::Q8, KvDtype::F16] {
        for kernel in KvKernel::ALL.into_iter().filter(|k| k.supported()) {
            let mut first: Option<Vec<u32>> = None;
            for cached in [0, 5, 16, 300, 511, 512, 513, keys - 1] {
                let rows = keys - cached;
                let (mut k, mut v) = (vec![0f32; blocks * bs * KV_ROW], vec![0f32; blocks * bs * KV_ROW]);
                for j in 0..cached {
                    let slot = table[j / bs] as usize * bs + j % bs;
                    k[slot * KV_ROW..][..KV_ROW].copy_from_slice(&k_all[j * KV_ROW..][..KV_ROW]);
                    v[slot * KV_ROW..][..KV_ROW].copy_from_slice(&v_all[j * KV_ROW..][..KV_ROW]);
                }
                let layer = |k: Vec<f32>, v: Vec<f32>| LayerKv::from_rows(dtype, SHAPE.head_dim, KV_ROW, k, v, None);
                let cache = layer(k, v);
                let step = layer(k_all[cached * KV_ROW..].to_vec(), v_all[cached * KV_ROW..].to_vec());
                let mut q = values(rows * Q_ROW, 7, Q_ROW);
                q[(rows - 1) * Q_ROW..].copy_from_slice(&q_last);
                let spans = [SeqSpan {
                    query_start: 0,
                    query_len: rows,
                    context_len: cached,
                    block_tables: vec![table.clone()],
                    want_attn_metrics: false,
                    attn_pad_to: None,
                }];
                let (out, _) = paged_attention_with(kernel, SHAPE, &q, &step, &cache, &spans, true).unwrap();
                let last = bits(&out[(rows - 1) * Q_ROW..]);
                match &first {
                    None => first = Some(last),
                    Some(first) => assert!(*first == last, "{dtype:?}, {kernel:?}, {cached} keys cached"),
                }
            }
        }
    }
}
