"""YAML loading with limits: no anchors or aliases, bounded size, line numbers kept."""

from __future__ import annotations

from typing import Any

from ..errors import FormatError

MAX_HEADER_BYTES = 256 * 1024
MAX_SCALAR_CHARS = 64 * 1024
MAX_NODES = 20_000
MAX_DEPTH = 32  # nesting of mappings and sequences; PyYAML's composer recurses per level


def _yaml() -> Any:
    """PyYAML, imported on first use (~8 ms of start-up a command that parses nothing saves)."""
    import yaml

    return yaml


def load_mapping(text: str, *, path: str, first_line: int = 1) -> tuple[dict[str, Any], dict[str, int]]:
    """Load a YAML mapping; return it with the 1-based file line of each top-level key.

    One pass over the events checks the limits and finds the key lines; then one load.
    """
    if len(text.encode("utf-8", "surrogateescape")) > MAX_HEADER_BYTES:
        raise FormatError(f"header larger than {MAX_HEADER_BYTES} bytes", path=path, line=first_line)
    yaml = _yaml()
    Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # noqa: N806 - PyYAML's name
    lines: dict[str, int] = {}
    nodes = 0
    depth = 0
    expect_key = False
    try:
        for event in yaml.parse(text, Loader=Loader):
            line = first_line + event.start_mark.line
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise FormatError("YAML anchors and aliases are not allowed in a patch header", path=path, line=line)
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if depth == 1 and not expect_key:
                    expect_key = True  # a collection value of a top-level key
                elif depth == 1:
                    raise FormatError("header keys must be plain strings", path=path, line=line)
                depth += 1
                if depth > MAX_DEPTH:
                    raise FormatError(f"YAML header nested deeper than {MAX_DEPTH} levels", path=path, line=line)
                if depth == 1:
                    if not isinstance(event, yaml.MappingStartEvent):
                        raise FormatError("patch header must be a YAML mapping", path=path, line=line)
                    expect_key = True
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.ScalarEvent):
                nodes += 1
                if len(event.value) > MAX_SCALAR_CHARS:
                    raise FormatError(f"YAML scalar longer than {MAX_SCALAR_CHARS} characters", path=path, line=line)
                if depth == 1:
                    if expect_key:
                        lines.setdefault(event.value, line)
                    expect_key = not expect_key
                elif depth == 0:
                    raise FormatError("patch header must be a YAML mapping", path=path, line=line)
            if nodes > MAX_NODES:
                raise FormatError("YAML header has too many values", path=path, line=first_line)
        data = yaml.load(text, Loader=Loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise _format_error(exc, path, first_line) from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise FormatError("patch header must be a YAML mapping", path=path, line=first_line)
    for key in data:
        if not isinstance(key, str):
            raise FormatError(f"header key {key!r} is not a string", path=path, line=first_line)
    return data, lines


def _format_error(exc: Any, path: str, first_line: int) -> FormatError:
    mark = getattr(exc, "problem_mark", None)
    line = first_line + mark.line if mark is not None else first_line
    problem = getattr(exc, "problem", None) or str(exc)
    return FormatError(f"invalid YAML header: {problem}", path=path, line=line)


def dump_value(value: Any) -> str:
    """Render one value the way a hand-written header would spell it (no trailing newline)."""
    text = _yaml().safe_dump(value, default_flow_style=True, sort_keys=False, allow_unicode=True, width=10_000)
    text = text.rstrip("\n")
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    return text
