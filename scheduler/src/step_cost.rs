//! What a step costs: a forward's duration as a function of its rows and of the keys they
//! attend to, fitted online from the steps the engine reports, and how fast requests finish.
//! The scheduler turns a TPOT target into each step's prefill with it, and admission turns a
//! queue into a wait. Keys matter: a prompt chunk deep in a long context attends to every key
//! before it, so at 8k tokens of context a row costs many times a fresh one.

use std::time::Duration;

/// The work of one step: its rows, and the keys its query rows attend to (in thousands).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepWork {
    pub rows: usize,
    pub kilo_keys: f64,
}

impl StepWork {
    /// `n` query rows of a sequence whose first row sits after `context_len` computed tokens.
    pub fn span(context_len: usize, n: usize) -> Self {
        let keys = n as f64 * context_len as f64 + (n as f64) * (n as f64 + 1.0) / 2.0;
        Self { rows: n, kilo_keys: keys / 1000.0 }
    }

    pub fn add(&mut self, other: StepWork) {
        self.rows += other.rows;
        self.kilo_keys += other.kilo_keys;
    }
}

/// Exponentially weighted least squares of `seconds = base + per_row * rows + per_kilo_key *
/// kilo_keys`: recent steps count most, so the fit follows a machine whose load changes.
#[derive(Clone, Debug, Default)]
pub struct StepCost {
    /// Weighted sums of the products of `(1, rows, kilo_keys, seconds)`.
    sums: [[f64; 4]; 4],
    steps: u64,
    /// Finished sequences per second, smoothed; `None` before the first sample.
    finish_rate: Option<f64>,
    finished_since_sample: u64,
    secs_since_sample: f64,
}

/// Half of a step's weight is gone after about 35 steps: long enough to average out noise,
/// short enough to follow a change of load within a few seconds.
const DECAY: f64 = 0.98;
/// Steps before the fit is trusted.
const MIN_STEPS: u64 = 4;
/// A finish rate is sampled over at least this long, so a burst of finishes in one step does
/// not read as a rate.
const FINISH_SAMPLE_SECS: f64 = 1.0;

/// Seconds per step, per row and per thousand keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    pub base: f64,
    pub per_row: f64,
    pub per_kilo_key: f64,
}

impl CostModel {
    pub fn seconds(&self, work: StepWork) -> f64 {
        (self.base + self.per_row * work.rows as f64 + self.per_kilo_key * work.kilo_keys).max(0.0)
    }

    /// What a chunk of `n` prefill rows costs after `context_len` tokens of context.
    pub fn chunk_seconds(&self, context_len: usize, n: usize) -> f64 {
        self.per_row * n as f64 + self.per_kilo_key * StepWork::span(context_len, n).kilo_keys
    }

    /// The longest chunk after `context_len` tokens that costs at most `seconds`: the root of
    /// `k/2 n^2 + (per_row + k (context_len + 1/2)) n = seconds`, `k` the cost of one key.
    pub fn chunk_within(&self, context_len: usize, seconds: f64) -> usize {
        if seconds <= 0.0 {
            return 0;
        }
        let k = self.per_kilo_key / 1000.0;
        let b = self.per_row + k * (context_len as f64 + 0.5);
        let n = if k > 0.0 {
            (-b + (b * b + 2.0 * k * seconds).sqrt()) / k
        } else if b > 0.0 {
            seconds / b
        } else {
            f64::MAX
        };
        (n + 1e-9).floor().min(usize::MAX as f64) as usize
    }
}

impl StepCost {
    /// Records one executed step that did `work` in `elapsed`.
    pub fn observe(&mut self, work: StepWork, elapsed: Duration) {
        if work.rows == 0 {
            return;
        }
        let v = [1.0, work.rows as f64, work.kilo_keys, elapsed.as_secs_f64()];
        for (i, row) in self.sums.iter_mut().enumerate() {
            for (j, s) in row.iter_mut().enumerate() {
                *s = *s * DECAY + v[i] * v[j];
            }
        }
        self.steps += 1;
        self.secs_since_sample += v[3];
        if self.secs_since_sample >= FINISH_SAMPLE_SECS {
            let rate = self.finished_since_sample as f64 / self.secs_since_sample;
            self.finish_rate = Some(self.finish_rate.map_or(rate, |old| old * 0.7 + rate * 0.3));
            self.finished_since_sample = 0;
            self.secs_since_sample = 0.0;
        }
    }

    /// Counts a sequence that finished (any reason); it reaches the rate at the next sample.
    pub fn observe_finish(&mut self) {
        self.finished_since_sample += 1;
    }

    /// The fitted duration of a step doing `work`; `None` until a few steps were seen. Before
    /// steps of different sizes were seen, a step costs what steps have cost.
    pub fn predict(&self, work: StepWork) -> Option<Duration> {
        if self.steps < MIN_STEPS {
            return None;
        }
        let secs = match self.model() {
            Some(model) => model.seconds(work),
            None => self.sums[0][3] / self.sums[0][0],
        };
        Some(Duration::from_secs_f64(secs))
    }

