//! The four entropy/varentropy quadrants of v1 and the action each one takes.

use serde::{Deserialize, Serialize};

use super::config::EntropixConfig;
use super::metrics::LogitStats;

/// Where the logit entropy H and varentropy VH put a step (first match wins, v1 order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quadrant {
    /// H < low_ent and VH < low_vent.
    Lelv,
    /// H > high_ent and VH < low_vent.
    Helv,
    /// H < high_ent and VH > high_vent.
    Lehv,
    /// H > med_ent and VH > high_vent.
    Hehv,
    /// None of the above: the adaptive best-of-N branch.
    Adaptive,
}

pub fn classify(stats: &LogitStats, cfg: &EntropixConfig) -> Quadrant {
    let (h, vh) = (stats.entropy, stats.varentropy);
    if h < cfg.low_ent_thresh && vh < cfg.low_vent_thresh {
        Quadrant::Lelv
    } else if h > cfg.high_ent_thresh && vh < cfg.low_vent_thresh {
        Quadrant::Helv
    } else if h < cfg.high_ent_thresh && vh > cfg.high_vent_thresh {
        Quadrant::Lehv
    } else if h > cfg.med_ent_thresh && vh > cfg.high_vent_thresh {
        Quadrant::Hehv
    } else {
        Quadrant::Adaptive
    }
}

/// What was done with a step: the quadrant, split in two for HELV (the pause token was
/// inserted, or it was the previous token and a hotter sample was drawn instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Branch {
    /// LELV: argmax, "flowing with unspoken intent".
    Argmax,
    /// HELV: the pause / clarification token, "treading carefully".
    Pause,
    /// HELV after a pause: a hotter sample.
    PauseSample,
    /// LEHV: "exploring forks in the path".
    Explore,
    /// HEHV: "resampling in the mist".
    Resample,
    /// Adaptive best-of-N.
    Adaptive,
}

impl Branch {
    pub const ALL: [Branch; 6] =
        [Branch::Argmax, Branch::Pause, Branch::PauseSample, Branch::Explore, Branch::Resample, Branch::Adaptive];

    /// The name used in token metrics, JSON output and plots.
    pub fn as_str(self) -> &'static str {
        match self {
            Branch::Argmax => "argmax",
            Branch::Pause => "pause",
            Branch::PauseSample => "pause_sample",
            Branch::Explore => "explore",
            Branch::Resample => "resample",
            Branch::Adaptive => "adaptive",
        }
    }

    pub fn parse(name: &str) -> Option<Branch> {
        Branch::ALL.into_iter().find(|b| b.as_str() == name)
    }

    pub fn quadrant(self) -> Quadrant {
        match self {
            Branch::Argmax => Quadrant::Lelv,
            Branch::Pause | Branch::PauseSample => Quadrant::Helv,
            Branch::Explore => Quadrant::Lehv,
            Branch::Resample => Quadrant::Hehv,
            Branch::Adaptive => Quadrant::Adaptive,
        }
    }

    /// The seed write-ups' description of the branch.
    pub fn description(self) -> &'static str {
        match self {
            Branch::Argmax => "flowing with unspoken intent",
            Branch::Pause => "treading carefully (pause)",
            Branch::PauseSample => "treading carefully (hotter sample)",
            Branch::Explore => "exploring forks in the path",
            Branch::Resample => "resampling in the mist",
            Branch::Adaptive => "adaptive best-of-N",
        }
    }
}

impl std::fmt::Display for Branch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
