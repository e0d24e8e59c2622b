"""A patch named on the command line, resolved against the series (see model/names.py)."""

from __future__ import annotations

from ..errors import GqueueError
from ..model import names as naming
from ..model.series import Series
from ..store import Store


def series_ids(store: Store, series: Series) -> dict[str, str]:
    """name -> id for the series' patches that can be read (an unreadable one is only not
    found by its id: the command that uses it reports what is wrong with it)."""
    ids: dict[str, str] = {}
    for entry in series.entries:
        try:
            ids[entry.name] = store.read_patch(entry.name, line=entry.line).meta.id
        except GqueueError:
            continue
    store.headers.save()
    return ids


def patch_name(store: Store, query: str, *, stored: bool = False, series: Series | None = None) -> str:
    """The series entry ``query`` names; ``stored``: a file of queue/ outside the series,
    named exactly, is taken too (diff, files and header read any patch file)."""
    series = series if series is not None else store.read_series()
    if query in series:
        return query
    if stored and query and store.patch_path(query).is_file():  # patch_path refuses a name leading out
        return query
    return naming.resolve(query, series.names, series_ids(store, series))


def push_target(store: Store, query: str, series: Series | None = None) -> str | int:
    """push's and pop's TARGET: a patch of the series, or a number of patches (quilt)."""
    series = series if series is not None else store.read_series()
    if query in series:
        return query
    return naming.resolve_target(query, series.names, series_ids(store, series))
