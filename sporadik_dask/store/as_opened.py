"""A reader reads the state of a store it opened, or raises: the root's document read again
after a read, and compared with the description it opened.

A writer takes a store's block off before it touches anything else and writes it back last, with
the token of the write (:data:`~sporadik_dask.store.describe.WRITTEN_KEY`): so a read whose
values were all fetched before this check passes read one state, never another write's values,
and never zeros where a rewrite had not yet put its chunks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sporadik_dask.format.errors import FetchError, SporadikError, StoreReplacedError
from sporadik_dask.format.spec import LayoutEntry, parse_block
from sporadik_dask.store.describe import (
    WRITTEN_KEY,
    OpenedStore,
    StoreDescription,
    normalized,
)
from sporadik_dask.store.storage import StoreLike, read_options, root_document
from sporadik_dask.store.zarr_adapter import resolve_store_path, run

if TYPE_CHECKING:
    from zarr.storage import StorePath

__all__ = ["check_as_opened", "check_as_opened_async", "check_store_as_opened_async"]


def _change(document: dict[str, Any] | None, description: StoreDescription) -> str | None:
    """How the root ``document`` differs from the state ``description`` was made of, or None
    when it still holds it: a finished block naming the same write, shape and layouts (others
    may have been added since, by :func:`~sporadik_dask.add_axis`)."""
    if document is None:
        return "nothing is stored there now"
    raw = document.get("attributes")
    attributes: dict[str, Any] = raw if isinstance(raw, dict) else {}
    try:
        block = parse_block(attributes, description.location)
    except SporadikError:
        return "it holds no finished block now: another write is under way, or was cut off"
    written = attributes.get(WRITTEN_KEY)
    if block.spec != description.spec or block.shape != description.shape:
        return f"it now holds an array of shape {block.shape}, where it held {description.shape}"
    if written != description.written:
        return "another write finished there, of the same shape"
    entries = set(block.layouts)
    for layout in description.layouts.values():
        if LayoutEntry(layout.path, layout.indexed_axis, layout.index_order) not in entries:
            return f"it no longer holds layout {layout.path!r} as it was"
    return None


async def check_as_opened_async(root: StorePath, description: StoreDescription) -> None:
    """Refuse with :class:`~sporadik_dask.format.errors.StoreReplacedError` unless the store at
    ``root`` is still the one ``description`` was made of. One request: the root's document.

    A writer takes a store's block off before it touches anything else and writes it back last,
    with the token of the write (:data:`WRITTEN_KEY`). So values read before this check passes
    are all of the state described: a write that began meanwhile has not committed (no block),
    or committed another token.
    """
    try:
        document = await root_document(root)
    except Exception as failed:
        raise FetchError(
            f"Could not fetch the root document of {description.location} "
            f"({type(failed).__name__}: {failed}) to check the store is still the one opened; "
            "what was read is not returned. Retry, or raise the store's retry settings."
        ) from failed
    change = _change(document, description)
    if change is not None:
        _refuse(description, change)


def _refuse(description: StoreDescription, change: str) -> None:
    raise StoreReplacedError(
        f"The store at {description.location} was rewritten since it was opened ({change}); "
        "what this array read from it would be another write's values, or zeros where chunks "
        "are missing. Open it again."
    )


async def check_store_as_opened_async(
    store: StoreLike, storage_options: dict[str, Any] | None, description: StoreDescription
) -> None:
    """:func:`check_as_opened_async` for a store given as it was opened (a path, a URL, a store
    object), by a reader that travelled as a location: the root's document, one request."""
    try:
        root = await resolve_store_path(
            normalized(store), storage_options=read_options(store, storage_options)
        )
    except FileNotFoundError:  # a local directory, removed
        root = None
    if root is None:
        _refuse(description, "nothing is stored there now")
    else:
        await check_as_opened_async(root, description)


def check_as_opened(opened: OpenedStore) -> None:
    """Synchronous :func:`check_as_opened_async` for a store opened by :func:`open_store`."""
    run(check_as_opened_async(opened.root.store_path, opened.description))
