//! Graph tests and eval: `stategraph test` cases, cases recorded from runs, eval and verdicts.

mod graph_eval;
mod graph_recorded;
mod graph_tests;
mod graph_verdicts;
