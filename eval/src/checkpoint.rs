//! A strategy's graded work on disk, so a long evaluation survives being stopped: one JSON
//! line naming the run, then one line per finished chunk (its graded items, decode time
//! and strategy statistics). A restart reads the file, skips the items it holds and appends
//! the rest; a run with other settings refuses the file instead of mixing results.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::report::ItemResult;
use super::stats::StrategyStats;

/// Everything that changes what a chunk's items would be: a file written under another key
/// belongs to another run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunKey {
    pub model: String,
    pub task: String,
    pub strategy: String,
    pub items: usize,
    pub seed: u64,
    pub max_tokens: usize,
    pub temperature: f32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Chunk {
    /// Submit of the chunk's first request to the end of its last, grading excluded.
    pub wall_secs: f64,
    pub stats: StrategyStats,
    pub items: Vec<ItemResult>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Line {
    Header(RunKey),
    Chunk(Chunk),
}

pub struct Checkpoint {
    path: PathBuf,
    file: File,
}

impl Checkpoint {
    /// Opens (or starts) the file for `key`, returning the chunks already in it.
    pub fn open(path: &Path, key: &RunKey) -> Result<(Self, Vec<Chunk>)> {
        let mut chunks = Vec::new();
        let exists = path.exists();
        if exists {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            let mut lines = text.lines().filter(|l| !l.trim().is_empty());
            match lines.next().map(serde_json::from_str::<Line>) {
                Some(Ok(Line::Header(found))) if &found == key => {}
                Some(Ok(Line::Header(found))) => bail!(
                    "{} holds another run ({found:?}, this one is {key:?}); delete it or choose another --resume-dir",
                    path.display()
                ),
                _ => bail!("{} does not start with a run header; delete it to start over", path.display()),
            }
            for (i, line) in lines.enumerate() {
                match serde_json::from_str::<Line>(line) {
                    Ok(Line::Chunk(chunk)) => chunks.push(chunk),
                    // A run stopped while writing leaves a cut last line: its chunk is redone.
                    Err(e) => tracing::warn!("{} chunk line {}: {e}; redoing that chunk", path.display(), i + 1),
                    Ok(Line::Header(_)) => bail!("{}: a second header at chunk line {}", path.display(), i + 1),
                }
            }
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        if !exists {
            writeln!(file, "{}", serde_json::to_string(&Line::Header(key.clone()))?)?;
        }
        Ok((Self { path: path.to_path_buf(), file }, chunks))
    }

    /// Appends a finished chunk as one line, flushed before the next chunk starts.
    pub fn append(&mut self, chunk: &Chunk) -> Result<()> {
        let line = serde_json::to_string(&Line::Chunk(chunk.clone()))?;
        writeln!(self.file, "{line}")
            .and_then(|()| self.file.sync_data())
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

/// The `(item id, sample)` pairs the chunks hold.
pub fn done(chunks: &[Chunk]) -> HashSet<(String, usize)> {
    chunks.iter().flat_map(|c| c.items.iter().map(|i| (i.id.clone(), i.sample))).collect()
}

/// A file name for a strategy label (`mti:tau=1.0:w=1.5` -> `mti_tau=1.0_w=1.5`).
pub fn file_name(task: &str, label: &str) -> String {
    let safe: String =
        label.chars().map(|c| if c.is_ascii_alphanumeric() || "=.-".contains(c) { c } else { '_' }).collect();
    format!("{task}-{safe}.jsonl")
}
