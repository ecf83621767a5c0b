#!/usr/bin/env python3
"""Apply rustc's `unreachable_pub` suggestions: every `pub` item that neither
the API nor `stategraph::internals` reaches becomes `pub(crate)`.

    python3 tests/tools/public-api/narrow.py --all-features

Run it with every feature on: an item the full build reaches only through
the server's state (`AppState::runs`) looks unreachable without the server,
and narrowing it there breaks the tests that call its methods. The engine
alone (`--no-default-features`) is kept warning-free by `#[cfg(feature =
"server")]` on what only the server calls, not by narrowing.

`cargo fix` cannot do this alone: in a grouped re-export
(`pub use compile::{CompileEnv, Compiled};`) rustc points at the one name
that is unreachable but suggests narrowing the shared `pub`, which would
cut the reachable names off too. Here such a group is split: the
unreachable names move to a `pub(crate) use` of their own. Repeats until
rustc reports none; re-run after a merge. `cargo fix` then removes the
imports left unused, and `cargo fmt` tidies.
"""

import json
import pathlib
import re
import subprocess
import sys
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parents[3]


def diagnostics(features):
    # Touch the crate root so cargo re-checks and re-reports the lints.
    (ROOT / "src" / "lib.rs").touch()
    out = subprocess.run(
        ["cargo", "check", "--lib", "--message-format", "json", *features],
        cwd=ROOT, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        d = json.loads(line)
        if d.get("reason") != "compiler-message":
            continue
        m = d["message"]
        if m["level"] == "error":
            sys.exit(m["rendered"])
        if m["code"] and m["code"]["code"] == "unreachable_pub":
            yield m


def plan(messages):
    """file -> {byte offset of `pub`: set of names (None: the whole item)}."""
    edits = defaultdict(lambda: defaultdict(set))
    for m in messages:
        primary = m["spans"][0]
        fix = next(s for c in m["children"] for s in c["spans"]
                   if s.get("suggested_replacement") == "pub(crate)")
        text = (ROOT / fix["file_name"]).read_bytes()
        name = text[primary["byte_start"]:primary["byte_end"]].decode()
        edits[fix["file_name"]][fix["byte_start"]].add(name)
    return edits


def narrow_use(stmt, names):
    """Rewrite one `pub use …;` statement whose `names` are unreachable."""
    m = re.fullmatch(r"pub use ([\w:]+)::\{(.*)\};", stmt, re.S)
    if not m:
        return "pub(crate)" + stmt[3:]          # one name: narrow it all
    prefix, body = m.group(1), m.group(2)
    if "{" in body:
        raise SystemExit(f"nested use group, narrow by hand: {stmt}")
    parts = [p.strip() for p in body.split(",") if p.strip()]
    hit = lambda p: p in names or any(n in names for n in re.split(r"\s+as\s+", p))
    keep = [p for p in parts if not hit(p)]
    drop = [p for p in parts if hit(p)]
    if not keep:
        return "pub(crate)" + stmt[3:]
    group = lambda ps: ps[0] if len(ps) == 1 else "{" + ", ".join(ps) + "}"
    return f"pub use {prefix}::{group(keep)};\npub(crate) use {prefix}::{group(drop)};"


def apply(edits):
    for file, spots in edits.items():
        path = ROOT / file
        text = path.read_bytes().decode()
        data = text.encode()
        # Work from the end so earlier offsets stay valid.
        for start in sorted(spots, reverse=True):
            head = data[start:start + 8].decode(errors="ignore")
            if head.startswith("pub use"):
                end = data.index(b";", start) + 1
                stmt = data[start:end].decode()
                new = narrow_use(stmt, spots[start])
                data = data[:start] + new.encode() + data[end:]
            else:
                data = data[:start] + b"pub(crate)" + data[start + 3:]
        path.write_bytes(data)


def main():
    features = sys.argv[1:]
    for round_ in range(1, 20):
        edits = plan(list(diagnostics(features)))
        n = sum(len(v) for v in edits.values())
        print(f"round {round_}: {n} unreachable pub items", file=sys.stderr)
        if not n:
            return
        apply(edits)
    sys.exit("still unreachable items after 19 rounds")


if __name__ == "__main__":
    main()
