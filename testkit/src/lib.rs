//! What entrobatch's integration tests share, across the crates whose tests need it: model
//! paths, tiny generated models and candle-transformers references (`common`), tiny Hugging
//! Face checkpoints and a dense WeDLM reference (`wedlm`), and an in-process server with a raw
//! HTTP client (`server`). A dev-dependency only: no release build links it.

pub mod common;
pub mod server;
pub mod wedlm;

use std::path::PathBuf;

/// The repository's root, where `scripts/fetch-model` puts `models/` and the fixtures live.
pub fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Where tests write generated models: the system's temporary directory, since a library
/// crate gets no `CARGO_TARGET_TMPDIR` of its own. The tests hand these paths to engines and
/// servers that outlive the helper which wrote them, so nothing removes a model when its test
/// ends; instead the first use in each test process removes what earlier runs left more than
/// a day ago, which keeps a machine that runs the suite again and again from filling up.
pub fn tmp_dir() -> &'static str {
    static DIR: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join("entrobatch-tests");
        remove_older_than(&dir, std::time::Duration::from_secs(24 * 3600));
        dir.to_string_lossy().into_owned()
    })
}

/// Removes the entries of `dir` last modified more than `age` ago; errors only mean less is
/// removed (another process may be removing the same entry).
fn remove_older_than(dir: &std::path::Path, age: std::time::Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let old = entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().is_ok_and(|e| e > age));
        if old {
            let path = entry.path();
            let _ = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    #[test]
    fn only_entries_older_than_the_age_are_removed() {
        let root = std::env::temp_dir().join(format!("entrobatch-sweep-{}", std::process::id()));
        let (old_dir, old_file, new_dir) = (root.join("old"), root.join("old.gguf"), root.join("new"));
        std::fs::create_dir_all(old_dir.join("inner")).unwrap();
        std::fs::create_dir_all(&new_dir).unwrap();
        std::fs::write(&old_file, b"x").unwrap();
        let two_days_ago = SystemTime::now() - Duration::from_secs(48 * 3600);
        for path in [&old_dir, &old_file] {
            std::fs::File::open(path).unwrap().set_modified(two_days_ago).unwrap();
        }
        super::remove_older_than(&root, Duration::from_secs(24 * 3600));
        assert!(!old_dir.exists() && !old_file.exists(), "entries two days old stay");
        assert!(new_dir.exists(), "a fresh entry was removed");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
