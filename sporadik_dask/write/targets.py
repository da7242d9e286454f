"""Where a write may go: the overwrite rule, checked before anything is created or deleted.

Opening a zarr group with ``mode="w"`` deletes whatever is at its location, whatever it is. So a
write looks first, through the store's own listing (the same for a directory, a bucket prefix or
a memory store), and goes ahead only into nothing, into an empty location, or, with
``overwrite=True``, over a sporadik store, finished or torn. A directory holding anything else (an
AnnData store, someone's notes) is never replaced, and neither is the input being read.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zarr.storage import StorePath

from sporadik_dask.format.errors import StoreExistsError, StoreNotFoundError
from sporadik_dask.format.spec import BLOCK_KEY, LAYOUTS_GROUP
from sporadik_dask.store.labels import COORDS_GROUP, LABELS_KEY
from sporadik_dask.store.storage import (
    StoreLike,
    access_denied,
    bucket_of,
    location_of,
    missing_bucket,
    option_typo,
    refuse_dot_segments,
    root_document,
    run,
)
from sporadik_dask.store.zarr_adapter import resolve_store_path

__all__ = ["WRITING_KEY", "Target", "check_target", "same_or_inside"]

#: Root attribute naming the write that laid the store out, until its block replaces it
#: (:mod:`sporadik_dask.write.skeleton`).
WRITING_KEY = "sporadik-dask-writing"

#: Every name a write of ours puts under its location's ``layouts/`` and ``coords/``: a tree
#: holding these and nothing else, and no root document, is what a write's tasks leave when
#: they land after the store was discarded (a cluster's running tasks outlive an interrupt).
_OUR_KEYS = re.compile(
    r"(layouts|coords)/zarr\.json"
    r"|layouts/axis\d+/zarr\.json"
    r"|layouts/axis\d+/(data|indices|indptr|maxima)/(zarr\.json|c(/\d+)+)"
    r"|coords/[^/]+/(zarr\.json|c(/\d+)+)"
)

#: Entries named in a refusal, so a user recognises the directory without a listing of thousands.
NAMED_ENTRIES = 3


@dataclass(frozen=True, slots=True)
class Target:
    """What a write found at its location: nothing, or a sporadik store it may replace."""

    location: str
    #: Names directly under the location (a few, for messages); empty when nothing is there.
    entries: tuple[str, ...]
    #: Whether what is there is a sporadik store (or an empty zarr v3 group), finished or torn.
    sporadik: bool
    #: The root group's attributes, when there is one.
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Whether nothing is stored at the location."""
        return not self.entries


async def _store_path(store: StoreLike, storage_options: dict[str, Any] | None) -> StorePath:
    if isinstance(store, os.PathLike):
        store = os.fspath(store)
    return await resolve_store_path(store, storage_options=storage_options)


def _is_sporadik(document: dict[str, Any] | None, entries: set[str]) -> bool:
    """Whether a root document and the names beside it are a store this package wrote.

    A sporadik store is a zarr v3 group; a torn one may lack the block but has ``layouts/`` or
    our labels attribute, and one torn right after its root was written is an empty group.
    """
    if document is None or document.get("zarr_format") != 3 or document.get("node_type") != "group":
        return False
    attributes = document.get("attributes") or {}
    if not isinstance(attributes, dict):
        return False
    labels = attributes.get(LABELS_KEY)
    return (
        BLOCK_KEY in attributes
        or WRITING_KEY in attributes
        or (isinstance(labels, dict) and "dims" in labels)
        or LAYOUTS_GROUP in entries
        or (not attributes and entries == {"zarr.json"})
    )


async def _look_async(
    store: StoreLike, storage_options: dict[str, Any] | None, location: str
) -> Target:
    if isinstance(store, (str, os.PathLike)) and "://" not in os.fspath(store):
        path = os.fspath(store)
        if os.path.exists(path) and not os.path.isdir(path):
            raise StoreExistsError(
                f"{location} is a file, and a store is a directory: writing would replace the "
                "file. Choose a path that does not exist yet or an empty directory."
            )
        if not os.path.exists(path):
            return Target(location, (), False)
    try:
        where = await _store_path(store, storage_options)
        entries = sorted({name.rstrip("/") async for name in where.store.list_dir(where.path)})
    except FileNotFoundError:  # a read-only local store refuses a root that does not exist
        return Target(location, (), False)
    except TypeError as refused:
        raise option_typo(store, refused) or refused from refused
    except PermissionError as refused:
        raise access_denied(store, refused, "write") or refused from refused
    if not entries:
        if await missing_bucket(store, storage_options):
            raise StoreNotFoundError(
                f"Cannot write {location}: its bucket {bucket_of(store)!r} does not exist (or "
                "these credentials cannot see it), and a write does not make buckets. Create "
                "it, or check its name and endpoint_url in storage_options."
            )
        return Target(location, (), False)
    document = await root_document(where)
    attributes = (document or {}).get("attributes")
    ours = _is_sporadik(document, set(entries))
    if document is None and set(entries) <= {LAYOUTS_GROUP, COORDS_GROUP}:
        ours = await _only_our_names(where)
    return Target(
        location, tuple(entries), ours, attributes if isinstance(attributes, dict) else {}
    )


