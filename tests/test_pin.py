"""init and pin --record take the sdist's sha256 from the package index; checkout verifies it."""

from __future__ import annotations

from pathlib import Path

from synth import Queue
from test_bisect_pins import VERSIONS, Index, index  # noqa: F401 - the local index fixture


def test_init_records_the_hash_and_checkout_verifies_it(tmp_path: Path, index: Index) -> None:  # noqa: F811
    root = tmp_path / "q"
    root.mkdir()
    q = Queue(root)
    q.run("init", "--pin", f"vllm=={VERSIONS[0]}")
    assert "sdist=sha256:" in (root / "vendor-pin.txt").read_text()
    q.run("checkout")
    assert (q.work / "vllm" / "parser.py").is_file()


def test_pin_record_fills_a_missing_hash(tmp_path: Path, index: Index) -> None:  # noqa: F811
    root = tmp_path / "q"
    (root / "queue").mkdir(parents=True)
    (root / "series").write_text("")
    (root / "vendor-pin.txt").write_text(f"# pins\npin vllm=={VERSIONS[0]}\n")
    q = Queue(root)
    proc = q.run("checkout", check=False)
    assert proc.returncode == 1 and "vendor-pin.txt:2" in proc.stderr and "pin --record" in proc.stderr
    q.run("pin", "--record")
    text = (root / "vendor-pin.txt").read_text()
    assert text.startswith("# pins\npin vllm==") and "sdist=sha256:" in text
    q.run("checkout")


def test_a_hash_the_index_disagrees_with_is_refused(tmp_path: Path, index: Index) -> None:  # noqa: F811
    root = tmp_path / "q"
    (root / "queue").mkdir(parents=True)
    (root / "series").write_text("")
    (root / "vendor-pin.txt").write_text(f"pin vllm=={VERSIONS[0]} sdist=sha256:{'ab' * 32}\n")
    proc = Queue(root).run("checkout", check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error[integrity]: vendor-pin.txt:1: sha256 mismatch")
    assert not (root / "work" / "vllm").exists()
