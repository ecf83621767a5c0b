//! Prompt templates (minijinja) under the prompts directory.
//!
//! All templates are parsed when the catalog loads, so a syntax error is a
//! diagnostic at the template's line, and the variables each template uses
//! are known before any run: the validator checks them against the state
//! type, and a node renders a template with just those fields.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use minijinja::{AutoEscape, Environment};
use xxhash_rust::xxh3::Xxh3;

use super::diagnostic::{Diagnostic, Severity};
use super::source::{ReadError, read_capped};

/// Template files are recognised by these extensions.
const EXTENSIONS: &[&str] = &["md", "txt", "j2", "jinja", "tmpl", "prompt"];

/// Names minijinja provides itself; not state variables.
pub(crate) const BUILTIN_GLOBALS: &[&str] = &[
    "range",
    "dict",
    "namespace",
    "debug",
    "cycler",
    "joiner",
    "lipsum",
    "loop",
];

/// Largest prompt file accepted (256 KiB); a file is never read past this
/// (see `read_capped`).
pub const MAX_PROMPT_BYTES: u64 = 256 * 1024;

/// Why a template file could not be read, as its diagnostic will say.
#[derive(Debug)]
struct Unreadable {
    code: &'static str,
    message: String,
    hint: Option<String>,
}

/// One template file.
#[derive(Debug)]
pub struct PromptFile {
    /// Path for diagnostics.
    pub display: Arc<str>,
    /// The template text.
    pub source: String,
    /// Top-level variables the template reads.
    pub variables: BTreeSet<String>,
    /// Why it could not be loaded, if it could not.
    pub error: Option<Diagnostic>,
}

/// All prompt templates of a catalog, by path relative to the prompts
/// directory (`chat/router.md`).
pub struct Prompts {
    dir: PathBuf,
    env: Environment<'static>,
    files: BTreeMap<String, PromptFile>,
}

impl std::fmt::Debug for Prompts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompts")
            .field("dir", &self.dir)
            .field("files", &self.files.keys())
            .finish()
    }
}

pub(crate) fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::None);
    // No silent failures: printing or iterating something that is not
    // there (`item.content` when the item has `snippet`) fails the node;
    // `{% if x.y %}` and `x.y | default('')` ask for it explicitly.
    env.set_undefined_behavior(minijinja::UndefinedBehavior::SemiStrict);
    super::expr::add_filters(&mut env);
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
    {
        env.set_syntax(syntax);
    }
    env
}

impl Prompts {
    /// Loads every template under `dir` (recursively). A missing directory
    /// yields an empty set: graphs that name prompts then fail validation.
    /// A template that is not a regular file (a FIFO, a device), is over
    /// [`MAX_PROMPT_BYTES`] or is not UTF-8 is not read further; a graph
    /// that uses it gets that as its diagnostic.
    pub fn load(dir: &Path) -> Self {
        let mut found = Vec::new();
        collect(dir, dir, &mut found, 0);
        let mut sources = Vec::new();
        for (name, path) in found {
            let display: Arc<str> = path.display().to_string().into();
            let text = match read_capped(&path, MAX_PROMPT_BYTES) {
                Ok(bytes) => String::from_utf8(bytes).map_err(|_| Unreadable {
                    code: "invalid-utf8",
                    message: "prompt file is not valid UTF-8".into(),
                    hint: None,
                }),
                Err(e) => Err(Unreadable {
                    code: e.code(),
                    hint: match &e {
                        ReadError::NotAFile(_) => Some(
                            "only regular files (or symlinks to them) are read as prompts".into(),
                        ),
                        ReadError::TooLarge { .. } => {
                            Some("shorten it; a prompt is sent whole with every call".into())
                        }
                        ReadError::Io(_) => None,
                    },
                    message: match e {
                        ReadError::Io(e) => format!("cannot read prompt file: {e}"),
                        e => format!("prompt file {e}"),
                    },
                }),
            };
            sources.push((name, display, text));
        }
        Self::build(dir, sources)
    }

