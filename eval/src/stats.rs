//! A strategy's own statistics over an evaluation job: how often each entropix branch was
//! taken and how often MTI guidance fired. They explain an accuracy or speed difference
//! (a strategy that never leaves argmax cannot differ from plain greedy).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use entrobatch::strategy::TriggerStats;
use entrobatch::GeneratedToken;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StrategyStats {
    /// Tokens per entropix branch; None when no token reported one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entropix_branches: Option<BTreeMap<String, usize>>,
    /// MTI tokens decoded and the share that were guided; None without MTI tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mti_tokens: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mti_guided: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mti_trigger_rate: Option<f64>,
    /// Branching: branch points taken, those that kept a continuation other than the plain
    /// draw's, and the tokens decoded by continuations not kept; None without branching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<BranchTotals>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BranchTotals {
    pub points: usize,
    pub kept_other: usize,
    pub extra_tokens: usize,
    /// Branch points skipped for want of a spare sequence slot or KV pages.
    pub no_room: usize,
}

impl BranchTotals {
    /// A request's totals from its `strategy_stats` (`Decoding::Branch`); None for others.
    pub fn of_request(stats: Option<&serde_json::Value>) -> Option<Self> {
        let stats = stats.filter(|s| s["strategy"] == "branch")?;
        let n = |key: &str| stats[key].as_u64().unwrap_or(0) as usize;
        Some(Self {
            points: n("branch_points"),
            kept_other: n("branch_kept_other"),
            extra_tokens: n("branch_extra_tokens"),
            no_room: n("branch_no_room"),
        })
    }

    fn add(&mut self, other: &Self) {
        self.points += other.points;
        self.kept_other += other.kept_other;
        self.extra_tokens += other.extra_tokens;
        self.no_room += other.no_room;
    }
}

impl StrategyStats {
    /// Folds the tokens of every request of the job.
    pub fn from_outputs<'a>(outputs: impl IntoIterator<Item = &'a [GeneratedToken]>) -> Self {
        let mut branches = BTreeMap::<String, usize>::new();
        let mut mti = TriggerStats::default();
        for tokens in outputs {
            for b in tokens.iter().filter_map(|t| t.metrics.as_ref()?.branch.clone()) {
                *branches.entry(b).or_default() += 1;
            }
            let s = TriggerStats::from_tokens(tokens);
            mti = TriggerStats { tokens: mti.tokens + s.tokens, triggered: mti.triggered + s.triggered };
        }
        Self {
            entropix_branches: (!branches.is_empty()).then_some(branches),
            mti_tokens: (mti.tokens > 0).then_some(mti.tokens),
            mti_guided: (mti.tokens > 0).then_some(mti.triggered),
            mti_trigger_rate: (mti.tokens > 0).then(|| mti.rate()),
            branch: None,
        }
    }

    /// Adds one request's branching totals.
    pub fn add_branch(&mut self, totals: Option<BranchTotals>) {
        if let Some(t) = totals {
            self.branch.get_or_insert_with(Default::default).add(&t);
        }
    }

    /// The statistics of two parts of one job (a resumed run's chunks) as one.
    pub fn merge(&mut self, other: &StrategyStats) {
        self.add_branch(other.branch);
        if let Some(theirs) = &other.entropix_branches {
            let ours = self.entropix_branches.get_or_insert_with(BTreeMap::new);
            for (branch, n) in theirs {
                *ours.entry(branch.clone()).or_default() += n;
            }
        }
        if let Some(tokens) = other.mti_tokens {
            let total = self.mti_tokens.unwrap_or(0) + tokens;
            let guided = self.mti_guided.unwrap_or(0) + other.mti_guided.unwrap_or(0);
            self.mti_tokens = Some(total);
            self.mti_guided = Some(guided);
            self.mti_trigger_rate = Some(guided as f64 / total.max(1) as f64);
        }
    }

    /// One short cell for the Markdown table: "argmax 71%, explore 12%, ..." or
    /// "trigger 23.4% of 1200".
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(branches) = &self.entropix_branches {
            let total = branches.values().sum::<usize>().max(1) as f64;
            let mut sorted: Vec<(&String, &usize)> = branches.iter().collect();
            sorted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            parts.push(
                sorted
                    .iter()
                    .map(|(b, n)| format!("{b} {:.0}%", 100.0 * **n as f64 / total))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
        if let (Some(rate), Some(n)) = (self.mti_trigger_rate, self.mti_tokens) {
            parts.push(format!("MTI trigger {:.1}% of {n} tokens", 100.0 * rate));
        }
        if let Some(b) = &self.branch {
            parts.push(format!(
                "{} branch points ({} kept another continuation, {} skipped for room), {} extra tokens",
                b.points, b.kept_other, b.no_room, b.extra_tokens
            ));
        }
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join("; ")
        }
    }
}
