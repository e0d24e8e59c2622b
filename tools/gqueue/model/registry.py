"""The switch registry the runtime package reads: derived from the patch headers.

``gqueue docs`` writes it (ops/catalogue.py), ``gqueue build`` puts it in the wheel (ops/build.py).
"""

from __future__ import annotations

import json
from typing import Iterable

from .patch import PatchFile

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

