#!/usr/bin/env python3
"""A synthetic patch series over a real source tree, for benchmarks.

``generate(tree_dir, out_dir, n=300, seed=0)`` picks about 500 Python files of the tree
(deterministically from ``seed``), and writes ``n`` small gqueue patches (a YAML header and a
git-style diff with full ``index`` lines) to ``out_dir/queue/`` plus ``out_dir/series``. Each
patch makes one to three small hunks in a file (a trailing comment on a code line,
or a new comment line); about 30% of the patches touch a file an earlier patch touched, so the
series only applies in order; the patches touch one to three files each (most of the ~500).
Returns the patch names in series order.

With ``same_size=F`` an edit is, with probability F, a rewrite of an earlier patch's note
to the patch's own tag of the same length (``S012.0`` -> ``S145.0``), which leaves the
file's size as it was: the case where a rewritten file keeps its whole stat record.
``shared=P`` sets the chance that a patch touches a file an earlier one touched (0.30).

With ``stable_against=NEW_TREE_DIR`` every edit is placed where the lines around it are the
same in the other tree, so the series also moves there without conflicts (for measuring a
rebase when nothing conflicts).

    python tools/bench/synthseries.py TREE_DIR OUT_DIR [-n 300] [--seed 0] [--stable-against DIR]
        [--same-size F]
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import random
import re
from pathlib import Path

FILES = 500
SHARED = 0.30
WINDOW = 4


def blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _candidates(tree: Path, rng: random.Random, stable: Path | None) -> list[str]:
    paths = []
    for path in sorted(tree.rglob("*.py")):
        rel = path.relative_to(tree).as_posix()
        if not rel.startswith("vllm/") or "/." in rel:
            continue
        try:
            text = path.read_bytes()
        except OSError:
            continue
        if text.count(b"\n") < 40 or b"\r" in text:
            continue
        if stable is not None and not (stable / rel).is_file():
            continue
        paths.append(rel)
    rng.shuffle(paths)
    return sorted(paths[:FILES])


def _stable_lines(old: list[str], new: list[str]) -> set[int]:
    """Indexes of ``old`` lines whose neighbourhood (WINDOW lines each side) is unchanged in ``new``."""
    keep: set[int] = set()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, _j1, _j2 in matcher.get_opcodes():
        if tag == "equal" and i2 - i1 > 2 * WINDOW + 1:
            keep.update(range(i1 + WINDOW, i2 - WINDOW))
    return keep


def _edit(lines: list[str], rng: random.Random, tag: str, allowed: set[int] | None) -> list[str] | None:
    code = [i for i, line in enumerate(lines)
            if line.strip() and not line.lstrip().startswith(("#", '"', "'", "@")) and line.endswith("\n")
            and not line.rstrip().endswith(("\\", ",", "(", "[", "{")) and (allowed is None or i in allowed)
            and '"""' not in line and "'''" not in line]
    if not code:
        return None
    i = rng.choice(code)
    line = lines[i]
    out = list(lines)
    if rng.random() < 0.5:
        out[i] = line.rstrip("\n") + f"  # {tag}\n"
    else:
        indent = line[: len(line) - len(line.lstrip())]
        out.insert(i, f"{indent}# {tag}: synthetic downstream note\n")
    return out


TAG = re.compile(r"S[0-9]{3,}\.[0-9]+")


def _retag(lines: list[str], rng: random.Random, tag: str) -> list[str] | None:
    """An earlier note's tag in ``lines`` replaced by ``tag`` (same length); None if there is none."""
    spots = [(i, m.start(), m.end()) for i, line in enumerate(lines) for m in TAG.finditer(line)
             if m.end() - m.start() == len(tag) and m.group() != tag]
    if not spots:
        return None
    i, start, end = rng.choice(spots)
    out = list(lines)
    out[i] = lines[i][:start] + tag + lines[i][end:]
    return out


def _diff(path: str, old: str, new: str) -> str:
    body = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"a/{path}", f"b/{path}", n=3))
    index = f"index {blob_sha(old.encode())}..{blob_sha(new.encode())} 100644\n"
    return f"diff --git a/{path} b/{path}\n{index}{body}"


def generate(tree_dir: Path, out_dir: Path, n: int = 300, seed: int = 0, *,
             stable_against: Path | None = None, same_size: float = 0.0, shared: float = SHARED) -> list[str]:
    rng = random.Random(seed)
    tree_dir, out_dir = Path(tree_dir), Path(out_dir)
    files = _candidates(tree_dir, rng, Path(stable_against) if stable_against else None)
    current: dict[str, str] = {}
    pristine: dict[str, str] = {}
    allowed: dict[str, set[int] | None] = {}
    touched: list[str] = []
    queue = out_dir / "queue"
    queue.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    fresh = list(files)
    rng.shuffle(fresh)
    number = 0
    while len(names) < n and number < 4 * n:
        number += 1
        name = f"S{len(names) + 1:03d}-synthetic.patch"
        diffs = []
        want = rng.choice((1, 1, 2, 2, 3))
        chosen: list[str] = []
        if touched and rng.random() < shared:
            chosen.append(rng.choice(touched))
        while len(chosen) < want:
            path = fresh.pop() if fresh else rng.choice(files)
            if path not in chosen:
                chosen.append(path)
        for path in sorted(chosen):
            if path not in current:
                current[path] = pristine[path] = (tree_dir / path).read_text(encoding="utf-8", errors="surrogateescape")
                if stable_against is not None:
                    other = (Path(stable_against) / path).read_text(encoding="utf-8", errors="surrogateescape")
                    allowed[path] = _stable_lines(current[path].splitlines(keepends=True), other.splitlines(keepends=True))
                else:
                    allowed[path] = None
            old = current[path]
            lines = old.splitlines(keepends=True)
            for k in range(rng.choice((1, 1, 2, 3))):
                edited = None
                if same_size and rng.random() < same_size:
                    edited = _retag(lines, rng, f"S{number:03d}.{k}")
                if edited is None:
                    edited = _edit(lines, rng, f"S{number:03d}.{k}", _shifted(allowed[path], pristine[path], lines))
                if edited is not None:
                    lines = edited
            new = "".join(lines)
            if new == old:
                continue
            diffs.append(_diff(path, old, new))
            current[path] = new
            if path not in touched:
                touched.append(path)
        if not diffs:
            continue
        header = (f"---\nid: S{len(names) + 1:03d}\ntitle: Synthetic patch {len(names) + 1}\nlifecycle: experimental\n"
                  f"tier: community\ndefault_on: false\nenv_flag: null\n...\n")
        (queue / name).write_text(header + "".join(diffs), encoding="utf-8", errors="surrogateescape")
        names.append(name)
    (out_dir / "series").write_text("# synthetic series\n" + "".join(f"{x}\n" for x in names))
    return names


def _shifted(allowed: set[int] | None, original: str, lines: list[str]) -> set[int] | None:
    """Stable line indexes mapped onto the file as already edited (inserted comment lines shift them)."""
    if allowed is None:
        return None
    base = original.splitlines(keepends=True)
    if len(base) == len(lines):
        return allowed
    out: set[int] = set()
    matcher = difflib.SequenceMatcher(None, base, lines, autojunk=False)
    for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            out.update(j1 + (i - i1) for i in range(i1, i2) if i in allowed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stable-against", type=Path)
    parser.add_argument("--same-size", type=float, default=0.0)
    args = parser.parse_args()
    names = generate(args.tree, args.out, args.n, args.seed, stable_against=args.stable_against,
                     same_size=args.same_size)
    print(f"{len(names)} patches in {args.out / 'queue'}")


if __name__ == "__main__":
    main()
