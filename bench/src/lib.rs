//! Throughput measurement shared by `benches/throughput.rs` and `entrobatch bench throughput`.

pub mod baseline;
pub mod branch_mix;
pub mod machine_limits;
pub mod phase_spans;
pub mod prefix_cache;
pub mod strategy_compare;
pub mod structured;
pub mod throughput;
