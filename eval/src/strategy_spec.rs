//! `--strategies plain,entropix,mti:tau=1.0:w=1.5`: a comma-separated list of strategies,
//! each a name with `:key=value` options, parsed into the engine's `Decoding`. The spec
//! text doubles as the strategy's label in reports, so a table row says exactly what ran.

use anyhow::{anyhow, bail, Context, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use entrobatch::strategy::{BranchConfig, EntropixConfig, MtiConfig, WedlmConfig};
use entrobatch::Decoding;

#[derive(Clone, Debug, PartialEq)]
pub struct StrategySpec {
    pub label: String,
    pub decoding: Decoding,
    /// `t=`: overrides the run's `--temperature` (plain and MTI; entropix has its own).
    pub temperature: Option<f32>,
    /// `top_p=`: nucleus sampling for this strategy only.
    pub top_p: Option<f32>,
    /// `n=`: samples per item, seeded seed + k; the item's score is the share that are
    /// correct, so the strategy's accuracy is pass@1 averaged over n draws.
    pub samples: usize,
}

/// Parses the whole list; empty entries are skipped, an empty list is an error.
pub fn parse_strategies(list: &str) -> Result<Vec<StrategySpec>> {
    let specs: Vec<StrategySpec> =
        list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(parse_strategy).collect::<Result<_>>()?;
    if specs.is_empty() {
        bail!("no strategy given (e.g. --strategies plain,entropix,mti:tau=1.0:w=1.5)");
    }
    Ok(specs)
}

/// One strategy:
/// - `plain`
/// - `entropix[:samples=N][:FIELD=VALUE...]` with any `EntropixConfig` field
/// - `mti[:tau=T][:w=W][:neg=TEXT]` (`tau=inf`: never guide; negative: always)
/// - `wedlm[:window=W][:tau=T][:pos=L]` (needs a WeDLM checkpoint)
/// - `branch[:k=K][:tau=BITS][:lookahead=L][:scorer=margin|mean_logprob][:FIELD=VALUE...]` with
///   any `BranchConfig` field
///
/// and on any of them the sampling options `t=T` (temperature; not entropix, which sets
/// its own), `top_p=P` and `n=N` (samples per item).
pub fn parse_strategy(spec: &str) -> Result<StrategySpec> {
    let mut parts = spec.split(':');
    let name = parts.next().unwrap_or_default().trim();
    let all: Vec<(&str, &str)> = parts
        .map(|p| p.split_once('=').map(|(k, v)| (k.trim(), v.trim())).ok_or_else(|| anyhow!("'{p}' is not KEY=VALUE")))
        .collect::<Result<_>>()
        .with_context(|| format!("strategy '{spec}'"))?;
    let (sampling, options): (Vec<_>, Vec<_>) = all.into_iter().partition(|(k, _)| SAMPLING_KEYS.contains(k));
    let (mut temperature, mut top_p, mut samples) = (None, None, 1);
    for (key, value) in sampling {
        match key {
            "t" => temperature = Some(float(key, value).with_context(|| format!("strategy '{spec}'"))?),
            "top_p" => top_p = Some(float(key, value).with_context(|| format!("strategy '{spec}'"))?),
            _ => {
                samples = value
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| (1..=MAX_SAMPLES).contains(&n))
                    .ok_or_else(|| anyhow!("strategy '{spec}': n must be 1..={MAX_SAMPLES}, got '{value}'"))?
            }
        }
    }
    if temperature.is_some_and(|t| !(t >= 0.0 && t.is_finite())) {
        bail!("strategy '{spec}': t must be a finite temperature >= 0");
    }
    if top_p.is_some_and(|p| !(p > 0.0 && p <= 1.0)) {
        bail!("strategy '{spec}': top_p must be in (0, 1]");
    }
    if temperature.is_some() && name == "entropix" {
        bail!("strategy '{spec}': entropix sets its own temperatures; drop t=");
    }
    let decoding = match name {
        "plain" => match options.first() {
            None => Decoding::Plain,
            Some((k, _)) => bail!("strategy '{spec}': plain takes no option ('{k}')"),
        },
        "entropix" => Decoding::Entropix(entropix(&options).with_context(|| format!("strategy '{spec}'"))?),
        "mti" => Decoding::Mti(mti(&options).with_context(|| format!("strategy '{spec}'"))?),
        "wedlm" => Decoding::Wedlm(wedlm(&options).with_context(|| format!("strategy '{spec}'"))?),
        "branch" => Decoding::Branch(branch(&options).with_context(|| format!("strategy '{spec}'"))?),
        _ => bail!("unknown strategy '{name}' (known: plain, entropix, mti, wedlm, branch)"),
    };
    Ok(StrategySpec { label: spec.to_string(), decoding, temperature, top_p, samples })
}

/// Options every strategy takes; the rest belong to the strategy.
const SAMPLING_KEYS: [&str; 3] = ["t", "top_p", "n"];
/// As the server's `n`.
const MAX_SAMPLES: usize = 64;

fn float(key: &str, value: &str) -> Result<f32> {
    let v: f32 = value.parse().map_err(|_| anyhow!("{key}={value}: not a number"))?;
    if v.is_nan() {
        bail!("{key} is NaN");
    }
    Ok(v)
}

/// Options overwrite fields of the default config through its serde form, so every field
/// is reachable without listing them here; unknown fields are errors, not silently ignored.
fn entropix(options: &[(&str, &str)]) -> Result<EntropixConfig> {
    let cfg: EntropixConfig =
        overwrite_fields("entropix", EntropixConfig::default(), options, ("samples", "n_adaptive_samples"))?;
    cfg.validate()?;
    Ok(cfg)
}