    /// The fitted coefficients; `None` before a few steps, or while the steps seen vary too
    /// little to tell what a row costs.
    pub fn model(&self) -> Option<CostModel> {
        if self.steps < MIN_STEPS {
            return None;
        }
        let s = &self.sums;
        // With keys: all three coefficients, when none comes out negative.
        if let Some([base, per_row, per_kilo_key]) = solve3(
            [[s[0][0], s[0][1], s[0][2]], [s[1][0], s[1][1], s[1][2]], [s[2][0], s[2][1], s[2][2]]],
            [s[0][3], s[1][3], s[2][3]],
        ) {
            if base >= 0.0 && per_row >= 0.0 && per_kilo_key >= 0.0 {
                return Some(CostModel { base, per_row, per_kilo_key });
            }
        }
        // Rows alone.
        let w = s[0][0];
        let (mean_x, mean_y) = (s[0][1] / w, s[0][3] / w);
        let var_x = s[1][1] / w - mean_x * mean_x;
        let cov = s[1][3] / w - mean_x * mean_y;
        if var_x < 1.0 || cov <= 0.0 {
            return None;
        }
        let per_row = cov / var_x;
        let base = mean_y - per_row * mean_x;
        let (base, per_row) = if base < 0.0 { (0.0, mean_y / mean_x) } else { (base, per_row) };
        Some(CostModel { base, per_row, per_kilo_key: 0.0 })
    }

    /// Finished sequences per second lately; `None` before a sample with a finish in it.
    pub fn finish_rate(&self) -> Option<f64> {
        self.finish_rate.filter(|r| *r > 0.0)
    }
}

/// Solves `a x = b` by Gaussian elimination with partial pivoting; `None` when `a` is (close
/// to) singular, as it is while one of the features has not varied.
fn solve3(mut a: [[f64; 3]; 3], mut b: [f64; 3]) -> Option<[f64; 3]> {
    let scale = a.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
    if scale == 0.0 {
        return None;
    }
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() <= scale * 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        let (above, below) = a.split_at_mut(col + 1);
        let pivot_row = above[col];
        for (i, row) in below.iter_mut().enumerate() {
            let f = row[col] / pivot_row[col];
            for (x, p) in row.iter_mut().zip(pivot_row).skip(col) {
                *x -= f * p;
            }
            b[col + 1 + i] -= f * b[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let tail: f64 = (row + 1..3).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - tail) / a[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1000.0)
    }

    fn rows(n: usize) -> StepWork {
        StepWork { rows: n, kilo_keys: 0.0 }
    }

    #[test]
    fn recovers_rows_and_keys_costs() {
        let mut cost = StepCost::default();
        assert!(cost.predict(rows(10)).is_none());
        for i in 0..300 {
            let work = StepWork { rows: 1 + (i * 37) % 300, kilo_keys: ((i * 53) % 400) as f64 };
            let secs = 0.020 + 0.0005 * work.rows as f64 + 0.001 * work.kilo_keys;
            cost.observe(work, Duration::from_secs_f64(secs));
        }
        let model = cost.model().unwrap();
        assert!((model.base - 0.020).abs() < 1e-6, "{model:?}");
        assert!((model.per_row - 0.0005).abs() < 1e-8, "{model:?}");
        assert!((model.per_kilo_key - 0.001).abs() < 1e-8, "{model:?}");
        // A row 8k tokens into its context costs 8 ms of keys beside its 0.5 ms.
        assert!((model.chunk_seconds(8000, 1) - 0.0085).abs() < 1e-5);
        for (context_len, secs) in [(0, 0.05), (8000, 0.1), (100, 0.0)] {
            let n = model.chunk_within(context_len, secs);
            assert!(model.chunk_seconds(context_len, n) <= secs + 1e-12);
            assert!(model.chunk_seconds(context_len, n + 1) > secs, "{context_len} {secs} {n}");
        }
        let at = cost.predict(StepWork::span(1000, 64)).unwrap().as_secs_f64();
        let keys = (64.0 * 1000.0 + 64.0 * 65.0 / 2.0) / 1000.0;
        assert!((at - (0.020 + 0.032 + 0.001 * keys)).abs() < 1e-6, "{at}");
    }

    #[test]
    fn without_keys_varying_rows_alone_are_fitted() {
        let mut cost = StepCost::default();
        for i in 0..200 {
            let n = 1 + (i * 37) % 300;
            cost.observe(rows(n), ms(20.0 + 0.5 * n as f64));
        }
        let model = cost.model().unwrap();
        assert_eq!(model.per_kilo_key, 0.0);
        let at_100 = cost.predict(rows(100)).unwrap().as_secs_f64() * 1000.0;
        assert!((at_100 - 70.0).abs() < 0.5, "{at_100}");
    }

    #[test]
    fn follows_a_change_of_speed() {
        let mut cost = StepCost::default();
        for i in 0..300 {
            let n = 1 + (i * 13) % 64;
            cost.observe(rows(n), ms(10.0 + n as f64));
        }
        for i in 0..300 {
            let n = 1 + (i * 13) % 64;
            cost.observe(rows(n), ms(20.0 + 2.0 * n as f64));
        }
        let at_32 = cost.predict(rows(32)).unwrap().as_secs_f64() * 1000.0;
        assert!((at_32 - 84.0).abs() < 2.0, "{at_32}");
    }

    #[test]
    fn one_size_of_step_predicts_its_cost_and_no_model() {
        let mut cost = StepCost::default();
        for _ in 0..10 {
            cost.observe(rows(8), ms(40.0));
        }
        let at_16 = cost.predict(rows(16)).unwrap().as_secs_f64() * 1000.0;
        assert!((at_16 - 40.0).abs() < 0.01, "{at_16}");
        assert!(cost.model().is_none());
    }

    #[test]
    fn finish_rate_is_sampled_over_time() {
        let mut cost = StepCost::default();
        assert!(cost.finish_rate().is_none());
        for step in 0..40 {
            if step % 2 == 0 {
                cost.observe_finish();
            }
            cost.observe(rows(16), ms(100.0));
        }
        // One finish every 200 ms.
        let rate = cost.finish_rate().unwrap();
        assert!((rate - 5.0).abs() < 0.3, "{rate}");
    }
}
