"""One gqueue process per queue: an flock on .gqueue/lock that names its holder.

flock is released by the kernel when a holder dies, so a lock left by a killed process is
never in force; the holder record it left behind is reported as stale and replaced.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import sys
import time
from pathlib import Path

from .errors import LockedError, UsageError

DEFAULT_WAIT = 10.0
_HELD: set[int] = set()  # the descriptors of the queue locks this process holds


def held_fds() -> tuple[int, ...]:
    """The queue locks this process holds, for a child that must keep them while it runs.

    A child given these (git fast-import) holds the lock with its parent: if the parent is
    killed, the lock stays taken until the child is gone too, so the next command never meets a
    live child's temporaries (``tmp_pack_*``) and may remove whatever it finds."""
    return tuple(sorted(_HELD))


def own_file(fd: int) -> None:
    """Mark an open temporary file as owned by this process (an flock the kernel drops when the
    process dies), waiting for anyone who is looking at it (``remove_unowned``) to finish."""
    fcntl.flock(fd, fcntl.LOCK_EX)


def remove_unowned(path: Path) -> bool:
    """Remove ``path`` if no live process owns it (``own_file``); whether it was removed.

    A file a killed process left has no flock on it any more; one being written has. The lock is
    held while the file is unlinked, so an owner that had just made it and not yet locked it
    finds it gone (``os.fstat(fd).st_nlink == 0``) and makes another."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    try:
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class QueueLock:
    def __init__(self, path: Path, *, wait: float | None = None) -> None:
        self.path = path
        env = os.environ.get("GQUEUE_LOCK_WAIT")
        try:
            self.wait = float(env) if env else (DEFAULT_WAIT if wait is None else wait)
        except ValueError:
            raise UsageError(f"GQUEUE_LOCK_WAIT={env!r} is not a number of seconds") from None
        self.fd: int | None = None
        self.stale: dict[str, object] | None = None

    def _holder(self) -> dict[str, object]:
        try:
            doc = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def acquire(self) -> "QueueLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = self._holder()
                    for _ in range(20):  # the holder may have the lock but not have written its record yet
                        if holder.get("pid"):
                            break
                        time.sleep(0.01)
                        holder = self._holder()
                    os.close(fd)
                    raise LockedError(
                        f"the queue is locked by gqueue pid {holder.get('pid', '?')} on {holder.get('host', '?')} "
                        f"running '{holder.get('command', '?')}' since {holder.get('since', '?')}",
                        path=str(self.path.name),
                        hint="wait for it to finish, or set GQUEUE_LOCK_WAIT to wait longer",
                    ) from None
                time.sleep(0.05)
        previous = self._holder()
        if previous.get("pid"):
            self.stale = previous  # a holder that died without releasing its record
        record = {
            "pid": os.getpid(),
            "host": os.uname().nodename,
            "command": " ".join(["gqueue", *sys.argv[1:]])[:200],
            "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self.fd = fd
        _HELD.add(fd)
        # a process that ends in any other way than a kill lets its record go with the lock, so
        # that a record left behind always means a holder that was killed
        atexit.register(self.release)
        return self

    def release(self) -> None:
        if self.fd is not None:
            _HELD.discard(self.fd)
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
            atexit.unregister(self.release)

    def __enter__(self) -> "QueueLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
