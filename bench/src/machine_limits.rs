//! The limits of this machine that a throughput run is set against:
//! - read bandwidth: one parallel read of as many bytes as a batch-1 token reads, each thread
//!   reading its share as two streams, as the 512-bit int8 kernel reads two panels at once;
//! - the int8 kernel's peak: multiply-adds a second of the projection kernel itself, per weight
//!   format, on a weight that stays in cache, over the rows a batched step gives it.
//!
//! Both are measured in the process that runs the benchmark, on the same thread pool, so a
//! fraction of them says how much of this CPU a path uses, which a ratio to another engine
//! cannot.

use std::time::Instant;

use anyhow::Result;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use entrobatch::model_runner::hot_workers::with_hot_workers;
use entrobatch::model_runner::int8_gemm::{matmul, PackedWeight, QuantBytes};
use rayon::prelude::*;

/// What this machine did at its best, for one run's bytes and weight formats.
#[derive(Clone, Debug)]
pub struct MachineLimits {
    pub read_bytes_per_s: f64,
    /// The int8 kernel's peak per weight format, in operations a second.
    pub int8_peak: Vec<(GgmlDType, f64)>,
}

impl MachineLimits {
    /// Reads `read_bytes` and times the kernel on each of `formats`: a few seconds.
    pub fn measure(read_bytes: usize, formats: impl IntoIterator<Item = GgmlDType>) -> Result<Self> {
        let read_bytes_per_s = read_bandwidth(read_bytes, 20)?;
        let mut int8_peak: Vec<(GgmlDType, f64)> = Vec::new();
        for format in formats {
            if int8_peak.iter().all(|(f, _)| *f != format) {
                int8_peak.push((format, self::int8_peak(format, 0.3)?));
            }
        }
        Ok(Self { read_bytes_per_s, int8_peak })
    }

    /// The better of two measurements of each limit: other tenants of a shared host slow a
    /// measurement down, never up.
    pub fn best(mut self, other: &Self) -> Self {
        self.read_bytes_per_s = self.read_bytes_per_s.max(other.read_bytes_per_s);
        for &(format, peak) in &other.int8_peak {
            match self.int8_peak.iter_mut().find(|(f, _)| *f == format) {
                Some((_, mine)) => *mine = mine.max(peak),
                None => self.int8_peak.push((format, peak)),
            }
        }
        self
    }
}

/// Memory mapped as packed weights are (huge pages where the kernel gives them), read the way
/// the 512-bit kernel reads weights.
pub struct ReadBuffer {
    memory: QuantBytes,
}

impl ReadBuffer {
    pub fn new(bytes: usize) -> Result<Self> {
        let mut memory = QuantBytes::zeroed(bytes.next_multiple_of(8))?;
        // Written once, so that every page is backed rather than the shared zero page.
        memory.fill(1);
        Ok(Self { memory })
    }

    pub fn bytes(&self) -> usize {
        self.memory.len()
    }

    /// Seconds one parallel read of every byte takes, each thread reading its share as two
    /// streams; call it inside `with_hot_workers` to time the read, not the pool's wake-up.
    pub fn read_once(&self) -> f64 {
        // SAFETY: every bit pattern is a valid u64; the slab's regions start on a cache line,
        // so the prefix is empty and the length is a multiple of 8, so the suffix is too.
        let (_, data, _) = unsafe { self.memory.align_to::<u64>() };
        let share = data.len().div_ceil(rayon::current_num_threads()).max(16);
        let start = Instant::now();
        let sum = data.par_chunks(share).map(two_stream_sum).reduce(|| 0, u64::wrapping_add);
        std::hint::black_box(sum);
        start.elapsed().as_secs_f64()
    }
}

/// Fastest of `rounds` parallel reads of `bytes` bytes (`ReadBuffer`), in bytes a second.
pub fn read_bandwidth(bytes: usize, rounds: usize) -> Result<f64> {
    let buffer = ReadBuffer::new(bytes)?;
    // The first round brings the buffer into whatever caches hold it.
    buffer.read_once();
    let best = (0..rounds.max(1)).map(|_| with_hot_workers(|| buffer.read_once())).fold(f64::MAX, f64::min);
    Ok(buffer.bytes() as f64 / best)
}

