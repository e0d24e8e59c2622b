"""header --edit: the YAML header replaced by what the editor left, the diff untouched."""

from __future__ import annotations

from pathlib import Path

from synth import BASE_FILES, make_queue, unified


def test_header_edit_refuses_a_line_that_ends_the_header_early(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    path = q.write_patch("A1-a.patch", unified("vllm/util.py", util, util.replace("return x + 7\n", "return x + 70\n")))
    q.set_series("A1-a.patch")
    before = path.read_bytes()
    editor = "sed -i 's/^title:.*/title: x\\n...\\nnotes: kept/'"
    proc = q.run("header", "A1-a.patch", "--edit", check=False, env={"GQUEUE_EDITOR": editor})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "error[bad-format]: queue/A1-a.patch:4: a line '...' ends the header early" in proc.stderr
    assert path.read_bytes() == before
    assert "notes: kept" in (q.root / ".gqueue/saved/last-header-edit.yaml").read_text()


def test_header_edit_keeps_the_diff(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    path = q.write_patch("A1-a.patch", unified("vllm/util.py", util, util.replace("return x + 7\n", "return x + 70\n")))
    q.set_series("A1-a.patch")
    body = path.read_bytes().split(b"\n...\n", 1)[1]
    q.run("header", "A1-a.patch", "--edit", env={"GQUEUE_EDITOR": "sed -i 's/^title:.*/title: new title/'"})
    assert path.read_bytes() == b"---\nid: A1\ntitle: new title\n...\n" + body


def test_header_edit_refuses_an_id_another_patch_has(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    q.write_patch("A1-a.patch", unified("vllm/util.py", util, util.replace("return x + 7\n", "return x + 70\n")))
    path = q.write_patch("A2-b.patch", unified("vllm/util.py", util, util.replace("return x + 30\n", "return x + 300\n")))
    q.set_series("A1-a.patch", "A2-b.patch")
    before = path.read_bytes()
    proc = q.run("header", "A2-b.patch", "--edit", check=False, env={"GQUEUE_EDITOR": "sed -i 's/^id: A2/id: A1/'"})
    assert proc.returncode == 1
    assert "error[bad-format]: queue/A2-b.patch:2: the id 'A1' is already the id of A1-a.patch" in proc.stderr
    assert path.read_bytes() == before
