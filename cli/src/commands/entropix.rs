//! The CLI side of entropix: its flags as an `EntropixConfig`, the per-token metrics trace
//! of `run --show-metrics`, and the per-token records of `run --json` (which
//! `plot-metrics` reads back).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};

use anyhow::{Context, Result};
use entrobatch::model_runner::Tokenizer;
use entrobatch::sampler::entropix::{Branch, EntropixConfig, Quadrant};
use entrobatch::GeneratedToken;
use serde_json::{json, Value};

/// `--entropix-config` (a JSON object, or a path to a file holding one; missing fields keep
/// their v1 defaults) with `--entropix-samples` on top.
pub fn config_from_flags(config: Option<&str>, samples: Option<usize>) -> Result<EntropixConfig> {
    let mut cfg = match config {
        None => EntropixConfig::default(),
        Some(text) => {
            let text = text.trim();
            let json = if text.starts_with('{') {
                text.to_string()
            } else {
                std::fs::read_to_string(text).with_context(|| format!("cannot read entropix config {text}"))?
            };
            serde_json::from_str(&json).context("--entropix-config is not a valid entropix config object")?
        }
    };
    if let Some(n) = samples {
        cfg.n_adaptive_samples = n;
    }
    cfg.validate()?;
    Ok(cfg)
}

/// ANSI colour of a branch's quadrant (the MLX port's quadrant colours).
fn colour(branch: Option<Branch>) -> &'static str {
    match branch.map(Branch::quadrant) {
        Some(Quadrant::Lelv) => "\x1b[32m",     // green: flowing
        Some(Quadrant::Helv) => "\x1b[33m",     // yellow: treading carefully
        Some(Quadrant::Lehv) => "\x1b[36m",     // cyan: exploring forks
        Some(Quadrant::Hehv) => "\x1b[31m",     // red: resampling in the mist
        Some(Quadrant::Adaptive) => "\x1b[35m", // magenta: adaptive
        None => "",
    }
}

/// Prints one line per token as it streams; ANSI colours only when stdout is a terminal.
pub struct TokenTrace {
    colour: bool,
    index: usize,
    text: String,
    branches: BTreeMap<String, usize>,
}

impl TokenTrace {
    pub fn new() -> Self {
        Self { colour: std::io::stdout().is_terminal(), index: 0, text: String::new(), branches: BTreeMap::new() }
    }

    pub fn tokens(
        &mut self,
        out: &mut impl Write,
        tokens: &[GeneratedToken],
        text: &str,
        tok: &Tokenizer,
    ) -> Result<()> {
        self.text.push_str(text);
        for t in tokens {
            let piece = tok.decode(&[t.token_id], false).unwrap_or_default();
            let mut line = format!("{:>5} {:>7} {:<16}", self.index, t.token_id, format!("{piece:?}"));
            let mut branch = None;
            if let Some(m) = &t.metrics {
                line.push_str(&format!(" H {:>6.3} VH {:>7.3}", m.entropy, m.varentropy));
                if let Some(a) = &m.attention {
                    line.push_str(&format!(
                        " | attn H {:>6.3} VH {:>6.3} agr {:.2e} IS {:>6.3}",
                        a.entropy, a.varentropy, a.agreement, a.interaction_strength
                    ));
                }
                if let Some(b) = &m.branch {
                    branch = Branch::parse(b);
                    line.push_str(&format!(" | {b}"));
                    *self.branches.entry(b.clone()).or_default() += 1;
                }
            }
            self.index += 1;
            if self.colour && branch.is_some() {
                writeln!(out, "{}{line}\x1b[0m", colour(branch))?;
            } else {
                writeln!(out, "{line}")?;
            }
        }
        Ok(())
    }

    /// The decoded text and, for entropix, how often each branch was taken.
    pub fn finish(&mut self, out: &mut impl Write) -> Result<()> {
        writeln!(out, "--- text:\n{}", self.text)?;
        if !self.branches.is_empty() {
            let total: usize = self.branches.values().sum();
            let parts: Vec<String> = self
                .branches
                .iter()
                .map(|(b, n)| format!("{b} {n} ({:.0}%)", 100.0 * *n as f64 / total as f64))
                .collect();
            writeln!(out, "--- branches: {}", parts.join(", "))?;
        }
        *self = Self { colour: self.colour, ..Self::new() };
        Ok(())
    }
}

/// `run --json`'s per-token records: id, text piece, and the metrics when present.
pub fn token_records(tokens: &[GeneratedToken], tok: &Tokenizer) -> Value {
    tokens
        .iter()
        .map(|t| {
            let mut rec = json!({
                "id": t.token_id,
                "text": tok.decode(&[t.token_id], false).unwrap_or_default(),
            });
            if let Some(m) = &t.metrics {
                rec["metrics"] = serde_json::to_value(m).unwrap_or(Value::Null);
            }
            rec
        })
        .collect()
}
