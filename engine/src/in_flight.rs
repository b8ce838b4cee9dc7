//! The in-flight bound as a value: a request holds an `InFlightPermit` from `submit` until
//! its `Finished` event, and its slot in `EngineMetrics::in_flight` is freed when the permit
//! drops. Every way a request ends (finished, aborted, refused by the scheduler, never
//! admitted, lost in a command the loop never read) therefore frees it exactly once.

use std::sync::Arc;

use crate::metrics::EngineMetrics;

/// One request's slot in `EngineMetrics::in_flight`; dropping it frees the slot.
pub(crate) struct InFlightPermit {
    metrics: Arc<EngineMetrics>,
}

impl InFlightPermit {
    /// Takes `count` slots at once, or none if that would pass `limit`: a batch is accepted
    /// whole or not at all.
    pub(crate) fn acquire_many(metrics: &Arc<EngineMetrics>, count: usize, limit: u64) -> Option<Vec<Self>> {
        if !metrics.try_reserve_in_flight(count as u64, limit) {
            return None;
        }
        Some((0..count).map(|_| Self { metrics: metrics.clone() }).collect())
    }
}

impl Drop for InFlightPermit {
    fn drop(&mut self) {
        self.metrics.release_in_flight();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn a_batch_takes_all_its_slots_or_none_and_each_permit_frees_one() {
        let metrics = Arc::new(EngineMetrics::default());
        let in_flight = || metrics.in_flight.load(Ordering::SeqCst);
        let mut first = InFlightPermit::acquire_many(&metrics, 2, 3).expect("2 of 3 slots");
        assert_eq!(in_flight(), 2);
        assert!(InFlightPermit::acquire_many(&metrics, 2, 3).is_none(), "4 would pass the bound");
        assert_eq!(in_flight(), 2, "a refused batch takes nothing");
        drop(first.pop());
        assert_eq!(in_flight(), 1);
        let second = InFlightPermit::acquire_many(&metrics, 2, 3).expect("room again");
        assert_eq!(in_flight(), 3);
        drop(second);
        drop(first);
        assert_eq!(in_flight(), 0);
    }
}
