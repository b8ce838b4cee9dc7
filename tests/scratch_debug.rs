mod common;
use entrobatch::model_runner::*;

fn exec(runner: &mut ModelRunner, ids: &[u32], ctx: usize) -> Vec<f32> {
    let n = ids.len();
    let batch = ForwardBatch { input_ids: ids.to_vec(), positions: (ctx as u32..(ctx + n) as u32).collect(),
        slot_mapping: (ctx as i64..(ctx + n) as i64).collect(),
        seqs: vec![SeqSpan { query_start: 0, query_len: n, context_len: ctx, block_table: (0..16).collect(), want_attn_metrics: false }], logits_rows: vec![n - 1] };
    runner.execute(&batch).unwrap().logits
}
fn diff(a: &[f32], b: &[f32]) -> f32 { a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max) }

#[test]
fn chunks() {
    let path = common::smollm2_path();
    let seq: Vec<u32> = (0..163).map(|i| 7 + (i * 37) % 3000).collect();
    let mk = || { let (m, _) = load_gguf(&path, MatmulMode::Quantized).unwrap(); ModelRunner::new(m, 16, 16).unwrap() };
    let reference = common::reference_logits(&path, common::RefArch::Llama, &seq);
    let full = exec(&mut mk(), &seq, 0);
    eprintln!("full vs ref {}", diff(&full, &reference));
    for chunk in [64usize, 96, 128, 140] {
        let mut r = mk();
        let mut out = vec![];
        let mut start = 0;
        while start < seq.len() { let end = (start + chunk).min(seq.len()); out = exec(&mut r, &seq[start..end], start); start = end; }
        eprintln!("chunk {chunk} vs ref {}", diff(&out, &reference));
    }
}
