"""No include runs upward: the layer order of docs/design.md, "Layers", checked.

Usage: check_layers.py SOURCE_ROOT

Reads the layer table from SOURCE_ROOT/docs/design.md (its rows bottom up;
the second column's `paths` say where each layer lives: a folder ending in
/, or a file) and every #include in SOURCE_ROOT/lib and SOURCE_ROOT/include/sova.
A file belongs to the row whose path names it most specifically. Fails,
naming each, on:
  * an include of a file in a later row (upward);
  * a file under lib/ or include/sova/ that no row places;
  * a quoted include that names no file (so that none escapes the check).
Includes resolve as the build does: "dir/x.hpp" from lib/ (else beside the
includer), "x.hpp" beside the includer, <sova/x> from include/; other <...>
includes (the standard library, CUDA, RMM, PyTorch) are not sova's.
"""
import pathlib
import re
import sys

SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cu", ".cuh", ".inc"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def read_layers(design_md):
    """[(level, layer name, [path, ...])], bottom up, from the Layers table."""
    text = design_md.read_text()
    section = text.split("\n## Layers\n", 1)
    if len(section) != 2:
        sys.exit(f"{design_md}: no '## Layers' section")
    rows = []
    for line in section[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2 or cells[0] in ("layer", "") or set(cells[0]) <= {"-", " "}:
            continue
        paths = re.findall(r"`([^`]+)`", cells[1])
        if not paths:
            sys.exit(f"{design_md}: layer row '{cells[0]}' names no paths")
        rows.append((len(rows), cells[0], paths))
    if not rows:
        sys.exit(f"{design_md}: the Layers section has no table")
    return rows


def layer_of(rel, rows):
    """(level, name) of the row placing `rel` (a path from the source root), or None."""
    best = None
    for level, name, paths in rows:
        for p in paths:
            if rel == p or (p.endswith("/") and rel.startswith(p)):
                if best is None or len(p) > best[0]:
                    best = (len(p), level, name)
    return None if best is None else best[1:]


def resolve(root, includer, kind, name):
    """The included file, relative to root; None when not sova's; '' when not found."""
    if kind == "<":
        if not name.startswith("sova/"):
            return None
        candidates = [root / "include" / name]
    else:
        candidates = [root / "lib" / name, includer.parent / name] if "/" in name else [includer.parent / name]
    for c in candidates:
        if c.is_file():
            return c.resolve().relative_to(root).as_posix()
    return ""


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = pathlib.Path(sys.argv[1]).resolve()
    rows = read_layers(root / "docs" / "design.md")
    files = [p for d in (root / "lib", root / "include" / "sova") for p in sorted(d.rglob("*"))
             if p.is_file() and p.suffix in SOURCE_SUFFIXES]
    errors = []
    for f in files:
        rel = f.relative_to(root).as_posix()
        mine = layer_of(rel, rows)
        if mine is None:
            errors.append(f"{rel}: in no layer (add its folder to docs/design.md's Layers table)")
            continue
        text = f.read_text(errors="replace")
        for m in INCLUDE.finditer(text):
            kind, name = m.group(1), m.group(2)
            target = resolve(root, f, kind, name)
            if target is None:
                continue
            line = text.count("\n", 0, m.start()) + 1
            if target == "":
                errors.append(f"{rel}:{line}: #include {kind}{name}: no such file in the tree")
                continue
            theirs = layer_of(target, rows)
            if theirs is None:
                errors.append(f"{rel}:{line}: includes {target}, which is in no layer")
            elif theirs[0] > mine[0]:
                errors.append(f"{rel}:{line}: upward include: {mine[1]} includes {target} ({theirs[1]})")
    for e in errors:
        print(e, file=sys.stderr)
    layers = " -> ".join(name for _, name, _ in rows)
    print(f"{len(files)} files, layers bottom up: {layers}; {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
