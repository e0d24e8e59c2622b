"""YAML loading with limits: no anchors or aliases, bounded size, line numbers kept."""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import FormatError

MAX_HEADER_BYTES = 256 * 1024
MAX_SCALAR_CHARS = 64 * 1024
MAX_NODES = 20_000


def load_mapping(text: str, *, path: str, first_line: int = 1) -> tuple[dict[str, Any], dict[str, int]]:
    """Load a YAML mapping; return it with the 1-based file line of each top-level key."""
    if len(text.encode("utf-8", "surrogateescape")) > MAX_HEADER_BYTES:
        raise FormatError(f"header larger than {MAX_HEADER_BYTES} bytes", path=path, line=first_line)
    try:
        events = list(yaml.parse(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise _format_error(exc, path, first_line) from None
    nodes = 0
    for event in events:
        anchor = getattr(event, "anchor", None)
        if isinstance(event, yaml.AliasEvent) or anchor is not None:
            line = first_line + event.start_mark.line
            raise FormatError("YAML anchors and aliases are not allowed in a patch header", path=path, line=line)
        if isinstance(event, yaml.ScalarEvent):
            nodes += 1
            if len(event.value) > MAX_SCALAR_CHARS:
                line = first_line + event.start_mark.line
                raise FormatError(f"YAML scalar longer than {MAX_SCALAR_CHARS} characters", path=path, line=line)
        if nodes > MAX_NODES:
            raise FormatError("YAML header has too many values", path=path, line=first_line)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _format_error(exc, path, first_line) from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise FormatError("patch header must be a YAML mapping", path=path, line=first_line)
    lines: dict[str, int] = {}
    for key_node, _value in node.value:
        if isinstance(key_node, yaml.ScalarNode):
            lines[str(key_node.value)] = first_line + key_node.start_mark.line
    for key in data:
        if not isinstance(key, str):
            raise FormatError(f"header key {key!r} is not a string", path=path, line=first_line)
    return data, lines


def _format_error(exc: yaml.YAMLError, path: str, first_line: int) -> FormatError:
    mark = getattr(exc, "problem_mark", None)
    line = first_line + mark.line if mark is not None else first_line
    problem = getattr(exc, "problem", None) or str(exc)
    return FormatError(f"invalid YAML header: {problem}", path=path, line=line)


def dump_value(value: Any) -> str:
    """Render one value the way a hand-written header would spell it (no trailing newline)."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, allow_unicode=True, width=10_000)
    text = text.rstrip("\n")
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    return text
