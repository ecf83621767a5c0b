#!/usr/bin/env python3
"""Count (and list) the crate's public surface from rustdoc's JSON.

    RUSTC_BOOTSTRAP=1 cargo rustdoc --lib -- -Z unstable-options --output-format json
    python3 tests/tools/public-api/count.py target/doc/stategraph.json [--list]

Walks from the crate root through public modules and re-exports, the way an
embedder can name things. Items: modules, structs, enums, traits, functions,
constants, statics, type aliases, macros. Members: public struct fields, enum
variants, trait items, and items of inherent impls. Trait impls (derives,
`From`, ...) are not counted: they add no names. rustdoc already leaves out
`#[doc(hidden)]` items (the test-only `internals` module among them).
"""

import json
import sys
from collections import Counter

ITEM_KINDS = {"module", "struct", "enum", "trait", "function", "constant", "static",
              "type_alias", "macro", "union", "trait_alias", "proc_macro"}


def walk(doc):
    index = doc["index"]
    items = {}          # id -> (kind, first path that reaches it)
    members = Counter()
    seen_modules = set()

    def add(item_id, path):
        item = index.get(str(item_id))
        if item is None or item["crate_id"] != 0:
            return      # an external crate's item, not ours
        kind = next(iter(item["inner"]))
        if kind == "use":
            use = item["inner"]["use"]
            if use["id"] is None:
                return
            if use["is_glob"]:
                target = index.get(str(use["id"]))
                if target and "module" in target["inner"]:
                    for child in target["inner"]["module"]["items"]:
                        add(child, path)
                return
            add(use["id"], path + [use["name"]])
            return
        if kind not in ITEM_KINDS:
            return
        if item_id not in items:
            items[item_id] = (kind, "::".join(path))
            count_members(item, kind)
        if kind == "module" and item_id not in seen_modules:
            seen_modules.add(item_id)
            for child in item["inner"]["module"]["items"]:
                c = index.get(str(child))
                if c is None:
                    continue
                cname = c["name"]
                add(child, path + [cname] if cname and next(iter(c["inner"])) != "use" else path)

    def count_members(item, kind):
        inner = item["inner"][kind]
        if not isinstance(inner, dict):
            return      # a macro: its body is a string
        if kind == "struct":
            plain = inner["kind"].get("plain") if isinstance(inner["kind"], dict) else None
            if plain:
                members["field"] += len(plain["fields"])
            elif isinstance(inner["kind"], dict) and "tuple" in inner["kind"]:
                members["field"] += sum(1 for f in inner["kind"]["tuple"] if f is not None)
        if kind == "enum":
            members["variant"] += len(inner["variants"])
        if kind == "trait":
            members["trait item"] += len(inner["items"])
        for impl_id in inner.get("impls", []):
            impl = index.get(str(impl_id))
            if impl is None:
                continue
            imp = impl["inner"]["impl"]
            if imp["trait"] is None and not imp["is_synthetic"] and imp["blanket_impl"] is None:
                members["inherent item"] += sum(
                    1 for i in imp["items"]
                    if str(i) in index and index[str(i)]["visibility"] == "public")

    add(doc["root"], ["stategraph"])
    return items, members


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "target/doc/stategraph.json"
    items, members = walk(json.load(open(path)))
    kinds = Counter(k for k, _ in items.values())
    if "--list" in sys.argv:
        for kind, name in sorted(items.values(), key=lambda kn: kn[1]):
            print(f"{kind:10} {name}")
        return
    n_items = len(items) - 1      # the crate root is not an item of the API
    n_members = sum(members.values())
    print(f"items {n_items} ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}, crate root not counted)")
    print(f"members {n_members} ({', '.join(f'{k} {v}' for k, v in sorted(members.items()))})")
    print(f"total {n_items + n_members}")


if __name__ == "__main__":
    main()
