//! The `stategraph` command: the library's command line
//! ([`stategraph::cli`]) with a faster allocator and the shipped graphs and
//! prompts built in.

/// mimalloc: the runtime allocates many small, short-lived objects (events,
/// tokens, patches); glibc malloc spent a third of a run's CPU on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The shipped `graphs/` and `prompts/`, built in so `stategraph serve`
/// works from any directory (a `graphs/` directory, when present, takes
/// precedence). The build script lists the files; the library embeds none.
mod built_in {
    include!(concat!(env!("OUT_DIR"), "/embedded_files.rs"));

    /// The shipped files.
    pub(super) static BUNDLE: stategraph::Bundle = stategraph::Bundle {
        graphs: GRAPHS,
        prompts: PROMPTS,
    };
}

fn main() -> std::process::ExitCode {
    // After a load, hand the pages mimalloc and glibc (SQLite's heap) keep
    // back to the OS once the server is idle (`stategraph::memory`).
    stategraph::memory::install(stategraph::memory::Release {
        thread: stategraph_alloc::collect_thread,
        process: stategraph_alloc::trim_process,
    });
    stategraph::cli::App::new(stategraph::Registries::default())
        .built_in(&built_in::BUNDLE)
        .main()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use stategraph::Registries;

    /// The built-in copies compile and are the files' current versions.
    #[test]
    fn the_built_in_copies_compile_and_match_the_files() {
        let reg = Registries::default();
        let cat = reg.bundled(&super::built_in::BUNDLE);
        assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let files = reg.load(&root.join("graphs"), &root.join("prompts"));
        assert!(!files.graphs.is_empty());
        for (id, g) in &files.graphs {
            assert_eq!(cat.get(id).map(|e| &e.version), Some(&g.version), "{id}");
        }
        assert_eq!(cat.graphs.len(), files.graphs.len());
    }
}
