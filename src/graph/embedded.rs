//! The shipped graphs and prompts, built into the binary, so `stategraph
//! serve` works from any directory. A `graphs/` directory, when present,
//! takes precedence.

use std::path::Path;

use super::catalog::{Catalog, Registries};
use super::prompts::Prompts;

/// (graph id, file text).
const GRAPHS: &[(&str, &str)] = &[
    ("chat", include_str!("../../graphs/chat.yaml")),
    ("analyst", include_str!("../../graphs/analyst.yaml")),
    ("research", include_str!("../../graphs/research.yaml")),
    ("assistant", include_str!("../../graphs/assistant.yaml")),
];

/// (prompt path, template text).
const PROMPTS: &[(&str, &str)] = &[
    (
        "chat/summarizer.md",
        include_str!("../../prompts/chat/summarizer.md"),
    ),
    (
        "chat/router.md",
        include_str!("../../prompts/chat/router.md"),
    ),
    (
        "chat/quick_answer.md",
        include_str!("../../prompts/chat/quick_answer.md"),
    ),
    (
        "chat/research.md",
        include_str!("../../prompts/chat/research.md"),
    ),
    (
        "chat/explain.md",
        include_str!("../../prompts/chat/explain.md"),
    ),
    (
        "chat/narrator.md",
        include_str!("../../prompts/chat/narrator.md"),
    ),
    (
        "chat/followup.md",
        include_str!("../../prompts/chat/followup.md"),
    ),
    (
        "chat/clarifier.md",
        include_str!("../../prompts/chat/clarifier.md"),
    ),
    (
        "chat/suggester.md",
        include_str!("../../prompts/chat/suggester.md"),
    ),
    (
        "chat/direct.md",
        include_str!("../../prompts/chat/direct.md"),
    ),
    (
        "analyst/analyst.md",
        include_str!("../../prompts/analyst/analyst.md"),
    ),
    (
        "research/plan.md",
        include_str!("../../prompts/research/plan.md"),
    ),
    (
        "research/reflect.md",
        include_str!("../../prompts/research/reflect.md"),
    ),
    (
        "research/synthesize.md",
        include_str!("../../prompts/research/synthesize.md"),
    ),
    (
        "research/related.md",
        include_str!("../../prompts/research/related.md"),
    ),
    (
        "assistant/assistant.md",
        include_str!("../../prompts/assistant/assistant.md"),
    ),
];

/// The embedded catalog.
pub fn catalog(registries: &Registries) -> Catalog {
    let prompts = Prompts::from_sources(Path::new("(embedded)/prompts"), PROMPTS.iter().copied());
    Catalog::from_sources(GRAPHS, prompts, registries)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_copies_compile_and_match_the_files() {
        let cat = super::catalog(&super::Registries::default());
        assert!(!cat.has_errors(), "{:?}", cat.diagnostics);
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let files = Catalog::load(
            &root.join("graphs"),
            &root.join("prompts"),
            &super::Registries::default(),
        );
        assert_eq!(
            cat.get("chat").map(|g| g.version.clone()),
            files.get("chat").map(|g| g.version.clone())
        );
        // Every shipped file is embedded, with the same text.
        for (name, text) in super::PROMPTS {
            assert_eq!(
                std::fs::read_to_string(root.join("prompts").join(name))
                    .ok()
                    .as_deref(),
                Some(*text),
                "{name}"
            );
        }
        let shipped: Vec<String> = std::fs::read_dir(root.join("graphs"))
            .unwrap()
            .flatten()
            .filter_map(|e| {
                e.path()
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
            })
            .collect();
        for id in shipped {
            assert!(
                super::GRAPHS.iter().any(|(g, _)| *g == id),
                "graphs/{id}.yaml is not embedded"
            );
        }
        let files = files.prompts.names().count();
        assert_eq!(files, super::PROMPTS.len(), "every prompt file is embedded");
    }
    use super::Catalog;
}
