//! `entrobatch eval`: does an entropy-aware decoding strategy make answers better, and at
//! what cost? Each strategy decodes a task's items as one batched engine job; the answers
//! are graded (HumanEval by executing the tests, GSM-Symbolic by the final number, MMLU by
//! the letter) and summarised with a bootstrap interval, throughput and the strategy's own
//! statistics.

pub mod bootstrap;
pub mod checkpoint;
pub mod grading;
pub mod paired;
pub mod perplexity;
pub mod plot;
pub mod report;
pub mod runner;
pub mod sandbox;
pub mod stats;
pub mod strategy_spec;
pub mod tasks;

pub use report::{EvalReport, StrategyResult};
pub use runner::{compare_with_first, run_strategy, RunOptions};
pub use strategy_spec::{parse_strategies, StrategySpec};
pub use tasks::{load_task, EvalItem, Grade, LoadOptions, Task, TaskKind};
