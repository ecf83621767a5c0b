//! Command implementations behind the `stategraph` binary, kept in the
//! library so they are testable; the binary only parses arguments.

mod check;
mod graph;
mod run;

pub use check::check;
pub use graph::{GraphFormat, graph};
pub use run::{RunArgs, run};
