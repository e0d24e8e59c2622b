"""The queue on disk: series, queue/, vendor-pin.txt. Reads are parsed, writes are atomic."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from .errors import FormatError, StateError, UsageError
from .fsutil import atomic_delete, atomic_write, atomic_write_many
from .headercache import HeaderCache
from .model.patch import PatchFile, format_patch, header_text, parse_patch
from .model.pin import PinFile, parse_pins
from .model.series import Series, parse_series
from .model.variants import VARIANTS, Candidate, Resolution, resolve, variant_file

SERIES = "series"
QUEUE = "queue"
PIN = "vendor-pin.txt"
WORK = "work"
STATE = ".gqueue"  # gqueue's own state beside the queue (journal, lock, caches, saved edits)


@dataclass(frozen=True)
class Store:
    root: Path
    headers: HeaderCache = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", HeaderCache(self.root / STATE / "cache" / "headers.json"))

    @classmethod
    def find(cls, start: Path) -> "Store":
        start = start.resolve()
        for candidate in (start, *start.parents):
            if (candidate / SERIES).is_file() and (candidate / PIN).is_file():
                return cls(candidate)
            if (candidate / SERIES).is_file() and (candidate / QUEUE).is_dir():
                return cls(candidate)
        raise UsageError(
            f"no gqueue queue here or above ({start.name}): 'series' and 'vendor-pin.txt' not found",
            hint="run 'gqueue init' or pass -C DIR",
        )

    @property
    def series_path(self) -> Path:
        return self.root / SERIES

    @property
    def queue_dir(self) -> Path:
        return self.root / QUEUE

    @property
    def pin_path(self) -> Path:
        return self.root / PIN

    @property
    def work_dir(self) -> Path:
        return self.root / WORK

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def patch_path(self, name: str) -> Path:
        if "/" in name and ".." in name.split("/") or name.startswith("/"):
            raise UsageError(f"'{name}' is not a patch name: it leads out of {QUEUE}/")
        return self.queue_dir / name

    # reading ---------------------------------------------------------------
    def read_series(self) -> Series:
        try:
            raw = self.series_path.read_bytes()
        except FileNotFoundError:
            raise StateError("no series file", path=SERIES) from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError("series is not valid UTF-8", path=SERIES, line=raw[: exc.start].count(b"\n") + 1) from None
        return parse_series(text, path=SERIES)

    def read_pins(self) -> PinFile:
        try:
            raw = self.pin_path.read_bytes()  # bytes: text mode would turn CRLF into LF on a rewrite
        except FileNotFoundError:
            raise StateError("no vendor-pin.txt", path=PIN) from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError("vendor-pin.txt is not valid UTF-8", path=PIN, line=raw[: exc.start].count(b"\n") + 1) from None
        return parse_pins(text, path=PIN)

    def read_patch(self, name: str, *, line: int | None = None) -> PatchFile:
        path = self.patch_path(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise FormatError(f"series names '{name}' but {QUEUE}/{name} does not exist", path=SERIES, line=line) from None
        except IsADirectoryError:
            raise FormatError(f"{QUEUE}/{name} is a directory", path=SERIES, line=line) from None
        return parse_patch(data, name=name, path=f"{QUEUE}/{name}", cache=self.headers)

    def variant_files(self, name: str) -> list[str]:
        """The variants of entry ``name`` (paths under queue/: ``variants/<dir>/NAME``), sorted."""
        root = self.queue_dir / VARIANTS
        try:
            folders = sorted(os.listdir(root))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [variant_file(f, name) for f in folders if not f.startswith(".") and (root / f / name).is_file()]

    def read_file(self, file: str, name: str) -> PatchFile:
        """The patch file ``queue/<file>`` read as series entry ``name`` (a variant keeps its path)."""
        data = self.patch_path(file).read_bytes()
        patch = parse_patch(data, name=name, path=f"{QUEUE}/{file}", cache=self.headers)
        return patch if file == name else replace(patch, file=file)

    def resolve(self, name: str, version: str, *, line: int | None = None) -> tuple[Resolution, PatchFile | None]:
        """The file entry ``name`` uses on release ``version`` (model/variants.py) and that file
        read, or None where the patch is not carried on it."""
        variants = self.variant_files(name)
        if not variants:
            patch = self.read_patch(name, line=line)
            found = replace(resolve(name, version, [candidate(patch)]), patch_id=patch.meta.id)
            return found, patch if found.carried else None
        files = ([name] if self.patch_path(name).is_file() else []) + variants
        patches = {f: self.read_file(f, name) for f in files}
        found = resolve(name, version, [candidate(patches[f]) for f in files])
        found = replace(found, patch_id=patches[files[0]].meta.id)
        return found, patches[found.file] if found.file is not None else None

    def read_all(self) -> tuple[Series, list[PatchFile]]:
        series = self.read_series()
        patches = [self.read_patch(e.name, line=e.line) for e in series.entries]
        self.headers.save()
        return series, patches

    # writing ---------------------------------------------------------------
    def write_series(self, series: Series) -> None:
        atomic_write(self.series_path, series.text().encode("utf-8"))

    def write_pins(self, pins: PinFile) -> None:
        atomic_write(self.pin_path, pins.text().encode("utf-8"))

    def write_patch(self, patch: PatchFile) -> None:
        atomic_write(self.patch_path(patch.stored_as), format_patch(patch))
        self.remember_header(patch)

    def write_patches(self, patches: list[PatchFile]) -> None:
        """``write_patch`` of each, their syncs batched (fsutil.atomic_write_many)."""
        atomic_write_many((self.patch_path(p.stored_as), format_patch(p)) for p in patches)
        for patch in patches:
            self.remember_header(patch)

    def remember_header(self, patch: PatchFile) -> None:
        """Put a patch's parsed header (every PatchFile is made by parsing its header) in the
        header cache, so that the next read of the file just written does not parse it again."""
        if patch.header:
            text = header_text(patch.header, path=f"{QUEUE}/{patch.stored_as}")
            self.headers.remember(text, patch.meta.raw, patch.meta.key_lines, first_line=2)

    def delete_patch(self, name: str) -> None:
        atomic_delete(self.patch_path(name))


def candidate(patch: PatchFile) -> Candidate:
    """What resolution needs of a patch file's header."""
    return Candidate(patch.stored_as, patch.meta.vllm_spec, patch.meta.get("retired"), patch.meta.line_of("applies_to"))
