//! What one structured-output spec may cost before it decodes: its size, checked before any
//! work, and the wall-clock time its compile may keep the request waiting. A compile runs on
//! a thread of its own, so a deadline can answer the client while llguidance (which cannot
//! be interrupted) finishes; what it built still enters the grammar cache, so the same spec
//! sent again is answered at once. At most `max_concurrent_compiles` run at a time, so a
//! burst of big schemas cannot take every core from the engine loop.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::spec::StructuredError;

/// Bounds on compiling one spec (`EngineConfig::grammar_limits`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrammarLimits {
    /// Largest spec in bytes, as JSON: a schema, a regex, a grammar, a tool list's grammar.
    pub max_spec_bytes: usize,
    /// Longest a request waits for its grammar, including any wait for a compile slot.
    pub compile_timeout: Duration,
    /// Compiles running at once; 0 is taken as 1.
    pub max_concurrent_compiles: usize,
}

impl GrammarLimits {
    /// Four times the largest schema in JSONSchemaBench (JSON Schema Store's, ~250 KB).
    pub const DEFAULT_MAX_SPEC_BYTES: usize = 1 << 20;
    /// Far above what llguidance needs for any JSONSchemaBench schema (BENCHMARKS.md), far
    /// below an HTTP client's patience.
    pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(10);

    pub(super) fn check_size(&self, kind: &'static str, bytes: usize) -> Result<(), StructuredError> {
        if bytes > self.max_spec_bytes {
            return Err(StructuredError::TooLarge { kind, bytes, limit: self.max_spec_bytes });
        }
        Ok(())
    }
}

impl Default for GrammarLimits {
    /// One compile per two cores: the engine loop keeps the rest.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            max_spec_bytes: Self::DEFAULT_MAX_SPEC_BYTES,
            compile_timeout: Self::DEFAULT_COMPILE_TIMEOUT,
            max_concurrent_compiles: (cores / 2).max(1),
        }
    }
}

/// Counts compiles in flight against `max_concurrent_compiles`.
#[derive(Default)]
pub(super) struct CompileSlots {
    in_flight: Mutex<usize>,
    freed: Condvar,
}

impl CompileSlots {
    /// Waits until fewer than `max` compiles run, or `deadline` passes (`CompilerBusy`).
    pub(super) fn acquire(
        self: &Arc<Self>,
        max: usize,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<CompileSlot, StructuredError> {
        let max = max.max(1);
        let mut in_flight = self.lock();
        while *in_flight >= max {
            let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
                return Err(StructuredError::CompilerBusy { waited_ms: timeout.as_millis() as u64 });
            };
            in_flight = self.freed.wait_timeout(in_flight, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        *in_flight += 1;
        Ok(CompileSlot { slots: self.clone() })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        // The count is a plain integer: a panic elsewhere cannot leave it half-written.
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[cfg(test)]
    pub(super) fn in_flight(&self) -> usize {
        *self.lock()
    }
}

/// One compile's place; given back on drop, whether the compile finished, failed or panicked.
pub(super) struct CompileSlot {
    slots: Arc<CompileSlots>,
}

impl Drop for CompileSlot {
    fn drop(&mut self) {
        *self.slots.lock() -= 1;
        self.slots.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_limit_names_the_size_and_the_limit() {
        let limits = GrammarLimits { max_spec_bytes: 10, ..GrammarLimits::default() };
        assert!(limits.check_size("json_schema", 10).is_ok());
        let err = limits.check_size("json_schema", 11).unwrap_err();
        assert_eq!(err, StructuredError::TooLarge { kind: "json_schema", bytes: 11, limit: 10 });
        assert!(err.is_client_error());
        assert!(err.to_string().contains("11 bytes") && err.to_string().contains("10"), "{err}");
    }

    #[test]
    fn slots_wait_for_a_free_one_and_give_up_at_the_deadline() {
        let slots = Arc::new(CompileSlots::default());
        let timeout = Duration::from_millis(50);
        let first = slots.acquire(1, Instant::now() + timeout, timeout).unwrap();
        assert_eq!(slots.in_flight(), 1);
        let busy = slots.acquire(1, Instant::now() + timeout, timeout).err();
        assert_eq!(busy, Some(StructuredError::CompilerBusy { waited_ms: 50 }));
        std::thread::scope(|s| {
            let waiter = s.spawn(|| slots.acquire(1, Instant::now() + Duration::from_secs(30), timeout).map(drop));
            std::thread::sleep(Duration::from_millis(20));
            drop(first);
            assert!(waiter.join().unwrap().is_ok(), "a freed slot wakes the waiter");
        });
        assert_eq!(slots.in_flight(), 0);
    }
}