async def _only_our_names(where: StorePath) -> bool:
    """Whether every key under ``where`` is one a write of ours makes (no root document).

    A write interrupted on a cluster discards its store, but tasks already running write their
    chunks afterwards: the location then holds chunks of ours and nothing else, and would be
    refused for ever as foreign. Every key is listed, so one file of anyone else's keeps the
    whole location refused.
    """
    prefix = f"{where.path}/" if where.path else ""
    async for key in where.store.list_prefix(prefix):
        if not _OUR_KEYS.fullmatch(key[len(prefix) :]):
            return False
    return True


def _named(entries: Sequence[str]) -> str:
    """The first few of ``entries``, for a message, and how many more there are."""
    shown = ", ".join(repr(name) for name in entries[:NAMED_ENTRIES])
    more = len(entries) - NAMED_ENTRIES
    return shown + (f" and {more} more" if more > 0 else "")


def _normalized(location: str) -> str:
    if "://" in location:
        return location.rstrip("/")
    return os.path.realpath(location)


def same_or_inside(one: str, other: str) -> bool:
    """Whether location ``one`` is ``other`` or lies inside it (local paths resolved)."""
    a, b = _normalized(one), _normalized(other)
    return a == b or a.startswith(b.rstrip("/") + "/")


def check_target(
    store: StoreLike,
    *,
    overwrite: bool,
    storage_options: dict[str, Any] | None = None,
    inputs: Iterable[str] = (),
    location: str | None = None,
    token: str | None = None,
) -> Target:
    """What is at ``store`` (called ``location`` in messages), refusing a write that would
    destroy something. A store the write named ``token`` laid out itself is its own.

    1. A location equal to an input, inside one, or holding one is refused: replacing it
       deletes what is being read, before it is read.
    2. Nothing there, or an empty directory: the write goes ahead.
    3. A sporadik store (complete or torn): replaced only with ``overwrite=True``, and never
       one holding anything of its own beside its documents, layouts and coordinates; a local
       location inside one is refused.
    4. Anything else (a file, an AnnData store, a directory of other files) is refused, even with
       ``overwrite=True``: the write would delete it, and it is not ours to delete.
    """
    location = location_of(store) if location is None else location
    refuse_dot_segments(store)
    if isinstance(store, (str, os.PathLike)):
        for source in inputs:
            if same_or_inside(location, source) or same_or_inside(source, location):
                raise StoreExistsError(
                    f"The output {location} is the input {source}, lies inside it or holds it: "
                    "writing there would delete the input before it is read. Choose another "
                    "output path."
                )
    if isinstance(store, (str, os.PathLike)) and "://" not in location:
        _refuse_inside_a_store(location)
    target = run(_look_async(store, storage_options, location))
    if target.empty or (token is not None and target.attributes.get(WRITING_KEY) == token):
        return target
    if not target.sporadik:
        raise StoreExistsError(
            f"{location} already holds something other than a sporadik store "
            f"({_named(target.entries)}); it is never replaced, even with overwrite=True, "
            "since the write would delete it. "
            "Choose a path that does not exist yet or an empty directory."
        )
    foreign = [e for e in target.entries if e not in {"zarr.json", LAYOUTS_GROUP, COORDS_GROUP}]
    if foreign:
        raise StoreExistsError(
            f"{location} holds a sporadik store and other things beside it ({_named(foreign)}); "
            "replacing the store would delete them too, even with overwrite=True. Move them "
            "out of the store, or write to another path."
        )
    if not overwrite:
        what = (
            "a sporadik store"
            if BLOCK_KEY in target.attributes
            else "an unfinished sporadik store (no block: a write that never ended, or one "
            "still running)"
        )
        raise StoreExistsError(
            f"{location} already holds {what}; pass overwrite=True to replace it. "
            "Writing over it would mix old chunks with new ones."
        )
    return target


def _refuse_inside_a_store(location: str) -> None:
    """Refuse a local location inside a sporadik store: the store's validation would call
    the new store's files foreign, and replacing the outer store would delete the inner one."""
    path = os.path.realpath(location)
    for parent in list(Path(path).parents)[:-1]:
        document = parent / "zarr.json"
        try:
            attributes = json.loads(document.read_text()).get("attributes", {})
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(attributes, dict) and (BLOCK_KEY in attributes or WRITING_KEY in attributes):
            raise StoreExistsError(
                f"{location} lies inside the sporadik store {parent}: a store written there "
                "would be deleted with the outer one, and taken for foreign files by its "
                "checks. Choose a path outside it."
            )
