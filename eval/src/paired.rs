//! A strategy against the baseline on the same items: the per-item difference of scores
//! with a paired bootstrap interval, and, when every item has one sample on both sides,
//! McNemar's exact test on the items where exactly one of the two is right. Paired,
//! because items differ far more in difficulty than strategies do: two accuracies whose
//! separate intervals overlap can still differ significantly item by item.

use serde::Serialize;

use super::bootstrap::{mean, mean_interval, Interval};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairedDiff {
    /// The strategy compared against (the first of the run).
    pub baseline: String,
    /// Mean over items of (this score - baseline score), in accuracy units.
    pub mean_diff: f64,
    pub ci95: Interval,
    /// Items this strategy scored higher on, and lower on.
    pub better: usize,
    pub worse: usize,
    /// Two-sided exact McNemar p-value; None when either side averaged several samples
    /// per item (then only the bootstrap interval applies).
    pub mcnemar_p: Option<f64>,
}

/// `scores` and `baseline` are per-item scores in the same item order; `binary` when both
/// are single samples (every score 0 or 1).
pub fn compare(baseline_label: &str, baseline: &[f64], scores: &[f64], binary: bool, seed: u64) -> PairedDiff {
    let diffs: Vec<f64> = scores.iter().zip(baseline).map(|(s, b)| s - b).collect();
    let better = diffs.iter().filter(|&&d| d > 0.0).count();
    let worse = diffs.iter().filter(|&&d| d < 0.0).count();
    PairedDiff {
        baseline: baseline_label.to_string(),
        mean_diff: mean(&diffs),
        ci95: mean_interval(&diffs, seed),
        better,
        worse,
        mcnemar_p: binary.then(|| mcnemar_exact(better, worse)),
    }
}

/// McNemar's exact test: under the null hypothesis each discordant item is equally likely
/// to favour either side, so the smaller count is Binomial(b + c, 1/2); the two-sided
/// p-value doubles its lower tail (capped at 1).
pub fn mcnemar_exact(b: usize, c: usize) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    // Sum of C(n, i) / 2^n for i <= k, in log space so n in the thousands cannot overflow.
    let ln_half_n = n as f64 * std::f64::consts::LN_2;
    let mut ln_choose = 0.0; // ln C(n, 0)
    let mut tail = 0.0;
    for i in 0..=k {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (ln_choose - ln_half_n).exp();
    }
    (2.0 * tail).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcnemar_matches_the_binomial_tail() {
        // b = 1, c = 9: 2 * (C(10,0) + C(10,1)) / 2^10 = 22 / 1024 (scipy.stats.binomtest(1, 10).pvalue).
        assert!((mcnemar_exact(1, 9) - 22.0 / 1024.0).abs() < 1e-12);
        assert!((mcnemar_exact(9, 1) - 22.0 / 1024.0).abs() < 1e-12, "symmetric");
        // b = c: the doubled tail passes 1 and is capped.
        assert_eq!(mcnemar_exact(5, 5), 1.0);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        // b = 0, c = 20: 2 / 2^20.
        assert!((mcnemar_exact(0, 20) - 2.0 / 1_048_576.0).abs() < 1e-15);
        // Large counts stay finite: binomtest(400, 1000).pvalue = 2.3e-10 (order of magnitude).
        let p = mcnemar_exact(400, 600);
        assert!(p > 1e-11 && p < 1e-9, "{p}");
    }

    #[test]
    fn paired_difference_counts_items_each_side() {
        let base = [1.0, 0.0, 0.0, 1.0, 0.0];
        let other = [1.0, 1.0, 1.0, 0.0, 0.0];
        let d = compare("plain", &base, &other, true, 3);
        assert_eq!((d.better, d.worse), (2, 1));
        assert!((d.mean_diff - 0.2).abs() < 1e-12);
        assert!(d.ci95.low <= d.mean_diff && d.mean_diff <= d.ci95.high);
        assert_eq!(d.mcnemar_p, Some(mcnemar_exact(2, 1)));
        assert_eq!(compare("plain", &base, &[0.4, 0.2, 0.0, 1.0, 0.0], false, 3).mcnemar_p, None);
    }
}
