//! Giving memory back to the OS once the process goes idle.
//!
//! A load leaves a server with far more resident memory than live objects:
//! the allocator keeps the pages its threads freed until those same threads
//! allocate again, and an idle server hardly allocates (`docs/memory.md`
//! has the figures). Handing them back takes calls into the allocator that
//! this crate cannot make itself (they are `unsafe` FFI, which it forbids),
//! so the program that chooses the allocator [`install`]s them; the
//! `stategraph` binary installs mimalloc's and glibc's
//! (`crates/alloc`). Without an installed [`Release`] everything here is a
//! no-op.
//!
//! The calls are per thread, so a release is a request that each thread
//! honours at its next idle point:
//! - [`request`] (made by the runs' upkeep once no run executes,
//!   `crate::runs`) marks a new generation, and [`release_process`] runs
//!   the process-wide call;
//! - [`idle_point`] runs the per-thread call once per generation on the
//!   thread that calls it: the runtime's workers as they park
//!   (`on_thread_park`, set by the command line's runtime; an application
//!   that builds its own runtime adds
//!   `.on_thread_park(stategraph::memory::idle_point)`), and the SQLite
//!   store's threads when asked (`crate::store::Maintenance::release_memory`).
//!
//! `idle_point` costs one atomic load when nothing was requested, so it is
//! cheap enough for every park of a busy worker.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The allocator calls that hand free memory back.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    /// Frees what the calling thread's allocator heap keeps.
    pub thread: fn(),
    /// Frees what the process keeps outside any one thread (e.g. the C
    /// heap's arenas, where SQLite allocates).
    pub process: fn(),
}

static RELEASE: OnceLock<Release> = OnceLock::new();

/// Bumped by each [`request`]; 0 means never requested.
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The generation this thread last released for.
    static RELEASED: Cell<u64> = const { Cell::new(0) };
}

/// Sets the allocator calls, once per process (before the runtime starts).
/// Returns false if they were already set.
pub fn install(release: Release) -> bool {
    RELEASE.set(release).is_ok()
}

/// Whether a [`Release`] was installed: with none, [`request`] does nothing.
pub fn installed() -> bool {
    RELEASE.get().is_some()
}

/// Asks every thread to hand back its free memory at its next
/// [`idle_point`] (this one at once). Follow with [`release_process`] once
/// the threads that free much (the store's) have been through theirs.
pub fn request() {
    if RELEASE.get().is_none() {
        return;
    }
    GENERATION.fetch_add(1, Ordering::Relaxed);
    idle_point();
}

/// Frees what the process keeps outside any one thread's heap.
pub fn release_process() {
    if let Some(release) = RELEASE.get() {
        (release.process)();
    }
}

/// Where a thread is about to wait for work: frees its allocator's free
/// memory if a [`request`] came since it last did.
pub fn idle_point() {
    let wanted = GENERATION.load(Ordering::Relaxed);
    if wanted == 0 || RELEASED.with(Cell::get) == wanted {
        return;
    }
    RELEASED.with(|r| r.set(wanted));
    if let Some(release) = RELEASE.get() {
        (release.thread)();
    }
}

/// How many releases were requested (for the `/metrics` counter and tests).
pub fn requests() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    thread_local! {
        static THREAD_RELEASES: Cell<usize> = const { Cell::new(0) };
    }
    static PROCESS_RELEASES: AtomicUsize = AtomicUsize::new(0);

    fn count_thread() {
        THREAD_RELEASES.with(|c| c.set(c.get() + 1));
    }

    fn count_process() {
        PROCESS_RELEASES.fetch_add(1, Ordering::Relaxed);
    }

    /// Each thread releases once per request, at its first idle point after
    /// it; the process-wide call runs only when asked. (Other tests may
    /// request too, so the bounds allow for their generations.)
    #[test]
    fn each_thread_releases_once_per_request() {
        install(Release {
            thread: count_thread,
            process: count_process,
        });
        assert!(installed());
        let before = requests();
        request();
        for _ in 0..5 {
            idle_point();
        }
        let here = THREAD_RELEASES.with(Cell::get);
        let generations = usize::try_from(requests() - before).unwrap_or(usize::MAX);
        assert!(
            (1..=generations).contains(&here),
            "{here} releases on this thread for {generations} request(s)"
        );

        let there = std::thread::spawn(|| {
            for _ in 0..5 {
                idle_point();
            }
            THREAD_RELEASES.with(Cell::get)
        })
        .join()
        .unwrap_or(usize::MAX);
        assert_eq!(there, 1, "a thread that never released does so once");

        let process = PROCESS_RELEASES.load(Ordering::Relaxed);
        release_process();
        assert!(PROCESS_RELEASES.load(Ordering::Relaxed) > process);
    }
}
