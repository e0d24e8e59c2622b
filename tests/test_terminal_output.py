"""Colour and progress only on a terminal: runs of the real command line with stdout or stderr
on a pseudo-terminal, compared with the same runs into pipes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from synth import BASE_FILES, Queue, make_queue, make_sdist, sha256, unified

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _run(root: Path, *args: str, tty: tuple[str, ...] = (), env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """gqueue ARGS with the streams named in ``tty`` on pseudo-terminals, the others piped."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    full_env.update({"TERM": "xterm", "COLUMNS": "100"})
    full_env.update(env or {})
    terminals: dict[str, tuple[int, int]] = {name: os.openpty() for name in tty}
    streams = {name: terminals[name][1] if name in terminals else subprocess.PIPE for name in ("stdout", "stderr")}
    proc = subprocess.Popen([sys.executable, "-m", "gqueue", "-C", str(root), *args], stdin=subprocess.DEVNULL,
                            env=full_env, **streams)  # type: ignore[call-overload]
    read: dict[str, bytes] = {}

    def drain(name: str, fd: int) -> None:
        chunks = []
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the other end closed
                break
            if not data:
                break
            chunks.append(data)
        read[name] = b"".join(chunks)

    threads = []
    for name, (master, slave) in terminals.items():
        os.close(slave)
        threads.append(threading.Thread(target=drain, args=(name, master)))
        threads[-1].start()
    piped_out, piped_err = proc.communicate(timeout=120)
    for thread in threads:
        thread.join(timeout=30)
    for master, _slave in terminals.values():
        os.close(master)
    out = read.get("stdout", piped_out or b"").decode().replace("\r\n", "\n")
    err = read.get("stderr", piped_err or b"").decode().replace("\r\n", "\n")
    return proc.returncode, out, err


def _queue_with_a_patch(tmp_path: Path) -> Queue:
    q = make_queue(tmp_path)
    new = BASE_FILES["vllm/parser.py"].replace("import json\n", "import json\nimport sys\n")
    q.write_patch("P1-parser.patch", unified("vllm/parser.py", BASE_FILES["vllm/parser.py"], new))
    q.set_series("P1-parser.patch")
    q.run("checkout")
    return q


# --- colour -----------------------------------------------------------------------------------------


def test_statuses_are_coloured_on_a_terminal_only(tmp_path: Path) -> None:
    q = _queue_with_a_patch(tmp_path)
    code, out, _err = _run(q.root, "push", tty=("stdout",))
    assert code == 0 and "\x1b[32mapplied\x1b[0m" in out
    q.run("pop")
    code, piped, err = _run(q.root, "push")
    assert code == 0 and "\x1b" not in piped + err and piped.startswith("applied")
    assert ANSI.sub("", out) == piped  # colour is laid over the same text
    q.run("pop")
    assert "\x1b" not in _run(q.root, "push", tty=("stdout",), env={"NO_COLOR": "1"})[1]
    q.run("pop")
    assert "\x1b" not in _run(q.root, "--color=never", "push", tty=("stdout",))[1]
    q.run("pop")
    forced = _run(q.root, "--color=always", "push")[1]
    assert "\x1b[32mapplied" in forced and ANSI.sub("", forced) == piped
    q.run("pop")
    assert "\x1b" not in _run(q.root, "push", tty=("stdout",), env={"TERM": "dumb"})[1]
    # the queue's own text is shown as it is: a diff line ' ok = 1' or a patch named 'applied'
    diff = _run(q.root, "diff", tty=("stdout",))[1]
    assert diff.startswith("diff --git") and "\x1b" not in diff


def test_errors_and_hints_are_coloured_on_a_terminal_only(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    (q.root / "vendor-pin.txt").write_text("pin vllm==0.1.0\n")  # no hash recorded: an error and a hint
    code, _out, err = _run(q.root, "checkout", tty=("stderr",))
    assert code == 1
    assert err.startswith("\x1b[31m\x1b[1merror[bad-format]:\x1b[0m vendor-pin.txt:1: ")
    assert "\x1b[36mhint:\x1b[0m" in err
    code, _out, piped = _run(q.root, "checkout")
    assert code == 1 and "\x1b" not in piped and ANSI.sub("", err) == piped
    assert "\x1b" not in _run(q.root, "checkout", tty=("stderr",), env={"NO_COLOR": "yes"})[2]


def test_json_is_the_same_document_whatever_the_colour(tmp_path: Path) -> None:
    q = _queue_with_a_patch(tmp_path)
    plain = _run(q.root, "--color=never", "series", "--json")[1]
    assert _run(q.root, "--color=always", "series", "--json")[1] == plain
    assert _run(q.root, "series", "--json", tty=("stdout", "stderr"))[1] == plain
    assert "\x1b" not in plain


def test_an_unknown_colour_choice_is_a_usage_error(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    code, _out, err = _run(q.root, "--color=sometimes", "series")
    assert code == 2 and "'sometimes' is not one of 'auto', 'always', 'never'" in err


# --- progress ----------------------------------------------------------------------------------------


def _many_files_queue(tmp_path: Path) -> Queue:
    files = dict(BASE_FILES)
    files.update({f"vllm/gen/m{i}.py": f"X = {i}\n" * 200 for i in range(400)})
    return make_queue(tmp_path, files)


def test_checkout_shows_bytes_and_files_on_a_terminal(tmp_path: Path) -> None:
    q = _many_files_queue(tmp_path)
    code, out, err = _run(q.root, "checkout", tty=("stderr",))
    assert code == 0, err
    assert re.search(r"copying vllm-0\.1\.0\.tar\.gz .*100%.*KiB / [0-9.]+ KiB", err)
    assert re.search(r"reading vllm-0\.1\.0\.tar\.gz: 406 files", err)
    assert re.search(r"importing vllm 0\.1\.0 .*406/406", err)
    assert out.startswith("work/ on ")


def test_no_progress_into_a_pipe_or_with_quiet(tmp_path: Path) -> None:
    q = _many_files_queue(tmp_path)
    code, out, err = _run(q.root, "checkout")
    assert code == 0 and err == "" and "\x1b" not in out and "\r" not in out
    q2 = _many_files_queue(tmp_path / "second")
    code, _out, err = _run(q2.root, "-q", "checkout", tty=("stderr",))
    assert code == 0 and "copying" not in err and "files" not in err and "%" not in err


def test_a_download_from_a_path_counts_its_bytes_on_a_terminal(tmp_path: Path) -> None:
    archive = make_sdist(tmp_path / "dl", "0.2.0", BASE_FILES)
    root = tmp_path / "q"
    (root / "queue").mkdir(parents=True)
    (root / "series").write_text("")
    (root / "vendor-pin.txt").write_text(f"pin {archive}#sha256={sha256(archive)}\n")
    code, _out, err = _run(root, "checkout", tty=("stderr",))
    assert code == 0 and re.search(r"copying vllm-0\.2\.0\.tar\.gz .*100%", err)