/// Sum of `values`, its two halves read side by side. Written with explicit vector loads:
/// left to the compiler, the loop was vectorized across its iterations with gathers, which on
/// Zen 5 read at a seventh of the memory's speed.
fn two_stream_sum(values: &[u64]) -> u64 {
    let (a, b) = values.split_at(values.len() / 2);
    let (a_lanes, a_rest) = a.as_chunks::<8>();
    let (b_lanes, b_rest) = b.as_chunks::<8>();
    let pairs = a_lanes.len().min(b_lanes.len());
    let head = sum_pairs(&a_lanes[..pairs], &b_lanes[..pairs]);
    let rest = a_lanes[pairs..].iter().chain(&b_lanes[pairs..]).flatten().chain(a_rest).chain(b_rest);
    rest.fold(head, |s, &v| s.wrapping_add(v))
}

/// Sum of every value of `a` and `b`, one 64-byte line of each per step.
fn sum_pairs(a: &[[u64; 8]], b: &[[u64; 8]]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present.
        return unsafe { sum_pairs_avx2(a, b) };
    }
    a.iter().chain(b).flatten().fold(0, |s, &v| s.wrapping_add(v))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_pairs_avx2(a: &[[u64; 8]], b: &[[u64; 8]]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_si256(); 4];
    for (x, y) in a.iter().zip(b) {
        // SAFETY: each line is 64 bytes, two unaligned 32-byte loads.
        let load =
            |line: &[u64; 8], half: usize| unsafe { _mm256_loadu_si256(line.as_ptr().add(4 * half) as *const __m256i) };
        acc[0] = _mm256_add_epi64(acc[0], load(x, 0));
        acc[1] = _mm256_add_epi64(acc[1], load(x, 1));
        acc[2] = _mm256_add_epi64(acc[2], load(y, 0));
        acc[3] = _mm256_add_epi64(acc[3], load(y, 1));
    }
    let mut lanes = [0u64; 16];
    for (i, v) in acc.iter().enumerate() {
        // SAFETY: `lanes` holds four 32-byte vectors.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().add(4 * i) as *mut __m256i, *v) };
    }
    lanes.iter().fold(0, |s, &v| s.wrapping_add(v))
}

/// Output columns and inputs of the weight the peak is measured on: 1-2 MiB in every format,
/// so it stays in cache, and wide enough for every format's blocks (256 for K-quants).
const PEAK_SHAPE: (usize, usize) = (1024, 2048);
/// Row counts tried; the peak is the best of them.
const PEAK_ROWS: [usize; 2] = [64, 256];

/// The int8 kernel's peak for weights packed from `format`, in operations (two per
/// multiply-add) a second: the best of `PEAK_ROWS` rows, each timed for about `seconds`.
pub fn int8_peak(format: GgmlDType, seconds: f64) -> Result<f64> {
    let (out, inputs) = PEAK_SHAPE;
    let w = Tensor::randn(0f32, 1f32, (out, inputs), &Device::Cpu)?;
    let packed = PackedWeight::from_qtensor(&QTensor::quantize(&w, format)?)?
        .ok_or_else(|| anyhow::anyhow!("{format:?} weights are not run by the int8 kernel"))?;
    let mut best = 0f64;
    for rows in PEAK_ROWS {
        let x = Tensor::randn(0f32, 1f32, rows * inputs, &Device::Cpu)?.to_vec1::<f32>()?;
        let ops = 2.0 * (rows * out * inputs) as f64;
        let rate = with_hot_workers(|| -> Result<f64> {
            matmul(&packed, &x, rows)?;
            let started = Instant::now();
            let mut fastest = f64::MAX;
            while started.elapsed().as_secs_f64() < seconds || fastest == f64::MAX {
                let t = Instant::now();
                std::hint::black_box(matmul(&packed, &x, rows)?);
                fastest = fastest.min(t.elapsed().as_secs_f64());
            }
            Ok(ops / fastest)
        })?;
        best = best.max(rate);
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_streams_sum_every_value_once() {
        for len in [0, 1, 7, 16, 17, 33, 1000] {
            let values: Vec<u64> = (1..=len as u64).collect();
            assert_eq!(two_stream_sum(&values), len as u64 * (len as u64 + 1) / 2, "len {len}");
        }
    }
}
