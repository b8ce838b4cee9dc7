use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_llama, quantized_qwen2};

enum Reference {
    Llama(quantized_llama::ModelWeights),
    Qwen2(quantized_qwen2::ModelWeights),
}

impl Reference {
    fn load(path: &Path) -> Result<Self> {
        let mut file = std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
        let content = gguf_file::Content::read(&mut file)?;
        let arch =
            content.metadata.get("general.architecture").and_then(|v| v.to_string().ok()).cloned().unwrap_or_default();
        Ok(match arch.as_str() {
            "qwen2" => Self::Qwen2(quantized_qwen2::ModelWeights::from_gguf(content, &mut file, &Device::Cpu)?),
            _ => Self::Llama(quantized_llama::ModelWeights::from_gguf(content, &mut file, &Device::Cpu)?),
        })
    }

    fn forward(&mut self, x: &Tensor, pos: usize) -> Result<Tensor> {
        Ok(match self {
            Self::Llama(m) => m.forward(x, pos)?,
            Self::Qwen2(m) => m.forward(x, pos)?,
        })
    }
}

/// Seconds spent in prefill and in decode by candle-transformers' own model, one request at
/// a time (the baseline continuous batching must beat).
pub struct BaselineTiming {
    pub prefill_secs: f64,
    pub decode_secs: f64,
    pub prompt_tokens: usize,
    pub output_tokens: usize,
}

pub fn run_sequential(path: &Path, prompts: &[Vec<u32>], output_len: usize) -> Result<BaselineTiming> {
    let mut model = Reference::load(path)?;
    let mut timing = BaselineTiming { prefill_secs: 0.0, decode_secs: 0.0, prompt_tokens: 0, output_tokens: 0 };
    for prompt in prompts {
        let start = Instant::now();
        let input = Tensor::new(prompt.as_slice(), &Device::Cpu)?.unsqueeze(0)?;
        // index_pos 0 resets the model's internal cache.
        let mut logits = model.forward(&input, 0)?;
        let mut next = argmax(&logits)?;
        timing.prefill_secs += start.elapsed().as_secs_f64();
        timing.prompt_tokens += prompt.len();
        timing.output_tokens += 1;
        let start = Instant::now();
        for i in 1..output_len {
            let input = Tensor::new(&[next], &Device::Cpu)?.unsqueeze(0)?;
            logits = model.forward(&input, prompt.len() + i - 1)?;
            next = argmax(&logits)?;
            timing.output_tokens += 1;
        }
        timing.decode_secs += start.elapsed().as_secs_f64();
    }
    Ok(timing)
}

fn argmax(logits: &Tensor) -> Result<u32> {
    let v = logits.flatten_all()?.to_vec1::<f32>()?;
    Ok(v.iter().enumerate().fold(0usize, |best, (i, &x)| if x > v[best] { i } else { best }) as u32)
}
