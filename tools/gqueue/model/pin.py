"""vendor-pin.txt: the upstream release(s) the queue is maintained against.

One pin a line: ``LABEL SOURCE [key=value ...]`` with ``#`` comments. SOURCE is a PyPI
requirement (``vllm==0.24.0``), an archive URL/path in pip's convention
(``file:///x.tar.gz#sha256=...``) or an upstream git commit, also as pip writes it
(``git+https://host/vllm.git@<full commit id>``). Keys: ``sdist=sha256:HEX``,
``wheel=sha256:HEX``, ``wheel-file=NAME``, and ``version=`` / ``project=`` for archives
and commits whose name does not say them. The label ``pin`` names the one the stack is
built on; any other label (``next``, ``rollback``, ``stable``...) adds a pin to the drift
matrix.
"""

from __future__ import annotations

import re
from urllib.parse import unquote
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from ..errors import FormatError
from .series import split_lines

MAIN_LABEL = "pin"
_LABEL = re.compile(r"^[a-z][a-z0-9_-]*$")
_HEX = re.compile(r"^[0-9a-f]{64}$")
_EXTENSIONS = r"(\.tar\.gz|\.tar\.xz|\.tar\.bz2|\.tgz|\.zip)"
_ARCHIVE = re.compile(r"^(?P<stem>.+?)-(?P<version>\d[^-/]*?)" + _EXTENSIONS + "$")
_DEBIAN = re.compile(r"^(?P<stem>[a-z0-9][a-z0-9.+-]*)_(?P<version>\d[^_/]*?)\.orig" + _EXTENSIONS + "$")
_GITHUB = re.compile(r"^https://(?:codeload\.)?github\.com/[^/]+/(?P<repo>[^/]+)/(?:archive|tar\.gz|zip)/")
_COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+_~-]*$")
_PROJECT = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
OPTIONS = ("sdist", "wheel", "wheel-file", "version", "project")


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
    def kind(self) -> str:
        """'index' (name==version), 'archive' (a URL or path) or 'git' (an upstream commit)."""
        if self.url is None:
            return "index"
        return "git" if self.url.startswith("git+") else "archive"

    @property
    def commit(self) -> str | None:
        """A git pin's full commit id."""
        return self.url.rsplit("@", 1)[1] if self.kind == "git" and self.url else None

    @property
    def git_url(self) -> str | None:
        """A git pin's repository URL (without 'git+' and '@commit')."""
        return self.url[len("git+") :].rsplit("@", 1)[0] if self.kind == "git" and self.url else None

    @property
    def identity(self) -> str | None:
        """What the pinned tree is verified by: 'git:<commit id>' or 'sha256:<sdist digest>'
        (None for an index pin whose hash is not recorded yet)."""
        if self.kind == "git":
            return f"git:{self.commit}"
        sha = self.sdist_sha256
        return f"sha256:{sha}" if sha else None

    @property
    def tag_name(self) -> str:
        version = self.version.replace("~", "_")  # a Debian '~' is not allowed in a git ref
        if self.kind == "git":  # two pins on one version= are two commits
            return f"gqueue/pin/{self.project}-{version}-g{self.commit}"
        return f"gqueue/pin/{self.project}-{version}"

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
            if spec in (pin.label, pin.source, pin.version, pin.describe(), pin.commit, pin.identity):
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


