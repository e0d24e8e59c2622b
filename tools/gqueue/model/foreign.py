"""Reading patches written by other tools: quilt, Debian DEP-3 and git format-patch mails.

Every piece of text before the diff is kept: known fields map to header keys, the rest of
the fields go under ``headers``, and free text becomes the description. Text is decoded as
its mail declares, else as UTF-8, else as Latin-1 with a note: never with replacement marks.
"""

from __future__ import annotations

import email
import email.policy
import email.utils
import re
from dataclasses import dataclass, field
from email.message import Message
from typing import Any

from .patch import HEADER_START, split_header

_DIFF_START = re.compile(rb"^(diff --git |--- |Index: )", re.M)
_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):(?:\s(.*)|)$")
_SUBJECT_PREFIX = re.compile(r"^\s*\[[^\]]*PATCH[^\]]*\]\s*")
# an mbox separator as git format-patch and mail programs write it: 'From SENDER asctime-date'
_FROM_LINE = re.compile(
    rb"^From \S+ +[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d{1,2}:\d{2}(?::\d{2})? (?:\S+ )?\d{4}\r?\n?$")
_ESCAPED_FROM = re.compile(rb"^>(>*From )")
_PATCH_TYPES = ("text/plain", "text/x-patch", "text/x-diff", "text/x-diff-patch", "application/x-patch")
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
    notes: tuple[str, ...] = field(default=())


def is_mbox(data: bytes) -> bool:
    """Whether ``data`` starts with an mbox separator line."""
    return bool(_FROM_LINE.match(data[: data.find(b"\n") + 1] if b"\n" in data else data))


def split_mbox(data: bytes) -> list[tuple[int, bytes]]:
    """The mails of an mbox, each with the line it starts on. Only a line of the separator's own
    shape starts a mail (git format-patch writes message lines starting 'From ' unescaped); when
    no other line starts 'From ', the '>From' lines are taken as mboxrd's escapes and unescaped."""
    lines = data.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _FROM_LINE.match(line)]
    if not starts or starts[0] != 0:
        return [(1, data)]
    separators = set(starts)
    escaped = not any(line.startswith(b"From ") for i, line in enumerate(lines) if i not in separators)
    mails = []
    for k, start in enumerate(starts):
        chunk = lines[start : starts[k + 1] if k + 1 < len(starts) else len(lines)]
        if escaped:
            chunk = chunk[:1] + [_ESCAPED_FROM.sub(rb"\1", line) for line in chunk[1:]]
        mails.append((start + 1, b"".join(chunk)))
    return mails


def decode_text(data: bytes, charset: str | None = None) -> tuple[str, str | None]:
    """``data`` as text: in ``charset`` when given and valid, else UTF-8, else Latin-1 (which
    reads any bytes). The second value says what was done when it was not what was declared."""
    if charset and charset.lower() not in ("utf-8", "utf8", "us-ascii", "ascii"):
        try:
            return data.decode(charset), None
        except (LookupError, UnicodeDecodeError):
            pass
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        said = f"declared {charset}" if charset and charset.lower() not in ("utf-8", "utf8") else "UTF-8"
        return data.decode("latin-1"), f"not {said} text; read as Latin-1"


def author_of(value: str) -> str | None:
    """``Name <mail>`` on one line from an address field, or None when it names no mail."""
    name, mail = email.utils.parseaddr(" ".join(value.split()))
    if "@" not in mail or any(c in mail for c in "<> "):
        return None
    name = " ".join(name.replace("<", "").replace(">", "").split()) or mail.split("@", 1)[0]
    return f"{name} <{mail}>"


def read_foreign(data: bytes) -> Foreign:
    if data.startswith(HEADER_START) and split_header(data)[0]:
        return Foreign({}, data, "gqueue")
    if data.startswith(b"From ") or (data.startswith(b"From:") and b"\nSubject:" in data[:4096]):
        return _read_mail(data)
    offset = _diff_offset(data)
    preamble, note = decode_text(data[:offset])
    notes = (f"the text before the diff is {note}",) if note else ()
    body = data[offset:]
    fields = _read_dep3(preamble)
    if fields is not None:
        return Foreign(fields, body, "dep3", notes)
    text = preamble.strip("\n")
    return Foreign({"description": text + "\n"} if text else {}, body, "plain", notes)


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


def _header_text(name: str, raw: str, notes: list[str]) -> str:
    """A header's text: RFC 2047 words decoded; raw 8-bit bytes as UTF-8, else Latin-1."""
    if any("\udc80" <= c <= "\udcff" for c in raw):
        text, note = decode_text(raw.encode("ascii", "surrogateescape"))
        if note:
            notes.append(f"the mail's {name} header is {note}")
        return " ".join(text.split())
    if "=?" in raw:
        return " ".join(str(email.policy.default.header_factory(name, raw)).split())
    return " ".join(raw.split())


def _read_mail(data: bytes) -> Foreign:
    message = email.message_from_bytes(data, policy=email.policy.default)
    notes: list[str] = []
    headers = {k: _header_text(k, v, notes) for k, v in message.raw_items()}
    texts: list[str] = []
    diffs: list[bytes] = []
    for part in message.walk():
        if part.is_multipart() or part.get_content_type() not in _PATCH_TYPES:
            continue
        raw = part.get_payload(decode=True)
        if not isinstance(raw, bytes):
            continue
        offset = _diff_offset(raw)
        if offset < len(raw):
            diffs.append(raw[offset:] if raw.endswith(b"\n") else raw[offset:] + b"\n")
        elif part.get_content_disposition() == "attachment":
            continue  # an attached text that is no diff: not part of the message
        text = _part_text(part, raw[:offset], notes)
        if text.strip():
            texts.append(text)
    fields: dict[str, Any] = {}
    lower = {k.lower(): k for k in headers}
    subject = headers.get(lower.get("subject", ""), "")
    if subject:
        fields["title"] = _SUBJECT_PREFIX.sub("", subject)
    sender = headers.get(lower.get("from", ""), "")
    author = author_of(sender) if sender else None
    if author:
        fields["author"] = author
    description = "\n\n".join(t.strip("\n") for t in texts if t.strip())
    if description:
        fields["description"] = description + "\n"
    extra = {k: v for k, v in headers.items() if k.lower() != "subject" and not (k.lower() == "from" and author == sender)}
    unixfrom = message.get_unixfrom()
    if unixfrom:
        extra["From_"] = unixfrom
    if extra:
        fields["headers"] = extra
    return Foreign(fields, b"".join(diffs), "mail", tuple(notes))


def _part_text(part: Message, raw: bytes, notes: list[str]) -> str:
    text, note = decode_text(raw, part.get_content_charset())
    if note:
        notes.append(f"the mail's text is {note}")
    # format-patch puts '---' and a diffstat between the message and the diff
    if "\n---\n" in "\n" + text:
        text = ("\n" + text).split("\n---\n", 1)[0].lstrip("\n")
    return text


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
        elif target == "author" and "author" not in fields:
            author = author_of(value)
            if author:
                fields["author"] = author
            if author != value:
                extra[key] = value  # as written (no mail, several names, a second line): kept
        elif target is not None and target != "author" and target not in fields:
            fields[target] = value
        else:
            extra[key] = value
    trailing = "\n".join(lines[rest_start:]).strip("\n")
    if trailing:
        fields["description"] = fields.get("description", "") + trailing + "\n"
    if extra:
        fields["headers"] = extra
    return fields
