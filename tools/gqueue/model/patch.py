"""A patch file: an optional YAML header between ``---`` and ``...`` lines, then a unified diff.

``format_patch(parse_patch(data)) == data`` byte for byte: the header is kept as written
and only ever edited line by line.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any


from ..errors import FormatError
from .meta import SCHEMA, PatchMeta, check_meta
from .safeyaml import MAX_DEPTH, MAX_HEADER_BYTES, MAX_NODES, MAX_SCALAR_CHARS, load_mapping
from .series import split_lines

if TYPE_CHECKING:
    from ..headercache import HeaderCache

HEADER_START = b"---\n"
HEADER_END = b"...\n"
CANONICAL_ORDER = tuple(SCHEMA)


@dataclass(frozen=True)
class PatchFile:
    name: str
    header: bytes
    body: bytes
    meta: PatchMeta
    file: str = ""  # its path under queue/ when not ``name`` (a variant: variants/<dir>/NAME)

    @property
    def stored_as(self) -> str:
        """The file under queue/ this patch was read from (and is written back to)."""
        return self.file or self.name

    @property
    def body_offset_line(self) -> int:
        """1-based file line where the body starts."""
        return self.header.count(b"\n") + 1


def split_header(data: bytes) -> tuple[bytes, bytes]:
    if not data.startswith(HEADER_START):
        return b"", data
    pos = len(HEADER_START)
    while pos <= len(data):
        end = data.find(b"\n", pos)
        line = data[pos:] if end < 0 else data[pos : end + 1]
        if line == HEADER_END:
            return data[: pos + len(line)], data[pos + len(line) :]
        if end < 0:
            break
        pos = end + 1
    return b"", data  # unterminated: reported by parse_patch


def parse_patch(data: bytes, *, name: str, path: str | None = None, require_header: bool = True,
                cache: "HeaderCache | None" = None) -> PatchFile:
    """Split and parse a patch file; ``cache`` may answer for a header it has parsed before."""
    where = path or name
    check_opening(data, path=where)
    header, body = split_header(data)
    if data.startswith(HEADER_START) and not header:
        raise unclosed_header(data, path=where)
    if not header:
        if require_header:
            raise FormatError("patch has no gqueue header (a YAML block between '---' and '...')", path=where, line=1)
        return PatchFile(name, b"", data, PatchMeta({}, {}))
    text = header_text(header, path=where)
    if cache is not None:
        raw, lines = cache.load(load_mapping, text, path=where, first_line=2)
    else:
        raw, lines = load_mapping(text, path=where, first_line=2)
    meta = PatchMeta(raw, lines)
    check_meta(meta, path=where, first_line=1)
    return PatchFile(name, header, body, meta)


def unclosed_header(data: bytes, *, path: str) -> FormatError:
    """The error for a header opened with '---' and no line '...' after it: a near miss, or none."""
    if data.endswith(b"\n..."):
        return FormatError("the header's closing '...' line lacks its newline at the end of the file",
                           path=path, line=data.count(b"\n") + 1)
    for number, line in enumerate(data.split(b"\n")[1:], start=2):
        if line.rstrip() == b"..." and line != b"...":
            return FormatError("the header's closing line must be exactly '...' (it has trailing whitespace)",
                               path=path, line=number)
    return FormatError("patch header opened with '---' is never closed with '...'", path=path, line=1)


def check_opening(data: bytes, *, path: str) -> None:
    """Refuse a header opening that would otherwise read as no header at all."""
    if data.startswith(b"---\r\n"):
        raise FormatError("patch file has CRLF (Windows) line endings; convert it to LF", path=path, line=1)
    if data.startswith(b"\xef\xbb\xbf---"):
        raise FormatError("patch file starts with a UTF-8 byte order mark; remove it", path=path, line=1)


def header_text(header: bytes, *, path: str) -> str:
    """The YAML between the delimiter lines of a header, refused if it is not UTF-8 or hides line breaks."""
    try:
        text = header[len(HEADER_START) : -len(HEADER_END)].decode("utf-8")
    except UnicodeDecodeError as exc:
        line = header[: exc.start].count(b"\n") + 1
        raise FormatError("patch header is not valid UTF-8", path=path, line=line) from None
    for char, what in (("\r", "a carriage return"), ("\x85", "U+0085 (next line)"),
                       ("\u2028", "U+2028 (line separator)"), ("\u2029", "U+2029 (paragraph separator)")):
        if char in text:  # YAML reads each as a line break that editors do not show
            line = text[: text.index(char)].count("\n") + 2
            raise FormatError(f"patch header contains {what}", path=path, line=line)
    return text


def format_patch(patch: PatchFile) -> bytes:
    return patch.header + patch.body


def with_body(patch: PatchFile, body: bytes) -> PatchFile:
    return replace(patch, body=body)


@functools.lru_cache(maxsize=None)
def _block_dumper() -> Any:
    """The header dumper: strings with newlines as blocks, flat lists in flow style.

    Built on first use: PyYAML costs ~8 ms to import, and a command whose headers all come
    from the header cache never needs it.
    """
    import yaml

    return _dumper_on(yaml.SafeDumper)


@functools.lru_cache(maxsize=None)
def _fast_dumper() -> Any:
    """``_block_dumper`` on libyaml's emitter (None without libyaml); see ``_dump``."""
    import yaml

    base = getattr(yaml, "CSafeDumper", None)
    return None if base is None else _dumper_on(base)


