"""One status vocabulary: hunk, file and patch statuses are members of ``model.status.Status``,
defined nowhere else, and they print and serialise as the words they always were."""

from __future__ import annotations

import ast
import json

from gqueue.model import drift as d
from gqueue.model.apply import apply_hunks
from gqueue.model.diff import parse_diff
from gqueue.model.status import Status

from test_import_layers import MODULES

WORDS = {s.value for s in Status}


def _is_word(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in WORDS


def test_no_status_word_is_defined_or_compared_outside_the_enum() -> None:
    """No module but model/status.py binds a status word to a name (``CLEAN = "clean"``) or
    compares a ``.status`` with a literal word (``h.status == "fuzz"``, ``in ("clean", "offset")``)."""
    found = []
    for name, path in MODULES.items():
        if name == "gqueue.model.status":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:  # module constants (an error's ref = "conflict" is no status)
            if isinstance(node, ast.Assign) and _is_word(node.value) \
                    and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets):
                found.append(f"{name} line {node.lineno}: a status word bound to a name")
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                    isinstance(side, ast.Attribute) and side.attr == "status" for side in (node.left, *node.comparators)):
                for side in node.comparators:
                    elts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                    if any(_is_word(e) for e in elts):
                        found.append(f"{name} line {node.lineno}: a status compared with a literal word")
    assert not found, "\n".join(found)


def test_the_drift_names_are_the_enum_members() -> None:
    assert all(isinstance(s, Status) for s in d.STATUSES)
    assert d.CLEAN is Status.CLEAN and d.FILE_MISSING is Status.FILE_MISSING


def test_statuses_print_and_serialise_as_their_words() -> None:
    diff = parse_diff(b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n")[0]
    hunk = apply_hunks(b"x\na\nb\n", diff, max_fuzz=0).hunks[0]
    assert hunk.status is Status.OFFSET
    assert json.loads(json.dumps(hunk.to_json()))["status"] == "offset"
    assert f"[{hunk.status}]" == "[offset]" and str(Status.FILE_MISSING) == "file-missing"
    assert Status.PARTIAL_UPSTREAM == "partial-upstream" and "fuzz" in {Status.FUZZ}
    assert json.dumps({Status.FUZZ: [Status.CLEAN]}) == '{"fuzz": ["clean"]}'