/// `branch[:k=K][:tau=BITS][:varentropy_threshold=V][:lookahead=L][:scorer=margin]...`: any
/// `BranchConfig` field; `tau` is `entropy_threshold`.
fn branch(options: &[(&str, &str)]) -> Result<BranchConfig> {
    let cfg: BranchConfig = overwrite_fields("branch", BranchConfig::default(), options, ("tau", "entropy_threshold"))?;
    cfg.validate()?;
    Ok(cfg)
}

/// `default` with each `key=value` written over the field of that name in its serde form
/// (`alias`: a short key and the field it names): named choices stay strings (serde checks
/// them), counts and optional ids parse as integers, switches as booleans, the rest as numbers.
fn overwrite_fields<T: Serialize + DeserializeOwned>(
    name: &str,
    default: T,
    options: &[(&str, &str)],
    alias: (&str, &str),
) -> Result<T> {
    let mut json = serde_json::to_value(default)?;
    let Some(fields) = json.as_object_mut() else { bail!("{name} config is not an object") };
    for &(key, value) in options {
        let key = if key == alias.0 { alias.1 } else { key };
        let Some(slot) = fields.get_mut(key) else { bail!("{name} has no option '{key}'") };
        *slot = if slot.is_string() {
            Value::from(value)
        } else if slot.is_boolean() {
            Value::from(value.parse::<bool>().map_err(|_| anyhow!("{key}={value}: not true or false"))?)
        } else if slot.is_u64() || slot.is_null() {
            Value::from(value.parse::<u64>().map_err(|_| anyhow!("{key}={value}: not a count"))?)
        } else {
            Value::from(f64::from(float(key, value)?))
        };
    }
    Ok(serde_json::from_value(json)?)
}

fn mti(options: &[(&str, &str)]) -> Result<MtiConfig> {
    let mut cfg = MtiConfig::default();
    for &(key, value) in options {
        match key {
            "tau" | "entropy_threshold" => cfg.entropy_threshold = float(key, value)?,
            "w" | "guidance_scale" => cfg.guidance_scale = float(key, value)?,
            "neg" | "negative_prompt" => cfg.negative_prompt = value.to_string(),
            _ => bail!("mti has no option '{key}' (tau, w, neg)"),
        }
    }
    Ok(cfg)
}

fn wedlm(options: &[(&str, &str)]) -> Result<WedlmConfig> {
    let mut cfg = WedlmConfig::default();
    for &(key, value) in options {
        match key {
            "window" | "window_size" => {
                cfg.window_size = value.parse().map_err(|_| anyhow!("{key}={value}: not a count"))?
            }
            // Negative: exactly one mask per forward, as in `run --entropy-threshold`.
            "tau" | "entropy_threshold" => {
                let t = float(key, value)?;
                cfg.entropy_threshold = (t >= 0.0).then_some(t);
            }
            "pos" | "pos_penalty" => cfg.pos_penalty = float(key, value)?,
            _ => bail!("wedlm has no option '{key}' (window, tau, pos)"),
        }
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use entrobatch::sampler::entropix::AdaptiveScore;

    #[test]
    fn entropix_options_reach_named_and_optional_fields() {
        let spec = parse_strategy("entropix:adaptive_score=surprisal:attention_pad_to=4096:samples=3").unwrap();
        let Decoding::Entropix(cfg) = spec.decoding else { panic!("not entropix") };
        assert_eq!(cfg.adaptive_score, AdaptiveScore::Surprisal);
        assert_eq!(cfg.attention_pad_to, Some(4096));
        assert_eq!(cfg.n_adaptive_samples, 3);
        assert!(parse_strategy("entropix:adaptive_score=best").is_err());
        assert!(parse_strategy("entropix:attention_pad_to=x").is_err());
    }

    #[test]
    fn branch_options_reach_every_field() {
        let spec = parse_strategy("branch:k=4:tau=0.5:lookahead=12:scorer=margin:stop_at_newline=false").unwrap();
        let Decoding::Branch(cfg) = spec.decoding else { panic!("not branch") };
        assert_eq!((cfg.k, cfg.entropy_threshold, cfg.lookahead), (4, 0.5, 12));
        assert_eq!((cfg.scorer, cfg.stop_at_newline), (entrobatch::sampler::BranchScorer::Margin, false));
        assert!(parse_strategy("branch:k=1").is_err(), "validated");
        assert!(parse_strategy("branch:scorer=vote").is_err());
        assert!(parse_strategy("branch:stop_at_newline=maybe").is_err());
        assert!(parse_strategy("branch:width=3").is_err());
    }

    #[test]
    fn sampling_options_apply_to_any_strategy() {
        let spec = parse_strategy("plain:t=0.7:top_p=0.9:n=5").unwrap();
        assert_eq!(
            (spec.decoding, spec.temperature, spec.top_p, spec.samples),
            (Decoding::Plain, Some(0.7), Some(0.9), 5)
        );
        let spec = parse_strategy("mti:tau=0.5:w=1.5:n=2").unwrap();
        assert_eq!((spec.samples, spec.temperature), (2, None));
        assert!(parse_strategy("entropix:t=0.7").is_err(), "entropix has its own temperatures");
        assert!(parse_strategy("plain:n=0").is_err());
        assert!(parse_strategy("plain:n=65").is_err());
        assert!(parse_strategy("plain:top_p=x").is_err());
        assert!(parse_strategy("plain:top_p=1.5").is_err());
        assert!(parse_strategy("plain:top_p=0").is_err());
        assert!(parse_strategy("plain:t=-1").is_err());
    }
}
