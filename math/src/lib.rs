//! Elementwise math shared by the model runner's kernels and the sampler, so that both compute
//! a softmax weight with the same arithmetic and neither depends on the other.

mod exp;

pub use exp::{exp_nonpositive, EXP_MIN_ARG, EXP_POLY, LN2_HI, LN2_LO, LOG2E};
