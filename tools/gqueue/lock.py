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
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

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
        # a process that ends in any other way than a kill lets its record go with the lock, so
        # that a record left behind always means a holder that was killed
        atexit.register(self.release)
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
            atexit.unregister(self.release)

    def __enter__(self) -> "QueueLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
