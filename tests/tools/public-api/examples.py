#!/usr/bin/env python3
"""Check that the examples use only the documented public API (run by .ci/run).

The examples are built by CI (`cargo clippy --all-targets`); this adds that
every `stategraph::…` path they name starts at a root item or at a public
module (`pub mod` in src/lib.rs), and never at `internals` or another
`#[doc(hidden)]` module. Reads files only: no build.

    python3 tests/tools/public-api/examples.py
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def api_names():
    """(public modules, root names) from src/lib.rs; hidden modules excluded."""
    lib = (ROOT / "src" / "lib.rs").read_text()
    hidden = set(re.findall(r"#\[doc\(hidden\)\]\s*pub mod (\w+)", lib))
    modules = set(re.findall(r"^pub mod (\w+)", lib, re.M)) - hidden
    roots = set()
    for m in re.finditer(r"^pub use ([^;]+);", lib, re.M | re.S):
        tree = m.group(1)
        tail = tree.split("::{", 1)[1].rstrip("}") if "::{" in tree else tree.rsplit("::", 1)[-1]
        for part in tail.split(","):
            part = part.strip()
            if part:
                roots.add(re.split(r"\s+as\s+", part)[-1].split("::")[-1])
    macros = set(re.findall(r"#\[macro_export\]\s*macro_rules!\s*(\w+)",
                            "".join(p.read_text() for p in (ROOT / "src").rglob("*.rs"))))
    return modules, roots | macros, hidden


def first_segments(text):
    """The first segment after `stategraph::` of every path, `use` groups opened."""
    for m in re.finditer(rf"(?<![\w:])(?:::)?stategraph::(\{{[^;]*?\}}|{IDENT})", text, re.S):
        seg = m.group(1)
        if seg.startswith("{"):
            depth, part = 0, ""
            for ch in seg[1:-1] + ",":
                depth += {"{": 1, "}": -1}.get(ch, 0)
                if ch == "," and depth == 0:
                    name = part.strip().split("::")[0].split(" ")[0]
                    if name:
                        yield name
                    part = ""
                else:
                    part += ch
        else:
            yield seg


def main():
    modules, roots, hidden = api_names()
    bad = []
    files = sorted((ROOT / "examples").rglob("*.rs"))
    for f in files:
        for name in first_segments(f.read_text()):
            if name in hidden or (name not in modules and name not in roots):
                bad.append(f"{f.relative_to(ROOT)}: stategraph::{name} is not the public API")
    if bad:
        print("\n".join(bad), file=sys.stderr)
        print(f"public modules: {sorted(modules)}; root items: see src/lib.rs", file=sys.stderr)
        sys.exit(1)
    print(f"[examples] {len(files)} files use only root items and the public modules "
          f"{', '.join(sorted(modules))}", file=sys.stderr)


if __name__ == "__main__":
    main()
