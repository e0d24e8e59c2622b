#!/usr/bin/env python3
"""A series as it comes from a downstream git branch: ``git format-patch`` of small commits.

``generate(tree_dir, out_dir, n=300, seed=0)`` makes a git repository of a copy of the
tree (one base commit), commits ``n`` small changes on it one by one (the edits of
tools/bench/synthseries.py with ``shared=0.55``, so that about 30% of the touched files are
touched by more than one commit; each commit with its own author, date, subject and body),
and writes ``git format-patch`` of those commits to ``out_dir/queue/`` (mails with
abbreviated ``index`` lines, a diffstat and git's own hunks) with a quilt ``series`` file
listing them in order, which ``gqueue import --series`` takes. Returns the file names in
order and leaves the repository in ``out_dir/repo`` (its base commit is tagged ``base``).

    python tools/bench/realseries.py TREE_DIR OUT_DIR [-n 300] [--seed 0] [--stable-against DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthseries import generate as synthetic  # noqa: E402

AUTHORS = [("Ada Lovelace", "ada@example.org"), ("Grace Hopper", "grace@example.org"),
           ("Edsger Dijkstra", "ewd@example.org"), ("Barbara Liskov", "liskov@example.org")]
VERBS = ["Fix", "Guard", "Note", "Tune", "Document", "Clarify", "Handle"]
ENV = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C", GIT_COMMITTER_NAME="Bench",
           GIT_COMMITTER_EMAIL="bench@example.org")


def _git(repo: Path, *args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, input=stdin, capture_output=True, env=env or ENV)
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {proc.stderr.decode()[-2000:]}")
    return proc.stdout.decode()


def generate(tree_dir: Path, out_dir: Path, n: int = 300, seed: int = 0, *,
             stable_against: Path | None = None) -> list[str]:
    tree_dir, out_dir = Path(tree_dir), Path(out_dir)
    rng = random.Random(seed)
    scratch = out_dir / "synthetic"
    names = synthetic(tree_dir, scratch, n=n, seed=seed, stable_against=stable_against, shared=0.55)
    repo = out_dir / "repo"
    shutil.copytree(tree_dir, repo, symlinks=True)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A", "-f")
    _git(repo, "commit", "-q", "--no-verify", "-m", "base", env=dict(ENV, GIT_AUTHOR_NAME="Bench",
                                                                      GIT_AUTHOR_EMAIL="bench@example.org"))
    _git(repo, "tag", "base")
    when = 1_700_000_000
    for number, name in enumerate(names, 1):
        body = (scratch / "queue" / name).read_bytes()
        diff = body[body.index(b"diff --git "):]
        _git(repo, "apply", "--index", "-", stdin=diff)
        files = [line[6:] for line in diff.decode().splitlines() if line.startswith("+++ b/")]
        area = files[0].split("/")[1] if "/" in files[0] else files[0]
        subject = f"{rng.choice(VERBS)} {area}: small change {number}"
        text = (f"{subject}\n\nTouches {', '.join(files)}.\n\n"
                f"Signed-off-by: {AUTHORS[number % len(AUTHORS)][0]} <{AUTHORS[number % len(AUTHORS)][1]}>\n")
        when += rng.randint(600, 86_400)
        author, mail = AUTHORS[number % len(AUTHORS)]
        _git(repo, "commit", "-q", "--no-verify", "-F", "-", stdin=text.encode(),
             env=dict(ENV, GIT_AUTHOR_NAME=author, GIT_AUTHOR_EMAIL=mail, GIT_AUTHOR_DATE=f"{when} +0000",
                      GIT_COMMITTER_DATE=f"{when} +0000"))
    queue = out_dir / "queue"
    queue.mkdir(parents=True, exist_ok=True)
    made = _git(repo, "format-patch", "-q", "-o", str(queue), "base..HEAD").split()
    files = [Path(path).name for path in made] or sorted(p.name for p in queue.glob("*.patch"))
    (queue / "series").write_text("".join(f"{x}\n" for x in files))
    shutil.rmtree(scratch)
    return files


def shape(queue: Path, series: Path | None = None) -> dict[str, float]:
    """File diffs, hunks and the share of touched files that more than one patch touches
    (the patches ``series``, default ``queue/series``, lists)."""
    touches: dict[str, int] = {}
    diffs = hunks = 0
    for line in (series or queue / "series").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name = line.split()[0]
        for line in (queue / name).read_text(encoding="utf-8", errors="surrogateescape").splitlines():
            if line.startswith("+++ b/"):
                diffs += 1
                touches[line[6:]] = touches.get(line[6:], 0) + 1
            elif line.startswith("@@ "):
                hunks += 1
    shared = sum(1 for count in touches.values() if count > 1)
    return {"file diffs": diffs, "hunks": hunks, "files": len(touches),
            "shared": round(100 * shared / max(1, len(touches)), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stable-against", type=Path)
    args = parser.parse_args()
    names = generate(args.tree, args.out, args.n, args.seed, stable_against=args.stable_against)
    print(f"{len(names)} patches in {args.out / 'queue'}: {shape(args.out / 'queue')}")


if __name__ == "__main__":
    main()
