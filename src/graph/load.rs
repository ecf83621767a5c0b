//! Reading graph files into spec types.
//!
//! Anything a developer can put in a file — nothing, not-YAML, the wrong
//! types, unknown tags, 10 MB, deep nesting, odd Unicode — or in place of
//! one (a directory, a FIFO, a symlink to `/dev/zero`) comes back as
//! diagnostics, never a panic or a hang. Limits are enforced before and
//! during reading and parsing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::diagnostic::{Diagnostic, Diagnostics, did_you_mean};
use super::loc::{Loc, Sp};
use super::source::{ReadError, read_capped};
use super::spec::{EdgeSpec, GraphSpec};

/// Largest graph file accepted (1 MiB). Real graphs are a few KB; a file
/// is never read past this (see `read_capped`).
pub const MAX_GRAPH_FILE_BYTES: usize = 1024 * 1024;

/// Deepest YAML nesting accepted.
const MAX_DEPTH: usize = 32;

/// A parsed graph file.
#[derive(Debug)]
pub struct GraphFile {
    /// Graph id: the file stem.
    pub id: String,
    /// Path as given.
    pub path: PathBuf,
    /// Path for diagnostics.
    pub display: Arc<str>,
    /// The file text.
    pub source: String,
    /// The parsed spec.
    pub spec: GraphSpec,
}

/// Reads and parses a graph file.
///
/// # Errors
/// Every problem found while reading or parsing, as diagnostics.
pub(crate) fn load_file(path: &Path) -> Result<GraphFile, Vec<Diagnostic>> {
    let display: Arc<str> = path.display().to_string().into();
    let mut diags = Diagnostics::new(Arc::clone(&display));
    let bytes = match read_capped(path, MAX_GRAPH_FILE_BYTES as u64) {
        Ok(b) => b,
        Err(e) => {
            let (message, hint) = match &e {
                ReadError::NotAFile(what) => (
                    format!(
                        "`{}` is {what}, not a graph file",
                        path.file_name().unwrap_or_default().to_string_lossy()
                    ),
                    Some(
                        "only regular files (or symlinks to them) named `*.yaml`/`*.yml` are \
                         read; rename or move it"
                            .into(),
                    ),
                ),
                ReadError::TooLarge { size, .. } => too_large(*size),
                ReadError::Io(e) => (format!("cannot read graph file: {e}"), None),
            };
            diags.error(Loc::new(1, 1), e.code(), message, hint);
            return Err(diags.into_vec());
        }
    };
    let id = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    parse(path, &id, &bytes)
}

/// Parses graph-file bytes; `id` is the graph id (file stem).
///
/// # Errors
/// Every problem found, as diagnostics.
pub fn parse(path: &Path, id: &str, bytes: &[u8]) -> Result<GraphFile, Vec<Diagnostic>> {
    let display: Arc<str> = path.display().to_string().into();
    let mut diags = Diagnostics::new(Arc::clone(&display));
    if bytes.len() > MAX_GRAPH_FILE_BYTES {
        let (message, hint) = too_large(Some(bytes.len() as u64));
        diags.error(Loc::new(1, 1), "file-too-large", message, hint);
        return Err(diags.into_vec());
    }
    let source = match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(e) => {
            let loc = offset_to_loc(
                &String::from_utf8_lossy(&bytes[..e.valid_up_to()]),
                e.valid_up_to(),
            );
            diags.error(loc, "invalid-utf8", "graph file is not valid UTF-8", None);
            return Err(diags.into_vec());
        }
    };
    if !valid_id(id) {
        diags.error(
            Loc::new(1, 1),
            "invalid-graph-id",
            format!("graph id `{id}` (the file name) must be ASCII letters, digits, `_` or `-`"),
            Some("rename the file, e.g. `my_graph.yaml`".into()),
        );
    }
    if source.trim().is_empty()
        || source
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        diags.error(
            Loc::new(1, 1),
            "empty-file",
            "graph file is empty",
            Some("a graph needs at least `state`, `entry` and `nodes`".into()),
        );
        return Err(diags.into_vec());
    }
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    // YAML 1.2 booleans only: `y`, `no`, `on` are names here (an intent `NO`,
    // a node `y`), not booleans.
    options.strict_booleans = true;
    // A tag the library does not know (`kind: !foo llm`) would otherwise be
    // dropped silently; graph files use none.
    options.reject_unsupported_tags = true;
    if let Some(budget) = options.budget.as_mut() {
        budget.max_depth = MAX_DEPTH;
    }
    let spec: GraphSpec = match serde_saphyr::from_str_with_options(&source, options) {
        Ok(spec) => spec,
        Err(e) => {
            let loc = e
                .location()
                .map(Loc::from)
                .filter(Loc::is_known)
                .unwrap_or(Loc::new(1, 1));
            if let serde_saphyr::Error::UnsupportedTag { tag, .. } = &e {
                diags.error(
                    tag_loc(&source, loc, tag),
                    "unknown-tag",
                    format!("unknown YAML tag `{tag}`"),
                    Some(
                        "graph files use no YAML tags: remove it, or quote the value if it \
                         starts with `!`"
                            .into(),
                    ),
                );
            } else {
                let (message, hint) = describe_yaml_error(&e);
                diags.error(loc, "yaml", message, hint);
            }
            return Err(diags.into_vec());
        }
    };
    let mut file = GraphFile {
        id: id.to_owned(),
        path: path.to_owned(),
        display,
        source,
        spec,
    };
    place_short_edges(&mut file);
    if diags.has_errors() {
        Err(diags.into_vec())
    } else {
        Ok(file)
    }
}

