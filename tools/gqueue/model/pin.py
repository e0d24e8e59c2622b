"""vendor-pin.txt: the upstream release(s) the queue is maintained against.

One pin a line: ``LABEL SOURCE [key=value ...]`` with ``#`` comments. SOURCE is a PyPI
requirement (``vllm==0.24.0``) or an archive URL/path in pip's convention
(``file:///x.tar.gz#sha256=...``). Keys: ``sdist=sha256:HEX``, ``wheel=sha256:HEX``,
``wheel-file=NAME``. The label ``pin`` names the one the stack is built on; any other
label (``next``, ``rollback``, ``stable``...) adds a pin to the drift matrix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from ..errors import FormatError
from .series import split_lines

MAIN_LABEL = "pin"
_LABEL = re.compile(r"^[a-z][a-z0-9_-]*$")
_HEX = re.compile(r"^[0-9a-f]{64}$")
_ARCHIVE = re.compile(r"^(?P<stem>.+?)-(?P<version>\d[^-/]*?)(\.tar\.gz|\.tar\.xz|\.tgz|\.zip)$")


@dataclass(frozen=True)
class Pin:
    label: str
    source: str
    project: str
    version: str
    url: str | None = None  # archive URL or path; None for an index requirement
    options: dict[str, str] = field(default_factory=dict)
    line: int = 0

    @property
    def sdist_sha256(self) -> str | None:
        return _hash_of(self.options.get("sdist")) or _url_hash(self.url)

    @property
    def wheel_sha256(self) -> str | None:
        return _hash_of(self.options.get("wheel"))

    @property
    def tag_name(self) -> str:
        return f"gqueue/pin/{self.project}-{self.version}"

    def describe(self) -> str:
        return f"{self.project}=={self.version}" if self.url is None else self.source


def _hash_of(value: str | None) -> str | None:
    if value and value.startswith("sha256:"):
        return value[len("sha256:") :]
    return None


def _url_hash(url: str | None) -> str | None:
    if url and "#sha256=" in url:
        return url.split("#sha256=", 1)[1]
    return None


@dataclass(frozen=True)
class PinFile:
    lines: tuple[str, ...]
    pins: tuple[Pin, ...]
    path: str = "vendor-pin.txt"

    @property
    def main(self) -> Pin:
        for pin in self.pins:
            if pin.label == MAIN_LABEL:
                return pin
        raise FormatError(f"no '{MAIN_LABEL}' line names the pinned release", path=self.path)

    def text(self) -> str:
        return "".join(self.lines)

    def find(self, spec: str) -> Pin | None:
        for pin in self.pins:
            if spec in (pin.label, pin.source, pin.version, pin.describe()):
                return pin
        return None

    def with_line(self, pin: Pin) -> "PinFile":
        """Replace the line of the pin with the same label, or append one."""
        rendered = format_pin_line(pin)
        lines = list(self.lines)
        for existing in self.pins:
            if existing.label == pin.label:
                lines[existing.line - 1] = rendered
                break
        else:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            lines.append(rendered)
        return parse_pins("".join(lines), path=self.path)


_SIMPLE_PIN = re.compile(r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([0-9][0-9A-Za-z.+!_-]*)\Z")


def format_pin_line(pin: Pin) -> str:
    opts = "".join(f" {k}={v}" for k, v in pin.options.items())
    return f"{pin.label} {pin.source}{opts}\n"


def parse_source(source: str, *, path: str = "vendor-pin.txt", line: int = 0) -> tuple[str, str, str | None]:
    """(project, version, url) of a pin source."""
    if "://" in source or source.startswith(("/", "./", "../")):
        url = source
        if source.startswith(("/", "./", "../")):
            url = "file://" + source if source.startswith("/") else source
        location = source.split("#", 1)[0]
        filename = location.rstrip("/").rsplit("/", 1)[-1]
        match = _ARCHIVE.match(filename)
        if not match:
            raise FormatError(
                f"cannot read a project and version from archive name '{filename}'", path=path, line=line
            )
        if "#sha256=" not in source:
            raise FormatError("an archive pin needs '#sha256=<hex>' after its URL", path=path, line=line)
        digest = source.split("#sha256=", 1)[1]
        if not _HEX.match(digest):
            raise FormatError(f"'{digest}' is not a sha256 hex digest", path=path, line=line)
        return match.group("stem").replace("_", "-").lower(), match.group("version"), url
    simple = _SIMPLE_PIN.match(source)
    if simple:  # the common 'name==X.Y.Z' without packaging.requirements (10 ms of start-up)
        try:
            return simple.group(1).lower(), str(Version(simple.group(2))), None
        except InvalidVersion:
            raise FormatError(f"invalid version in '{source}'", path=path, line=line) from None
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(source)
    except InvalidRequirement as exc:
        raise FormatError(f"invalid pin '{source}': {exc}", path=path, line=line) from None
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
        raise FormatError(f"a pin must name one exact version (name==X.Y.Z), not '{source}'", path=path, line=line)
    try:
        version = str(Version(specs[0].version))
    except InvalidVersion:
        raise FormatError(f"invalid version in '{source}'", path=path, line=line) from None
    return req.name.lower(), version, None


def parse_pins(text: str, *, path: str = "vendor-pin.txt") -> PinFile:
    lines = tuple(split_lines(text))
    pins: list[Pin] = []
    labels: set[str] = set()
    for number, raw in enumerate(lines, start=1):
        content = raw.split("#", 1)[0] if not re.search(r"#sha256=", raw) else _strip_comment(raw)
        words = content.split()
        if not words:
            continue
        if len(words) < 2:
            raise FormatError("expected 'LABEL SOURCE [key=value ...]'", path=path, line=number)
        label, source, *rest = words
        if not _LABEL.match(label):
            raise FormatError(f"invalid pin label '{label}'", path=path, line=number)
        if label in labels:
            raise FormatError(f"pin label '{label}' is used twice", path=path, line=number)
        labels.add(label)
        options: dict[str, str] = {}
        for word in rest:
            key, eq, value = word.partition("=")
            if not eq or key not in ("sdist", "wheel", "wheel-file"):
                raise FormatError(f"unknown pin option '{word}'", path=path, line=number)
            if key in options:
                raise FormatError(f"pin option '{key}' is given twice", path=path, line=number)
            if key in ("sdist", "wheel") and not (value.startswith("sha256:") and _HEX.match(value[7:])):
                raise FormatError(f"'{key}' must be sha256:<64 hex digits>", path=path, line=number)
            if key == "wheel-file" and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+!-]*\.whl", value):
                raise FormatError(f"'wheel-file' must be a wheel's file name, not '{value}'", path=path, line=number)
            options[key] = value
        project, version, url = parse_source(source, path=path, line=number)
        fragment, option = _url_hash(url), _hash_of(options.get("sdist"))
        if fragment and option and fragment != option:
            raise FormatError("the URL's '#sha256=' and 'sdist=sha256:' name different hashes", path=path, line=number)
        pins.append(Pin(label, source, project, version, url, options, number))
    result = PinFile(lines, tuple(pins), path)
    if pins:
        result.main  # noqa: B018 - validates that a main pin exists
    return result


def _strip_comment(raw: str) -> str:
    """Drop a trailing comment but keep '#sha256=' fragments of URLs."""
    out = []
    for word in raw.split():
        if word.startswith("#"):
            break
        out.append(word)
    return " ".join(out)
