"""The switch registry the runtime package reads: derived from the patch headers."""

from __future__ import annotations

import json
from typing import Iterable

from .model.patch import PatchFile

SCHEMA = "vllm_genesis.registry/1"


def build_registry(patches: Iterable[PatchFile]) -> dict[str, object]:
    rows = []
    for patch in patches:
        meta = patch.meta
        rows.append(
            {
                "id": meta.id,
                "title": meta.title,
                "env_flag": meta.env_flag,
                "default_on": meta.default_on,
                "lifecycle": meta.lifecycle,
                "patch": patch.name,
            }
        )
    return {"schema": SCHEMA, "patches": rows}


def render_registry(patches: Iterable[PatchFile]) -> str:
    return json.dumps(build_registry(patches), indent=2, sort_keys=False) + "\n"


def main() -> None:  # pragma: no cover - developer convenience
    """Regenerate kernels/vllm_genesis/registry.json from every patch under queue/."""
    from pathlib import Path

    from .fsutil import atomic_write
    from .model.patch import parse_patch

    root = Path.cwd()
    patches = [
        parse_patch(p.read_bytes(), name=p.name, path=f"queue/{p.name}")
        for p in sorted((root / "queue").glob("*.patch"))
    ]
    target = root / "kernels" / "vllm_genesis" / "registry.json"
    atomic_write(target, render_registry(patches).encode("utf-8"))
    print(f"{target.relative_to(root)}: {len(patches)} patches")


if __name__ == "__main__":  # pragma: no cover
    main()
