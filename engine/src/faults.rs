//! A test-only way to make the model misbehave (feature `faults`, never in a release build).
//!
//! The engine loop must survive a failing or panicking forward and must never turn
//! non-finite logits into tokens (`logits_check.rs`); `FaultInjection` lets tests
//! (tests/faults.rs) trigger each failure on demand, since a healthy model never produces them.

use entrobatch_model_runner::{ForwardOutput, ModelError};

use crate::event::RequestId;

/// Faults the engine loop injects into its own steps. All off by default; only tests set it.
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct FaultInjection {
    /// The forward with this index (0-based, counting every forward the loop runs) returns
    /// an error instead of running.
    pub fail_forward: Option<u64>,
    /// The forward with this index panics instead of running.
    pub panic_forward: Option<u64>,
    /// Every logits row of this request is overwritten with NaN after the forward.
    pub nan_logits_request: Option<RequestId>,
    /// Like `nan_logits_request`, with +infinity in one entry of each row.
    pub inf_logits_request: Option<RequestId>,
    /// Every forward takes at least this long: keeps a request in flight for as long as a
    /// test needs (draining at shutdown), whatever the machine's speed.
    pub slow_forward: Option<std::time::Duration>,
}

impl FaultInjection {
    pub fn is_active(&self) -> bool {
        self.fail_forward.is_some()
            || self.panic_forward.is_some()
            || self.nan_logits_request.is_some()
            || self.inf_logits_request.is_some()
            || self.slow_forward.is_some()
    }

    /// Called in place of the forward's start; `forward` is the forward's index.
    pub(crate) fn before_forward(&self, forward: u64) -> Result<(), ModelError> {
        if self.panic_forward == Some(forward) {
            panic!("injected panic in forward {forward}");
        }
        if self.fail_forward == Some(forward) {
            return Err(ModelError::InvalidBatch(format!("injected failure in forward {forward}")));
        }
        if let Some(delay) = self.slow_forward {
            std::thread::sleep(delay);
        }
        Ok(())
    }

    /// Poisons the logits rows (`indices` into `output`) of request `id` if it is targeted.
    pub(crate) fn after_forward(&self, id: RequestId, indices: &[usize], output: &mut ForwardOutput) {
        let vocab = output.vocab_size;
        for &i in indices {
            let Some(row) = output.logits.get_mut(i * vocab..(i + 1) * vocab) else { continue };
            if self.nan_logits_request == Some(id) {
                row.fill(f32::NAN);
            }
            if self.inf_logits_request == Some(id) {
                if let Some(first) = row.first_mut() {
                    *first = f32::INFINITY;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injection_targets_only_its_forward_and_request() {
        let faults = FaultInjection { fail_forward: Some(2), nan_logits_request: Some(7), ..Default::default() };
        assert!(faults.before_forward(1).is_ok());
        assert!(faults.before_forward(2).is_err());
        let mut out = ForwardOutput { logits: vec![1.0; 6], vocab_size: 3, attn_metrics: Vec::new() };
        faults.after_forward(6, &[0, 1], &mut out);
        assert!(out.logits.iter().all(|v| v.is_finite()));
        faults.after_forward(7, &[1], &mut out);
        assert!(out.logits[..3].iter().all(|v| v.is_finite()));
        assert!(out.logits[3..].iter().all(|v| v.is_nan()));
    }
}