    /// Builds from in-memory templates (tests, embedded defaults).
    pub fn from_sources<'a>(
        dir: &Path,
        sources: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        let sources = sources
            .into_iter()
            .map(|(n, s)| {
                (
                    n.to_owned(),
                    Arc::from(dir.join(n).display().to_string()),
                    Ok(s.to_owned()),
                )
            })
            .collect();
        Self::build(dir, sources)
    }

    fn build(dir: &Path, sources: Vec<(String, Arc<str>, Result<String, Unreadable>)>) -> Self {
        let mut env = environment();
        let mut files = BTreeMap::new();
        for (name, display, text) in sources {
            let diag = |line: u32, code: &'static str, message: String, hint| Diagnostic {
                severity: Severity::Error,
                file: Arc::clone(&display),
                line: line.max(1),
                column: 1,
                code,
                message,
                hint,
            };
            let file = match text {
                Err(Unreadable {
                    code,
                    message,
                    hint,
                }) => PromptFile {
                    display: Arc::clone(&display),
                    source: String::new(),
                    variables: BTreeSet::new(),
                    error: Some(diag(1, code, message, hint)),
                },
                Ok(source) => match env.add_template_owned(name.clone(), source.clone()) {
                    Ok(()) => {
                        let variables = env
                            .get_template(&name)
                            .map(|t| t.undeclared_variables(false))
                            .unwrap_or_default()
                            .into_iter()
                            .filter(|v| !BUILTIN_GLOBALS.contains(&v.as_str()))
                            .collect();
                        PromptFile {
                            display: Arc::clone(&display),
                            source,
                            variables,
                            error: None,
                        }
                    }
                    Err(e) => {
                        let line = e.line().unwrap_or(1) as u32;
                        let message =
                            format!("template error: {}", e.detail().unwrap_or(&e.to_string()));
                        PromptFile {
                            display: Arc::clone(&display),
                            source,
                            variables: BTreeSet::new(),
                            error: Some(diag(line, "prompt-syntax", message, None)),
                        }
                    }
                },
            };
            files.insert(name, file);
        }
        Self {
            dir: dir.to_owned(),
            env,
            files,
        }
    }

    /// The prompts directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A template by name.
    pub fn get(&self, name: &str) -> Option<&PromptFile> {
        self.files.get(name)
    }

    /// Template names, for hints.
    pub fn names(&self) -> impl Iterator<Item = &str> + Clone {
        self.files.keys().map(String::as_str)
    }

    /// Renders `name` with `ctx`.
    ///
    /// # Errors
    /// The template is missing or fails at render time.
    pub fn render(&self, name: &str, ctx: minijinja::Value) -> Result<String, minijinja::Error> {
        self.env.get_template(name)?.render(ctx)
    }

    /// Content hash of the named templates (part of a graph's version).
    pub fn hash_into(&self, names: &BTreeSet<String>, hasher: &mut Xxh3) {
        for n in names {
            hasher.update(n.as_bytes());
            hasher.update(&[0]);
            if let Some(f) = self.files.get(n) {
                hasher.update(f.source.as_bytes());
            }
            hasher.update(&[0]);
        }
    }

    /// Where a variable is first used in a template, for diagnostics.
    pub fn locate_variable(&self, name: &str, var: &str) -> (u32, u32) {
        let Some(file) = self.files.get(name) else {
            return (1, 1);
        };
        for (i, line) in file.source.lines().enumerate() {
            let mut start = 0;
            while let Some(pos) = line[start..].find(var) {
                let at = start + pos;
                let before = line[..at].chars().next_back();
                let after = line[at + var.len()..].chars().next();
                let ident = |c: Option<char>| {
                    c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
                };
                if !ident(before) && !ident(after) && line[..at].contains(['{']) {
                    return (i as u32 + 1, line[..at].chars().count() as u32 + 1);
                }
                start = at + var.len();
            }
        }
        (1, 1)
    }
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>, depth: u32) {
    if depth > 8 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        if path.is_dir() {
            collect(root, &path, out, depth + 1);
        } else if path
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| EXTENSIONS.contains(&x))
            && let Ok(rel) = path.strip_prefix(root)
        {
            let name = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            out.push((name, path));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_and_syntax_errors_are_known_at_load() {
        let p = Prompts::from_sources(
            Path::new("prompts"),
            [
                (
                    "a.md",
                    "Hi {{ query }}\n{% for m in messages %}{{ m.content }}{% endfor %}{{ range(2) }}",
                ),
                ("b.md", "line one\n{{ broken "),
            ],
        );
        let a = p.get("a.md").unwrap();
        assert_eq!(
            a.variables.iter().map(String::as_str).collect::<Vec<_>>(),
            ["messages", "query"]
        );
        let b = p.get("b.md").unwrap().error.as_ref().unwrap();
        assert_eq!((b.line, b.code), (2, "prompt-syntax"));
        assert_eq!(p.locate_variable("a.md", "messages"), (2, 13));
        let ctx = minijinja::context! { query => "you", messages => vec![minijinja::context!{content => "x"}] };
        assert_eq!(p.render("a.md", ctx).unwrap(), "Hi you\nx[0, 1]");
    }
}
