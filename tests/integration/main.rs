//! Integration tests: one binary, one directory per capability, and the
//! fixtures they share in `support` (databases, servers, scripted models,
//! the browser). docs/testing.md ("The repository's own tests") has the map.

#![allow(
    missing_docs,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

/// Graph files: checked, refused, executed.
mod graph_files;

/// Models and tools.
mod models_and_tools;

/// The AI SDK UI stream.
mod ai_sdk_stream;

/// The server and its API.
mod server_api;

/// The store and surviving failures.
mod store_and_failures;

/// Human in the loop.
mod human_in_the_loop;

/// Replay and forks.
mod replay_and_forks;

/// Graph tests and eval.
mod graph_testing;

/// The studio.
mod studio_ui;

/// The shipped apps end to end.
mod shipped_apps;

/// What the tests share.
mod support;
