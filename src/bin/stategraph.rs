//! The `stategraph` command: the library's command line
//! ([`stategraph::cli`]) with a faster allocator.

/// mimalloc: the runtime allocates many small, short-lived objects (events,
/// tokens, patches); glibc malloc spent a third of a run's CPU on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // After a load, hand the pages mimalloc and glibc (SQLite's heap) keep
    // back to the OS once the server is idle (`stategraph::memory`).
    stategraph::memory::install(stategraph::memory::Release {
        thread: stategraph_alloc::collect_thread,
        process: stategraph_alloc::trim_process,
    });
    stategraph::cli::main()
}