def _dumper_on(base: type) -> Any:
    import yaml

    def str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        if "\n" in value:
            return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
        return dumper.represent_scalar("tag:yaml.org,2002:str", value)

    def list_representer(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.SequenceNode:
        flow = all(not isinstance(v, (dict, list)) for v in value)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow)

    # a value met twice is written twice, never as an anchor and alias (which headers refuse)
    dumper: Any = type("BlockDumper", (base,), {"ignore_aliases": lambda self, data: True})
    dumper.add_representer(str, str_representer)
    dumper.add_representer(list, list_representer)
    return dumper


def _dump(fields: dict[str, Any]) -> str:
    """``fields`` as YAML text, as PyYAML's own (Python) emitter writes it.

    libyaml's emitter writes the same text about five times faster (300 imported headers:
    ~0.05 s against ~0.22 s) except in double-quoted scalars, where it breaks long lines at
    other places and escapes characters outside the Basic Multilingual Plane: a text it writes
    with no '"' in it is taken, any other is written again by the Python emitter.
    tests/test_model.py compares the two.
    """
    import yaml

    def emit(dumper: Any) -> str:
        text: str = yaml.dump(fields, Dumper=dumper, sort_keys=False, allow_unicode=True, width=100,
                              default_flow_style=False)
        return text

    fast = _fast_dumper()
    if fast is not None:
        text = emit(fast)
        if '"' not in text:
            return text
    return emit(_block_dumper())


def render_field(key: str, value: Any) -> str:
    """One top-level header entry as YAML text, ending in a newline."""
    import yaml

    return yaml.dump(
        {key: value}, Dumper=_block_dumper(), sort_keys=False, allow_unicode=True, width=100, default_flow_style=False
    )


def render_header(fields: dict[str, Any]) -> bytes:
    """The header of ``fields`` in the canonical key order: what ``render_field`` makes of each
    key, joined, written by one dump (a dump of each key costs PyYAML's set-up each time)."""
    return _render_ordered(_in_canonical_order(fields))


def _render_ordered(ordered: dict[str, Any]) -> bytes:
    text = _dump(ordered) if ordered else ""
    if text.endswith("\n...\n"):  # the dump's own document end (after a value kept with its blank lines)
        text = text[: -len("...\n")]
    return HEADER_START + text.encode("utf-8") + HEADER_END


def _in_canonical_order(fields: dict[str, Any]) -> dict[str, Any]:
    ordered = {k: fields[k] for k in CANONICAL_ORDER if k in fields}
    ordered.update((k, v) for k, v in fields.items() if k not in SCHEMA)
    return ordered


def new_patch(name: str, fields: dict[str, Any], body: bytes) -> PatchFile:
    """The patch of ``fields`` (written as ``render_header`` writes them) over ``body``.

    PyYAML's safe dump and load give back the plain values they were given (strings, ints,
    bools, None, finite floats, lists and string-keyed mappings of them), so the header just
    written is not parsed again: its meta is a copy of the fields, each key's line found at
    column 0 of the text, and ``check_meta`` judges it as it judges a parsed header. Fields
    of any other type, near the reader's limits, or whose keys the text does not show in
    order, one a line, are parsed back as any header is (the reader's checks and messages).
    tests/test_properties.py compares the two ways.
    """
    ordered = _in_canonical_order(fields)
    header = _render_ordered(ordered)
    meta = _meta_as_written(header, ordered)
    if meta is None:
        return parse_patch(header + body, name=name)
    check_meta(meta, path=name, first_line=1)
    return PatchFile(name, header, body, meta)


