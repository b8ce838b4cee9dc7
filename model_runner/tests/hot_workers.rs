//! `with_hot_workers`: the forward's value comes back, its parallel work runs on every worker
//! (the spinning workers take jobs rather than only spin), a panic reaches the caller without
//! leaving a worker spinning, and a one-thread pool runs it too. Each case runs under a
//! watchdog, so a worker left spinning fails the test instead of hanging it.

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Duration;

use entrobatch_model_runner::hot_workers::with_hot_workers;
use rayon::prelude::*;

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a rayon pool")
}

/// Runs `case` on its own thread and fails if it has not returned within a minute.
fn within_a_minute<R: Send + 'static>(case: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(case());
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("with_hot_workers did not return: a worker is still spinning")
}

/// The thread indices that ran 64 small jobs of a parallel region inside the forward.
fn workers_of_a_region() -> HashSet<usize> {
    (0..64)
        .into_par_iter()
        .map(|i| {
            std::thread::sleep(Duration::from_micros(200));
            (i, rayon::current_thread_index())
        })
        .filter_map(|(_, t)| t)
        .collect()
}

#[test]
fn regions_inside_the_forward_run_on_every_worker() {
    for threads in [2, 3] {
        let (value, used) = within_a_minute(move || {
            pool(threads)
                .install(|| with_hot_workers(|| (41 + 1, (0..5).map(|_| workers_of_a_region()).collect::<Vec<_>>())))
        });
        assert_eq!(value, 42);
        // Each of five regions in turn: the forward's own worker and the kept-awake ones.
        for (region, workers) in used.iter().enumerate() {
            assert_eq!(workers.len(), threads, "region {region} ran on workers {workers:?} of {threads}");
        }
    }
}

#[test]
fn a_panicking_forward_releases_the_workers_and_reaches_the_caller() {
    let (first, after) = within_a_minute(|| {
        let pool = pool(2);
        let first = pool.install(|| {
            catch_unwind(AssertUnwindSafe(|| {
                with_hot_workers(|| {
                    let _ = workers_of_a_region();
                    panic!("forward failed")
                })
            }))
        });
        // The pool still runs forwards on both workers afterwards.
        let after = pool.install(|| with_hot_workers(workers_of_a_region));
        (first.is_err(), after.len())
    });
    assert!(first, "the forward's panic did not reach the caller");
    assert_eq!(after, 2);
}

#[test]
fn a_one_thread_pool_runs_the_forward() {
    let used = within_a_minute(|| pool(1).install(|| with_hot_workers(workers_of_a_region)));
    assert_eq!(used.len(), 1);
}

#[test]
fn called_from_outside_any_pool_it_runs_on_the_global_pool() {
    let value = within_a_minute(|| with_hot_workers(|| (0..1000u64).into_par_iter().sum::<u64>()));
    assert_eq!(value, 499_500);
}

/// Two engines in one process share rayon's global pool: forwards from two threads at once,
/// each with parallel regions, all complete (a worker spinning for one forward on top of a job
/// the same forward waits for gives up after its idle limit rather than hang).
#[test]
fn concurrent_forwards_on_one_pool_complete() {
    let sums = within_a_minute(|| {
        let pool = std::sync::Arc::new(pool(2));
        let callers: Vec<_> = (0..3u64)
            .map(|c| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    (0..3000u64)
                        .map(|i| {
                            pool.install(|| {
                                with_hot_workers(|| (0..64u64).into_par_iter().map(|j| j * (c + i)).sum::<u64>())
                            })
                        })
                        .sum::<u64>()
                })
            })
            .collect();
        callers.into_iter().map(|t| t.join().expect("a caller thread")).collect::<Vec<u64>>()
    });
    let expected = |c: u64| (0..3000u64).map(|i| 2016 * (c + i)).sum::<u64>();
    assert_eq!(sums, (0..3).map(expected).collect::<Vec<_>>());
}
