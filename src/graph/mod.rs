//! Graph files: spec → validate → compile.
pub mod diagnostic;
pub mod load;
pub mod loc;
pub mod spec;
