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


def load_mapping(text: str, *, path: str, first_line: int = 1,
                 what: str = "patch header") -> tuple[dict[str, Any], dict[str, int]]:
    """Load a YAML mapping; return it with the 1-based file line of each top-level key.

    ``what`` names the document in messages ("patch header", "profile").

    One pass over the events checks the limits and finds the key lines; then one load.
    """
    if len(text.encode("utf-8", "surrogateescape")) > MAX_HEADER_BYTES:
        raise FormatError(f"header larger than {MAX_HEADER_BYTES} bytes", path=path, line=first_line)
    yaml = _yaml()
    Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # noqa: N806 - PyYAML's name
    lines: dict[str, int] = {}
    nodes = 0
    # One frame per open collection: [is_mapping, next node is a key, {key: line} seen in it].
    frames: list[list[Any]] = []
    resolver = yaml.resolver.Resolver()
    try:
        for event in yaml.parse(text, Loader=Loader):
            line = first_line + event.start_mark.line
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise FormatError(f"YAML anchors and aliases are not allowed in a {what}", path=path, line=line)
            if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                frames.pop()
                continue
            if not isinstance(event, (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                continue
            is_key = bool(frames) and frames[-1][0] and frames[-1][1]
            if frames and frames[-1][0]:
                frames[-1][1] = not frames[-1][1]
            if isinstance(event, yaml.ScalarEvent):
                nodes += 1
                if nodes > MAX_NODES:
                    raise FormatError("YAML header has too many values", path=path, line=first_line)
                if len(event.value) > MAX_SCALAR_CHARS:
                    raise FormatError(f"YAML scalar longer than {MAX_SCALAR_CHARS} characters", path=path, line=line)
                if not frames:
                    raise FormatError(f"{what} must be a YAML mapping", path=path, line=line)
                if is_key:
                    tag = event.tag if event.tag not in (None, "!") else resolver.resolve(
                        yaml.ScalarNode, event.value, event.implicit)
                    if len(frames) == 1 and tag not in ("tag:yaml.org,2002:str", "tag:yaml.org,2002:merge"):
                        raise FormatError(f"header key '{event.value}' is not a string", path=path, line=line)
                    seen = frames[-1][2]
                    if (tag, event.value) in seen:
                        raise FormatError(
                            f"duplicate key '{event.value}' (first on line {seen[(tag, event.value)]})",
                            path=path, line=line,
                        )
                    seen[(tag, event.value)] = line
                    if len(frames) == 1:
                        lines[event.value] = line
                continue
            if is_key and len(frames) == 1:
                raise FormatError("header keys must be plain strings", path=path, line=line)
            if not frames and not isinstance(event, yaml.MappingStartEvent):
                raise FormatError(f"{what} must be a YAML mapping", path=path, line=line)
            frames.append([isinstance(event, yaml.MappingStartEvent), True, {}])
            if len(frames) > MAX_DEPTH:
                raise FormatError(f"YAML header nested deeper than {MAX_DEPTH} levels", path=path, line=line)
        data = yaml.load(text, Loader=Loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise _format_error(exc, path, first_line) from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise FormatError(f"{what} must be a YAML mapping", path=path, line=first_line)
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
    text: str = _yaml().safe_dump(value, default_flow_style=True, sort_keys=False, allow_unicode=True, width=10_000)
    text = text.rstrip("\n")
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    return text
