//! A forward's parallel regions with the pool's other workers kept awake between them.
//!
//! At batch 1 a forward is a few hundred short parallel regions (each layer's projections and
//! attention; docs/benchmarks/notebook.md, "2026-11-26 11:48-12:35 UTC") with short serial
//! stretches between them (norms, RoPE, the activations' quantization). Between two regions
//! rayon's idle workers call `sched_yield` in a loop and after a while go to sleep on a futex,
//! so a region can start with its work waiting for a worker to come back from the kernel.
//! `with_hot_workers` gives every other worker one job for the whole forward: take any pending
//! job of the pool, else spin, until the forward returns. This is the spin-then-work barrier of
//! llama.cpp's and OpenMP's thread teams, kept inside rayon so the forward's code (`par_iter`,
//! `join`) is unchanged.
//!
//! A worker gives up spinning after `IDLE_LIMIT` without work. Besides bounding what a long
//! serial stretch burns, this bounds a wait that would otherwise never end: a worker that
//! steals one of the forward's jobs just before it sees its spinning job (or a job of another
//! engine's forward on the same pool) and then waits inside that job runs the spinning job
//! there (rayon runs any pending job while it waits), on top of the very job the forward
//! needs finished.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a kept-awake worker spins without finding work before it returns to rayon's idle
/// loop: far above the serial stretches between a decode forward's regions (microseconds).
const IDLE_LIMIT: Duration = Duration::from_millis(1);

/// Runs `forward` on a worker of rayon's pool while the pool's other workers run the jobs it
/// spawns as soon as they are pushed; returns what `forward` returns. The workers go back to
/// rayon's idle loop when `forward` returns or unwinds, or after `IDLE_LIMIT` without work.
pub fn with_hot_workers<R: Send>(forward: impl FnOnce() -> R + Send) -> R {
    let done = AtomicBool::new(false);
    let done = &done;
    rayon::scope(|scope| {
        if rayon::current_num_threads() > 1 {
            let home = rayon::current_thread_index();
            // Every worker gets this job; the one running `forward` finds it only while it
            // waits inside a region, and must not spin there: it would wait on itself.
            scope.spawn_broadcast(move |_, worker| {
                if Some(worker.index()) == home {
                    return;
                }
                let mut idle_since = Instant::now();
                let mut idle_tries = 0u32;
                while !done.load(Ordering::Acquire) {
                    if rayon::yield_now() == Some(rayon::Yield::Executed) {
                        idle_tries = 0;
                        continue;
                    }
                    std::hint::spin_loop();
                    // The clock only every 64 idle tries; the first of a run starts it.
                    idle_tries += 1;
                    if idle_tries == 1 {
                        idle_since = Instant::now();
                    } else if idle_tries.is_multiple_of(64) && idle_since.elapsed() > IDLE_LIMIT {
                        return;
                    }
                }
            });
        }
        // Set on unwinding too: the scope waits for the spinning workers before it rethrows
        // a panic of `forward`.
        let _release = Release(done);
        forward()
    })
}

/// Tells the spinning workers the forward is over when dropped.
struct Release<'a>(&'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}