def _meta_as_written(header: bytes, ordered: dict[str, Any]) -> PatchMeta | None:
    """``ordered``'s meta with the line of each key in ``header``, or None where that cannot
    be told without parsing the header."""
    if len(header) > MAX_HEADER_BYTES // 2:
        return None
    budget = [MAX_NODES // 2]
    raw = _plain_copy(ordered, 1, budget)
    if not isinstance(raw, dict):
        return None
    try:
        text = header_text(header, path="")
    except FormatError:  # parsed back, for the message that names the file
        return None
    keys = iter(raw)
    key_lines: dict[str, int] = {}
    for number, line in enumerate(text.split("\n"), start=2):
        if line[:1] in ("", " ", "-", "#"):  # a value's own lines, a list's items, a blank line
            continue
        key = next(keys, None)
        if key is None or not line.startswith(f"{key}:"):
            return None
        key_lines[key] = number
    return PatchMeta(raw, key_lines) if len(key_lines) == len(raw) else None


_PLAIN_SCALARS = (str, int, bool, type(None), float)


def _plain_copy(value: Any, depth: int, budget: list[int]) -> Any:
    """A copy of ``value`` as a safe YAML load would give it back, or ``_NOT_PLAIN`` when that
    is not certain (another type, a scalar or a nesting near the reader's limits)."""
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH // 2:
        return _NOT_PLAIN
    kind = type(value)
    if kind is dict:
        out: dict[Any, Any] = {}
        for key, item in value.items():
            budget[0] -= 1
            copied = _plain_copy(item, depth + 1, budget)
            if type(key) is not str or len(key) > 100 or copied is _NOT_PLAIN:
                return _NOT_PLAIN
            out[key] = copied
        return out
    if kind is list:
        items = [_plain_copy(item, depth + 1, budget) for item in value]
        return _NOT_PLAIN if any(item is _NOT_PLAIN for item in items) else items
    if kind not in _PLAIN_SCALARS:
        return _NOT_PLAIN
    if kind is str and len(value) > MAX_SCALAR_CHARS // 2:
        return _NOT_PLAIN
    if kind is int and abs(value) >= 1 << 63:
        return _NOT_PLAIN
    if kind is float and not math.isfinite(value):
        return _NOT_PLAIN
    return value


_NOT_PLAIN = object()


def with_fields(patch: PatchFile, updates: dict[str, Any]) -> PatchFile:
    """Set top-level keys, touching only their own lines; ``None`` as a value removes a key."""
    if not patch.header:
        fields = {k: v for k, v in updates.items() if v is not None}
        return replace(new_patch(patch.name, fields, patch.body), file=patch.file)
    lines = split_lines(patch.header.decode("utf-8"))
    for key, value in updates.items():
        start, end = _key_extent(lines, key)
        rendered = [] if value is None else render_field(key, value).splitlines(keepends=True)
        if start is None:
            lines[-1:-1] = rendered
        else:
            lines[start:end] = rendered
    header = "".join(lines).encode("utf-8")
    return replace(parse_patch(header + patch.body, name=patch.name), file=patch.file)


def _key_extent(lines: list[str], key: str) -> tuple[int | None, int]:
    """Index range of a top-level key's lines inside the header lines (delimiters included)."""
    spelled = re.compile(rf"""({re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}') *:(\s|$)""")
    for i in range(1, len(lines) - 1):
        if spelled.match(lines[i]):
            j = i + 1
            while j < len(lines) - 1 and (lines[j][:1] in (" ", "\t", "-", "\n") or lines[j].startswith("#")):
                if lines[j].startswith("-") and not lines[i].rstrip().endswith(":"):
                    break
                j += 1
            while j > i + 1 and (not lines[j - 1].strip() or lines[j - 1].startswith("#")):
                j -= 1  # blank and comment lines after the value belong to what follows
            return i, j
    return None, len(lines) - 1