fn too_large(size: Option<u64>) -> (String, Option<String>) {
    (
        format!(
            "graph file {}",
            super::source::too_large(size, MAX_GRAPH_FILE_BYTES as u64)
        ),
        Some("split it into subgraphs (`kind: subgraph`)".into()),
    )
}

/// Node and graph ids: ASCII identifiers (they become Mermaid ids, metric
/// labels and URL segments).
pub(crate) fn valid_id(id: &str) -> bool {
    let mut chars = id.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && id.len() <= 64
}

fn describe_yaml_error(e: &serde_saphyr::Error) -> (String, Option<String>) {
    let text = e.to_string();
    // The library appends its own location; ours is in the diagnostic.
    let message = text
        .split(" at line ")
        .next()
        .unwrap_or(&text)
        .trim()
        .to_owned();
    let mut message = message.lines().next().unwrap_or_default().to_owned();
    if let Some(i) = message.find(", set DuplicateKeyPolicy") {
        message.truncate(i);
    }
    // `invalid u32`: an integer setting holding something else.
    let integer = |ty: &str| {
        ty.strip_prefix(['u', 'i']).is_some_and(|bits| {
            bits == "size" || !bits.is_empty() && bits.bytes().all(|b| b.is_ascii_digit())
        })
    };
    if message.strip_prefix("invalid ").is_some_and(integer) {
        message = format!("{message}: expected a whole number");
    }
    // The budget's `Depth { depth: 33 }`, or the scanner's own limit on
    // very deep flow nesting, which it reaches before the budget does.
    if message.starts_with("budget breached: Depth") || message == "recursion limit exceeded" {
        message = format!("nesting is deeper than {MAX_DEPTH} levels");
    }
    if message == "expected mapping start" {
        message = "expected a mapping (`key: value` lines) here".into();
    }
    // `unknown field `promt`, expected one of id, kind, …`: when a name is
    // close, say which instead of listing them all.
    let suggestion = ["unknown field `", "unknown variant `"]
        .into_iter()
        .find_map(|prefix| {
            let (name, expected) = message
                .strip_prefix(prefix)?
                .split_once("`, expected one of ")?;
            let hint = did_you_mean(name, expected.split(", ").map(|e| e.trim_matches('`')))?;
            Some((format!("{prefix}{name}`"), hint))
        });
    if let Some((short, hint)) = suggestion {
        return (short, Some(hint));
    }
    let hint = if message.contains("unknown field") {
        Some("see docs/graph-files.md for the settings a graph, node or edge accepts".into())
    } else if message.contains("missing field") {
        Some("add the field; see docs/graph-files.md".into())
    } else if message.contains("depth") || message.contains("nesting") {
        Some("graph files never need deep nesting; flatten the structure".into())
    } else {
        None
    };
    (message, hint)
}

/// Gives `a -> b` edge names their real locations. The parser records the
/// names' offsets within the scalar; the scalar's own location is on the
/// enclosing `Sp`, and a quoted scalar starts one column later.
fn place_short_edges(file: &mut GraphFile) {
    let lines = yaml_lines(&file.source);
    for edge in &mut file.spec.edges {
        let Sp {
            value: EdgeSpec::Short { from, to },
            loc,
        } = edge
        else {
            continue;
        };
        let quoted = lines
            .get((loc.line as usize).saturating_sub(1))
            .and_then(|l| l.chars().nth((loc.column as usize).saturating_sub(1)))
            .is_some_and(|c| c == '"' || c == '\'');
        let base = loc.column + u32::from(quoted);
        from.loc = Loc::new(loc.line, base + from.loc.column);
        to.loc = Loc::new(loc.line, base + to.loc.column);
    }
}

/// Where `tag` is written: the parser places the error at the tagged node,
/// and the tag is the text right before it (whitespace apart). Anything
/// else in between, and the node's place stands.
fn tag_loc(source: &str, node: Loc, tag: &str) -> Loc {
    let lines = yaml_lines(source);
    let Some(line) = lines.get((node.line as usize).saturating_sub(1)) else {
        return node;
    };
    let column = (node.column as usize).saturating_sub(1);
    let before: String = line.chars().take(column).collect();
    match before.trim_end().strip_suffix(tag) {
        Some(rest) => Loc::new(node.line, rest.chars().count() as u32 + 1),
        None => node,
    }
}

