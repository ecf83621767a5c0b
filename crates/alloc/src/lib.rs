//! Handing an idle process's free memory back to the OS.
//!
//! After a load the `stategraph` server holds far more resident memory than
//! it has live objects (`docs/memory.md`): mimalloc keeps the pages its
//! threads freed until those threads allocate again, and glibc's heap (which
//! SQLite allocates from) keeps freed chunks inside its arenas. An idle
//! server allocates almost nothing, so neither gives the memory back on its
//! own. These two calls do, when `stategraph::memory` asks:
//!
//! - [`collect_thread`] on each thread that allocated (the runtime's
//!   workers as they park, the SQLite threads between jobs);
//! - [`trim_process`] once.
//!
//! They are the only `unsafe` code of the project, kept in this crate
//! because the `stategraph` crate forbids `unsafe` outright. Both are plain
//! C calls that take no pointers and are safe to make from any thread at
//! any time.

/// Frees this thread's empty mimalloc pages and returns them, and
/// abandoned threads' segments, to the OS (`mi_collect(true)`).
///
/// Only meaningful when mimalloc is the global allocator (the `stategraph`
/// binary's); otherwise it only tidies mimalloc's own unused state.
pub fn collect_thread() {
    // SAFETY: `mi_collect` takes no pointers and has no preconditions; it
    // only walks the calling thread's own heap and the abandoned segments,
    // under mimalloc's own synchronization.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}

/// Returns the free memory of the C heap (glibc's `malloc_trim(0)`: the
/// free pages of every arena, not only the top). SQLite's page caches live
/// there. A no-op where the C library is not glibc.
pub fn trim_process() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointers; glibc locks each arena while
    // it trims, so it is safe concurrently with other threads' allocations.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}
