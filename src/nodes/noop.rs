//! `noop`: passes control on, optionally writing constants (`set`).
//! Useful for joins, fan-out points and tests.

use super::BuildCx;
use crate::state::Patch;

/// A node that writes fixed values.
#[derive(Debug)]
pub struct Noop {
    patch: Patch,
}

impl Noop {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        cx.accept(&["set"]);
        let mut patch = Patch::new();
        let mut ok = true;
        if let Some(set) = &cx.node.set {
            for (name, value) in &set.value {
                let sp = crate::graph::loc::Sp::new(name.clone(), set.loc);
                match cx.field(&sp, "a field", |_| true) {
                    Some(id) => {
                        cx.writes.push(id);
                        patch.insert(name.as_str(), value.clone());
                    }
                    None => ok = false,
                }
            }
        }
        ok.then_some(Self { patch })
    }

    pub(super) fn run(&self) -> Patch {
        self.patch.clone()
    }
}