def parse_source(source: str, *, options: dict[str, str] | None = None, path: str = "vendor-pin.txt",
                 line: int | None = 0) -> tuple[str, str, str | None]:
    """(project, version, url) of a pin source; ``options`` are the line's key=value words
    (``version=`` and ``project=`` name what an archive's or commit's name does not)."""
    options = options or {}
    if source.startswith("git+"):
        return _parse_git(source, options, path=path, line=line)
    if "://" in source or source.startswith(("/", "./", "../")):
        url = source
        if source.startswith(("/", "./", "../")):
            url = "file://" + source if source.startswith("/") else source
        location = source.split("#", 1)[0]
        filename = unquote(location.rstrip("/").rsplit("/", 1)[-1])  # file:///x/a%2Bdfsg.tar.xz names a+dfsg
        match = _ARCHIVE.match(filename) or _DEBIAN.match(filename)
        github = _GITHUB.match(location)
        project = options.get("project") or (match.group("stem").replace("_", "-").lower() if match else None)
        project = project or (github.group("repo").lower() if github else None)
        version = options.get("version") or (match.group("version") if match else None)
        if not (project and version):
            missing = "version=X.Y.Z" if project else "project=NAME version=X.Y.Z" if not version else "project=NAME"
            raise FormatError(
                f"cannot read a project and version from archive name '{filename}'", path=path, line=line,
                hint=f"name them on the line: '{missing}' after the URL",
            )
        if "#sha256=" not in source:
            raise FormatError("an archive pin needs '#sha256=<hex>' after its URL", path=path, line=line)
        digest = source.split("#sha256=", 1)[1]
        if not _HEX.match(digest):
            raise FormatError(f"'{digest}' is not a sha256 hex digest", path=path, line=line)
        _check_name_and_version(project, version, path=path, line=line)
        return project.lower(), version, url
    if "version" in options or "project" in options:
        raise FormatError("'version=' and 'project=' are for archive and git pins; "
                          "an index pin names them as name==X.Y.Z", path=path, line=line)
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


def _check_name_and_version(project: str, version: str, *, path: str, line: int | None) -> None:
    if not _PROJECT.match(project):
        raise FormatError(f"invalid project name '{project}'", path=path, line=line)
    if not _VERSION.match(version) or ".." in version or version.endswith((".", ".lock")):
        raise FormatError(f"invalid version '{version}' (letters, digits and '.+_~-')", path=path, line=line)


def _parse_git(source: str, options: dict[str, str], *, path: str, line: int | None) -> tuple[str, str, str]:
    """``git+URL@COMMIT``: a repository URL and the full id of one of its commits."""
    location, at, commit = source[len("git+") :].rpartition("@")
    if not at or "://" not in location or "/" in commit:
        raise FormatError(f"a git pin is 'git+URL@<full commit id>', not '{source}'", path=path, line=line)
    if "#" in source:
        raise FormatError("a git pin takes no '#' fragment: it is verified by its commit id", path=path, line=line)
    if not _COMMIT.match(commit):
        raise FormatError(
            f"'{commit}' is not a full commit id: a git pin names 40 (or 64) lowercase hex digits, "
            "not a branch, tag or abbreviation", path=path, line=line,
            hint="'git rev-parse BRANCH' in the upstream repository prints it",
        )
    if "sdist" in options:
        raise FormatError("a git pin is verified by its commit id, not 'sdist='", path=path, line=line)
    repo_name = location.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    project = options.get("project") or repo_name
    version = options.get("version")
    if not version:
        raise FormatError("a git pin needs 'version=X.Y.Z' (the release its tree is closest to)",
                          path=path, line=line)
    _check_name_and_version(project, version, path=path, line=line)
    return project.lower(), version, source


def parse_options(words: list[str], *, path: str = "vendor-pin.txt", line: int | None = 0) -> dict[str, str]:
    """The ``key=value`` words after a pin's source."""
    options: dict[str, str] = {}
    for word in words:
        key, eq, value = word.partition("=")
        if not eq or key not in OPTIONS:
            raise FormatError(f"unknown pin option '{word}'", path=path, line=line)
        if key in options:
            raise FormatError(f"pin option '{key}' is given twice", path=path, line=line)
        if key in ("sdist", "wheel") and not (value.startswith("sha256:") and _HEX.match(value[7:])):
            raise FormatError(f"'{key}' must be sha256:<64 hex digits>", path=path, line=line)
        if key == "wheel-file" and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+!-]*\.whl", value):
            raise FormatError(f"'wheel-file' must be a wheel's file name, not '{value}'", path=path, line=line)
        options[key] = value
    return options


def pin_from_spec(label: str, spec: str, *, path: str = "--pin", line: int = 0) -> Pin:
    """A pin given on the command line: 'SOURCE [key=value ...]', as on a vendor-pin.txt line
    (``line``: the one it will have there; errors name ``path`` alone)."""
    words = spec.split()
    if not words:
        raise FormatError("an empty pin", path=path)
    options = parse_options(words[1:], path=path, line=None)
    project, version, url = parse_source(words[0], options=options, path=path, line=None)
    return Pin(label, words[0], project, version, url, options, line)


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
        options = parse_options(rest, path=path, line=number)
        project, version, url = parse_source(source, options=options, path=path, line=number)
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
