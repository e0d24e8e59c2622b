"""Reading patches written by other tools: quilt, Debian DEP-3 and git format-patch mails.

Every piece of text before the diff is kept: known fields map to header keys, the rest of
the fields go under ``headers``, and free text becomes the description.
"""

from __future__ import annotations

import email
import email.policy
import re
from dataclasses import dataclass
from typing import Any

from .patch import HEADER_START, split_header

_DIFF_START = re.compile(rb"^(diff --git |--- |Index: )", re.M)
_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):(?:\s(.*)|)$")
_SUBJECT_PREFIX = re.compile(r"^\s*\[[^\]]*PATCH[^\]]*\]\s*")
FIELD_KEYS = {
    "description": "description", "subject": "description", "author": "author", "from": "author",
    "origin": "origin", "bug": "bug", "forwarded": "forwarded", "applied-upstream": "applied_upstream",
    "last-update": "last_update",
}


@dataclass(frozen=True)
class Foreign:
    fields: dict[str, Any]
    body: bytes
    kind: str  # gqueue | mail | dep3 | plain


def _diff_offset(data: bytes) -> int:
    for match in _DIFF_START.finditer(data):
        pos = match.start()
        if data.startswith(b"--- ", pos):
            nl = data.find(b"\n", pos)
            if nl < 0 or not data.startswith(b"+++ ", nl + 1):
                continue
            # a bare '---' separator of a mail is not a diff start
        if data.startswith(b"Index: ", pos):
            continue
        return pos
    return len(data)


def read_foreign(data: bytes) -> Foreign:
    if data.startswith(HEADER_START) and split_header(data)[0]:
        return Foreign({}, data, "gqueue")
    if data.startswith(b"From ") or (data.startswith(b"From:") and b"\nSubject:" in data[:4096]):
        return _read_mail(data)
    offset = _diff_offset(data)
    preamble = data[:offset].decode("utf-8", "replace")
    body = data[offset:]
    fields = _read_dep3(preamble)
    if fields is not None:
        return Foreign(fields, body, "dep3")
    text = preamble.strip("\n")
    return Foreign({"description": text + "\n"} if text else {}, body, "plain")


def _read_mail(data: bytes) -> Foreign:
    message = email.message_from_bytes(data, policy=email.policy.compat32)
    payload = message.get_payload(decode=True)
    raw_body = payload if isinstance(payload, bytes) else str(message.get_payload()).encode()
    offset = _diff_offset(raw_body)
    text = raw_body[:offset].decode("utf-8", "replace")
    # format-patch puts '---' and a diffstat between the message and the diff
    if "\n---\n" in "\n" + text:
        text = ("\n" + text).split("\n---\n", 1)[0].lstrip("\n")
    fields: dict[str, Any] = {}
    subject = " ".join(str(message.get("Subject", "")).split())
    if subject:
        fields["title"] = _SUBJECT_PREFIX.sub("", subject)
    if message.get("From"):
        fields["author"] = " ".join(str(message["From"]).split())
    if text.strip():
        fields["description"] = text.strip("\n") + "\n"
    extra = {k: " ".join(str(v).split()) for k, v in message.items() if k.lower() not in ("subject", "from")}
    if message.get_unixfrom():
        extra["From_"] = message.get_unixfrom()
    if extra:
        fields["headers"] = extra
    return Foreign(fields, raw_body[offset:], "mail")


def _read_dep3(preamble: str) -> dict[str, Any] | None:
    lines = preamble.splitlines()
    if not lines or not _FIELD.match(lines[0]):
        return None
    raw: list[tuple[str, str]] = []
    rest_start = len(lines)
    for i, line in enumerate(lines):
        if line.strip() in ("", "---"):
            rest_start = i + 1
            break
        match = _FIELD.match(line)
        if match:
            raw.append((match.group(1), match.group(2) or ""))
        elif line.startswith((" ", "\t")) and raw:
            cont = line.strip()
            key, value = raw[-1]
            raw[-1] = (key, value + "\n" + ("" if cont == "." else cont))
        else:
            return None
    fields: dict[str, Any] = {}
    extra: dict[str, str] = {}
    for key, value in raw:
        target = FIELD_KEYS.get(key.lower())
        if target == "description":
            first, _, more = value.partition("\n")
            fields.setdefault("title", first.strip())
            if more.strip():
                fields["description"] = more.strip("\n") + "\n"
        elif target is not None and target not in fields:
            fields[target] = value
        else:
            extra[key] = value
    trailing = "\n".join(lines[rest_start:]).strip("\n")
    if trailing:
        fields["description"] = fields.get("description", "") + trailing + "\n"
    if extra:
        fields["headers"] = extra
    return fields
