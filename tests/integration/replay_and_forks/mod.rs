//! Replay and forks: the runs API's history, exact re-execution and forked runs.

mod exact_replay;
mod forks;
mod replay;
