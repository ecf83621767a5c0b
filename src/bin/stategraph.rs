//! The `stategraph` command: the library's command line
//! ([`stategraph::cli`]) with a faster allocator.

/// mimalloc: the runtime allocates many small, short-lived objects (events,
/// tokens, patches); glibc malloc spent a third of a run's CPU on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    stategraph::cli::main()
}
