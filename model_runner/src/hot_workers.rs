//! A forward's parallel regions with the pool's other workers kept awake between them.
//!
//! At batch 1 a forward is a few hundred parallel regions of 5 to 50 us each (each layer's
//! projections and attention) with short serial stretches between them (norms, RoPE, the
//! activations' quantization). Between two regions rayon's idle workers call `sched_yield` in
//! a loop and after a while go to sleep on a futex, so a region can start with its work
//! waiting for a worker to come back from the kernel. `with_hot_workers` gives every other
//! worker one job for the whole forward: take any pending job of the pool, else spin, until
//! the forward returns. This is the spin-then-work barrier of llama.cpp's and OpenMP's thread
//! teams, kept inside rayon so the forward's code (`par_iter`, `join`) is unchanged.

use std::sync::atomic::{AtomicBool, Ordering};

/// Runs `forward` on a worker of rayon's pool while the pool's other workers run the jobs it
/// spawns as soon as they are pushed; returns what `forward` returns. The workers go back to
/// rayon's idle loop when `forward` returns or unwinds.
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
                while !done.load(Ordering::Acquire) {
                    if rayon::yield_now() != Some(rayon::Yield::Executed) {
                        std::hint::spin_loop();
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
