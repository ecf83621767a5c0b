#!/usr/bin/env python3
"""Generate `src/internals.rs`: what tests and benches reach beyond the API.

    python3 tests/tools/public-api/internals.py            # write src/internals.rs
    python3 tests/tools/public-api/internals.py --rewrite  # and rewrite tests/benches paths

The crate's top-level modules are private except the public ones below. Tests
and benches still drive the internals (stores, the executor, the SSE bridge),
so the hidden module `stategraph::internals` re-exports *exactly* the items
they name, under the same module paths: `stategraph::store::sqlite::SqliteStore`
is `stategraph::internals::store::sqlite::SqliteStore`. Nothing else leaks, so
`unreachable_pub` still narrows everything the tests do not use.

The script scans tests/ and benches/ for `stategraph::…` paths (in `use` trees
and inline), follows module imports (`use stategraph::replay;` then
`replay::fork(…)`), and copies each item's `#[cfg(feature = …)]` (from its
module's declaration and its own definition or re-export) so the engine-alone
build (`--no-default-features`) compiles the same module minus what it lacks.
Re-run it after tests change; `--rewrite` is idempotent.
"""

import pathlib
import re
import sys
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parents[3]
SRC = ROOT / "src"
# Public on purpose (see docs/public-api.md): paths into them stay as they are.
PUBLIC = {"state", "memory", "cli"}
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def sources():
    for top in ("tests", "benches"):
        for f in sorted((ROOT / top).rglob("*.rs")):
            if "node_modules" not in f.parts:
                yield f


def module_file(mods):
    """The file that holds module `mods` (a list), or None when it is inline."""
    if not mods:
        return SRC / "lib.rs"
    base = SRC.joinpath(*mods)
    for f in (base.with_suffix(".rs"), base / "mod.rs"):
        if f.exists():
            return f
    return None


def inline_module(mods):
    """(file, text) of an inline `mod name { … }` that `mods` names, or None."""
    for cut in range(len(mods) - 1, -1, -1):
        f = module_file(mods[:cut])
        if f is None:
            continue
        text = f.read_text()
        for name in mods[cut:]:
            m = re.search(rf"^\s*(pub(\([a-z]+\))? )?mod {name} \{{", text, re.M)
            if not m:
                return None
            text = block_after(text, m.end() - 1)
        return f, text
    return None


def block_after(text, brace):
    depth = 0
    for i in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[brace + 1:i]
    return text[brace + 1:]


def module_text(mods):
    f = module_file(mods)
    if f is not None:
        return f.read_text()
    found = inline_module(mods)
    return found[1] if found else None


def is_module(mods):
    """Whether `mods` names a module a test can reach (`pub mod`, or top-level)."""
    if len(mods) > 1:
        parent = module_text(mods[:-1])
        if parent is None or not re.search(rf"^[ \t]*pub(\(crate\))? mod {mods[-1]}\b", parent, re.M):
            return False
    return module_text(mods) is not None


def cfgs_above(text, pos):
    """The `#[cfg(…)]` attributes right above position `pos` in `text`."""
    lines = text[:pos].splitlines()
    if not text[:pos].endswith("\n"):
        lines = lines[:-1]          # the line the match starts on
    out = []
    for line in reversed(lines):
        s = line.strip()
        if s.startswith("#[cfg("):
            out.append(s[len("#[cfg("):-2])
        elif s.startswith(("#[", "///", "//")):
            continue
        else:
            break
    return out


def module_cfgs(mods):
    """cfgs on the declarations of `mods` and its ancestors."""
    out = []
    for i in range(1, len(mods) + 1):
        parent = module_text(mods[:i - 1])
        m = re.search(rf"^[ \t]*(pub(\([a-z]+\))? )?mod {mods[i - 1]}\b", parent, re.M)
        if m:
            out += cfgs_above(parent, m.start())
    return out


def item_cfgs(mods, name):
    text = module_text(mods)
    pats = [rf"^[ \t]*pub(\([a-z]+\))? (async )?(const )?(unsafe )?"
            rf"(struct|enum|trait|fn|type|const|static|mod|union) {name}\b",
            rf"^[ \t]*pub(\([a-z]+\))? use [^;]*\b{name}\b[^;]*;"]
    for p in pats:
        m = re.search(p, text, re.M)
        if m:
            return cfgs_above(text, m.start())
    return []


# ---- reading the tests' paths ------------------------------------------------

def parse_tree(s, i, prefix, out):
    """Parse a use tree at s[i:]; append (path, local name) to out; return end."""
    path = list(prefix)
    while True:
        m = re.compile(r"\s*(" + IDENT + r"|\{|\*)").match(s, i)
        tok = m.group(1)
        i = m.end()
        if tok == "{":
            while True:
                i = parse_tree(s, i, path, out)
                m = re.compile(r"\s*([,}])").match(s, i)
                i = m.end()
                if m.group(1) == "}":
                    m2 = re.compile(r"\s*\}").match(s, i)
                    return i
                if re.compile(r"\s*\}").match(s, i):
                    return re.compile(r"\s*\}").match(s, i).end()
        if tok == "*":
            raise SystemExit(f"glob import of stategraph::{'::'.join(path)}: name the items")
        if tok == "self":
            out.append((path, path[-1]))
            return i
        path.append(tok)
        m = re.compile(r"\s*::").match(s, i)
        if m:
            i = m.end()
            continue
        local = tok
        m = re.compile(r"\s*as\s+(" + IDENT + ")").match(s, i)
        if m:
            local = m.group(1)
            i = m.end()
        out.append((path, local))
        return i


