#!/usr/bin/env python3
"""Lists the include edges between dynemb's parts and fails on one that breaks an arrow.

A part is a folder include/dynemb/<part>/ (public headers) plus src/<part>/ (private sources);
python/, tools/ and bench/ sit above every part. An include is an edge from the including
file's part to the part of the file it names: "dynemb/<part>/..." (or <dynemb/<part>/...>) is
that part's public header; any other quoted include is resolved as the compiler does (next to
the including file, then src/<including part>/, then src/) and belongs to the folder it is in.
Two things fail:
  - an edge that is not an arrow of docs/architecture.md (a part may include itself and the
    parts below it, nothing else), and
  - an include of another part's private header (src/<part>/...), from anywhere but tests/.
Usage: scripts/check_arrows.py [--quiet] [--list] [root]
"""
import argparse
import pathlib
import re
import sys

# Each part and the parts directly below it (docs/architecture.md, /work/shared/DESIGN.md).
BELOW = {
    "core": [],
    "table": ["core"],
    "ops": ["core", "table"],
    "embedding": ["table", "ops"],
    "storage": ["table"],
    "checkpoint": ["table", "storage"],
    "cache": ["core"],
    "dist": ["embedding", "checkpoint"],
    "wholememory": ["dist"],
}
TOP = {"python", "tools", "bench"}  # above every part
SOURCE_SUFFIXES = {".hpp", ".h", ".cpp", ".cc", ".cu", ".cuh", ".inl"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def allowed_parts():
    """The parts each part may include: itself and everything below it, transitively."""
    closure = {}

    def reach(part, trail=()):
        if part in trail:
            raise SystemExit(f"check_arrows: the part list has a cycle: {' -> '.join(trail + (part,))}")
        if part not in closure:
            below = set()
            for lower in BELOW[part]:
                below |= {lower} | reach(lower, trail + (part,))
            closure[part] = below
        return closure[part]

    for part in BELOW:
        reach(part)
    return {part: below | {part} for part, below in closure.items()}


def part_of(path, root):
    """(part, private) of a file under root, or (None, False) for files outside every part."""
    rel = path.relative_to(root).parts
    if len(rel) >= 3 and rel[0] == "include" and rel[1] == "dynemb":
        return rel[2], False
    if len(rel) >= 2 and rel[0] == "src":
        return rel[1], True
    if rel and rel[0] in TOP:
        return rel[0], False
    return None, False


def resolve(include, including, part, root):
    """The file a quoted include names, searched as the build's include paths do."""
    candidates = [including.parent / include]
    if part:
        candidates.append(root / "src" / part / include)
    candidates += [root / "src" / include, root / "include" / include, root / include]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=pathlib.Path(__file__).resolve().parent.parent)
    parser.add_argument("--quiet", action="store_true", help="print only the breaches")
    parser.add_argument("--list", action="store_true", help="print every edge between parts")
    args = parser.parse_args()
    root = pathlib.Path(args.root).resolve()
    allowed = allowed_parts()

    files = []
    for top in ["include/dynemb", "src", *sorted(TOP)]:
        folder = root / top
        if folder.is_dir():
            files += [p for p in folder.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file()]
    files = [p for p in files if "results" not in p.relative_to(root).parts]

    edges = {}  # (from part, to part) -> how many includes
    breaches = []
    for path in sorted(files):
        part, _ = part_of(path, root)
        if part is None:
            continue
        if part not in allowed and part not in TOP:
            breaches.append(f"{path.relative_to(root)}: part '{part}' is not in the part list "
                            "(add it to BELOW in scripts/check_arrows.py and to "
                            "docs/architecture.md)")
            continue
        text = path.read_text(errors="replace")
        for match in INCLUDE.finditer(text):
            bracket, include = match.groups()
            line = text.count("\n", 0, match.start()) + 1
            where = f"{path.relative_to(root)}:{line}"
            target_part, private = None, False
            if include.startswith("dynemb/"):
                pieces = include.split("/")
                if len(pieces) >= 3:
                    target_part = pieces[1]
            elif bracket == '"':
                target = resolve(include, path, part if part not in TOP else None, root)
                if target is None or root not in target.parents:
                    continue
                target_part, private = part_of(target, root)
            if target_part is None or target_part == part:
                continue
            edges[(part, target_part)] = edges.get((part, target_part), 0) + 1
            if private:
                breaches.append(f"{where}: {part} includes \"{include}\", a private header of "
                                f"{target_part} (src/{target_part}/); use its public headers "
                                f"(include/dynemb/{target_part}/)")
            elif part in TOP:
                if target_part in TOP:
                    continue  # tools, bench and python may share their own code
            elif target_part not in allowed.get(part, set()):
                below = sorted(allowed[part] - {part})
                breaches.append(f"{where}: {part} includes \"{include}\" of {target_part}, but "
                                f"{part} may include only {', '.join(below) or 'nothing'} "
                                "(docs/architecture.md)")

    if args.list or not args.quiet:
        for (src, dst), count in sorted(edges.items()):
            print(f"{src} -> {dst} ({count} includes)")
    for breach in breaches:
        print(f"arrow broken: {breach}", file=sys.stderr)
    if breaches:
        print(f"check_arrows: {len(breaches)} include(s) break an arrow", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"check_arrows: {sum(edges.values())} includes between parts, all along the arrows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