fn offset_to_loc(prefix: &str, _offset: usize) -> Loc {
    let lines = yaml_lines(prefix);
    let column = lines.last().map_or(0, |l| l.chars().count()) as u32 + 1;
    Loc::new(lines.len() as u32, column)
}

/// The lines of `text` as the YAML parser (and editors) count them: broken
/// at `\n`, `\r\n` or a lone `\r`, so locations agree with the parser's.
fn yaml_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(['\n', '\r']) {
        out.push(&rest[..i]);
        let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[i + skip..];
    }
    out.push(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errs(src: &[u8]) -> Vec<String> {
        match parse(Path::new("g.yaml"), "g", src) {
            Ok(_) => vec![],
            Err(d) => d.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn bad_files_become_diagnostics() {
        assert!(errs(b"").join("").contains("g.yaml:1:1: error[empty-file]"));
        assert!(errs(b"# only a comment\n").join("").contains("empty-file"));
        let e = errs(b"state: chat\nentry: a\nnodes: [\n");
        assert!(
            e[0].starts_with("g.yaml:") && e[0].contains("error[yaml]"),
            "{e:?}"
        );
        let e = errs(b"state: chat\nentry: a\nnodes:\n  - id: a\n    kind: noop\n    retry: {attempts: many}\n");
        assert!(e[0].starts_with("g.yaml:6:"), "{e:?}");
        // A misspelt `kind` is reported by compilation, at the misspelt key.
        let f = parse(
            Path::new("g.yaml"),
            "g",
            b"state: chat\nentry: a\nnodes:\n  - id: a\n    knd: noop\n",
        )
        .unwrap();
        assert_eq!(f.spec.nodes[0].value.kind.value, "");
        assert_eq!(f.spec.nodes[0].value.kind.loc, Loc::new(5, 5));
        let e = errs(b"state: chat\n\xff\xfe: x\n");
        assert!(e[0].starts_with("g.yaml:2:1: error[invalid-utf8]"), "{e:?}");
        let big = vec![b'#'; 10 * 1024 * 1024];
        assert!(errs(&big)[0].contains("file-too-large"));
        let deep = format!(
            "state: chat\nentry: a\nnodes:\n  - id: a\n    kind: noop\n    params: {}1{}\n",
            "[".repeat(5000),
            "]".repeat(5000)
        );
        assert!(errs(deep.as_bytes())[0].contains("error[yaml]"));
        let e = errs(b"state: chat\nstate: x\n");
        assert_eq!(e, ["g.yaml:2:1: error[yaml]: duplicate mapping key: state"]);
    }

    #[test]
    fn unknown_tags_are_errors_at_the_tag() {
        let base = "state: chat\nentry: a\nnodes:\n  - id: a\n";
        let e = errs(format!("{base}    kind: !foo noop\n").as_bytes());
        assert_eq!(
            e,
            [
                "g.yaml:5:11: error[unknown-tag]: unknown YAML tag `!foo`\n  hint: graph files \
              use no YAML tags: remove it, or quote the value if it starts with `!`"
            ]
        );
        // On a key, a flow sequence, a global tag; a tag on the line before
        // its node is reported at the node.
        for (src, place) in [
            ("    !foo kind: noop\n", "g.yaml:5:5:"),
            ("    kind: noop\nedges: !x [a -> END]\n", "g.yaml:6:8:"),
            ("    kind: !<tag:example.com,1:x> noop\n", "g.yaml:5:"),
            ("    kind: !foo\n      noop\n", "g.yaml:6:7:"),
        ] {
            let e = errs(format!("{base}{src}").as_bytes());
            assert!(
                e.len() == 1 && e[0].starts_with(place) && e[0].contains("error[unknown-tag]"),
                "{src}: {e:?}"
            );
        }
        // Not tags: quoted, in a comment, or YAML's own string tag.
        for src in [
            "    kind: noop\n    description: \"!foo\"\n",
            "    kind: noop # !foo\n",
            "    kind: !!str noop\n",
        ] {
            let f = parse(Path::new("g.yaml"), "g", format!("{base}{src}").as_bytes());
            assert!(f.is_ok(), "{src}: {:?}", f.err());
        }
    }

    #[test]
    fn short_edges_point_at_each_name() {
        let src = "state: chat\nentry: a\nnodes: []\nedges:\n  - a ->  bee\n  - \"a -> END\"\n";
        let f = parse(Path::new("g.yaml"), "g", src.as_bytes()).unwrap();
        let EdgeSpec::Short { from, to } = &f.spec.edges[0].value else {
            panic!()
        };
        assert_eq!((from.loc, to.loc), (Loc::new(5, 5), Loc::new(5, 11)));
        let EdgeSpec::Short { to, .. } = &f.spec.edges[1].value else {
            panic!()
        };
        assert_eq!(to.loc, Loc::new(6, 11));
    }
}
