//! `noop`: passes control on without writing anything. Useful for joins,
//! fan-out points and tests.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::{Kind, Node, NodeContext, NodeError};
use crate::graph::spec::Surface;
use crate::state::Patch;

/// The kind.
pub(super) fn kind() -> Kind {
    Kind::new(
        "noop",
        "Passes control on without writing anything (joins, fan-out points).",
        &[],
        Surface::Hidden,
        |_| Some(Arc::new(Noop) as Arc<dyn Node>),
    )
}

/// A node that does nothing.
#[derive(Debug)]
struct Noop;

impl Node for Noop {
    fn run<'a>(&'a self, _cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        Box::pin(async { Ok(Patch::new()) })
    }
}