def strip_internals(path):
    return path[1:] if path and path[0] == "internals" else path


def paths_in(text):
    """Paths a file names, and the modules it imports as (path, local name)."""
    found = []
    modules = []
    for m in re.finditer(r"\buse\s+(?:::)?stategraph::", text):
        out = []
        parse_tree(text, m.end(), [], out)
        for path, local in out:
            path = strip_internals(path)
            found.append(path)
            if path and is_module(path):
                modules.append((path, local))
    for m in re.finditer(rf"\bstategraph::((?:{IDENT}::)*{IDENT})\b(?!\s*::\s*\{{)", text):
        found.append(strip_internals(m.group(1).split("::")))
    return found, modules


def module_uses(text, path, local):
    """`local::…` paths in `text`, for a module imported as `local`."""
    return [path + u.group(1).split("::")
            for u in re.finditer(rf"(?<![\w:]){local}::((?:{IDENT}::)*{IDENT})", text)]


def scope(f):
    """The files a `use` in `f` reaches: `f` and its child modules' files."""
    kids = f.parent if f.name in ("main.rs", "mod.rs", "lib.rs") else f.with_suffix("")
    return [f] + ([k for k in sorted(kids.rglob("*.rs")) if k != f] if kids.is_dir() else [])


def resolve(path):
    """(module path, item name or None) for a path into the crate."""
    mods = []
    for seg in path:
        if is_module(mods + [seg]):
            mods.append(seg)
        else:
            return mods, seg
    return mods, None


def collect():
    items = defaultdict(set)     # module path tuple -> item names
    paths = []
    for f in sources():
        found, modules = paths_in(f.read_text())
        paths += found
        # `use stategraph::replay;` then `replay::fork(…)`, here or in a child
        # module (`use super::*;`).
        for path, local in modules:
            for g in scope(f):
                paths += module_uses(g.read_text(), path, local)
    for path in paths:
        if not path or path[0] in PUBLIC or path[0] == "internals":
            continue
        mods, item = resolve(path)
        if not mods:
            continue             # a root item: already the API
        items[tuple(mods)]       # the module itself
        if item is not None:
            items[tuple(mods)].add(item)
    return items


# ---- writing src/internals.rs ------------------------------------------------

HEADER = """\
//! What tests and benches reach beyond the public API, under the same module
//! paths (`internals::store::sqlite::SqliteStore`). Not part of the API: no
//! semver promise, hidden from the docs.
//!
//! Generated by `tests/tools/public-api/internals.py` from the paths tests/ and
//! benches/ name; re-run it rather than editing this file.
"""


def cfg_attr(cfgs, indent):
    cfgs = sorted(set(cfgs))
    if not cfgs:
        return ""
    expr = cfgs[0] if len(cfgs) == 1 else f"all({', '.join(cfgs)})"
    return f"{indent}#[cfg({expr})]\n"


def render(items):
    tree = {}
    for mods in items:
        node = tree
        for seg in mods:
            node = node.setdefault(seg, {})
    out = [HEADER]

    def emit(node, mods, depth):
        indent = "    " * depth
        names = sorted(items.get(tuple(mods), ()))
        if mods:
            for name in names:
                out.append(cfg_attr(item_cfgs(mods, name), indent))
                out.append(f"{indent}pub use crate::{'::'.join(mods)}::{name};\n")
        for child in sorted(node):
            path = mods + [child]
            kind = "top-level module" if not mods else "module"
            out.append(f"\n{indent}/// The {kind} `{'::'.join(path)}`, as far as tests use it.\n")
            out.append(cfg_attr(module_cfgs(path)[len(module_cfgs(mods)):], indent))
            out.append(f"{indent}pub mod {child} {{\n")
            emit(node[child], path, depth + 1)
            out.append(f"{indent}}}\n")

    emit(tree, [], 0)
    return "".join(out)


def rewrite():
    top = sorted(p.stem if p.suffix == ".rs" else p.name for p in SRC.iterdir()
                 if p.name not in ("lib.rs", "bin", "internals.rs"))
    private = [m for m in top if m not in PUBLIC and is_module([m])]
    pat = re.compile(rf"\bstategraph::({'|'.join(private)})\b")
    for f in sources():
        text = f.read_text()
        new = pat.sub(r"stategraph::internals::\1", text)
        if new != text:
            f.write_text(new)


def main():
    if "--rewrite" in sys.argv:
        rewrite()
    (SRC / "internals.rs").write_text(render(collect()))


if __name__ == "__main__":
    main()
