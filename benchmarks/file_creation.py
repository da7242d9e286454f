"""What creating a store's chunk files costs just after many files were deleted, beside a
write to a new path, in one run.

A write of both layouts of the 1x data makes ~11,000 chunk files. On this machine's ext4, a
profile of a slow write found a fifth of its time in the inode allocator's ``recently_deleted``
check, and a write with ``overwrite=True`` deletes the old store's files just before it makes
its own. Measured here:

1. plain files of one chunk's size: made in new directories, then again in each just after
   deleting its files;
2. the threaded write of the 1x data: to new paths, then with ``overwrite=True`` over each.

    .venv/bin/python benchmarks/file_creation.py [--rounds 2] [--files 11000] [--cells N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from scaling import CELLS, WARM_CELLS, fresh_work


def _timed(work: Any, *args: Any, **kwargs: Any) -> tuple[float, float, float]:
    """Wall, user and system seconds of ``work(*args, **kwargs)``, after earlier writes' dirty
    pages went to disk."""
    os.sync()
    before, started = os.times(), time.perf_counter()
    work(*args, **kwargs)
    after = os.times()
    return time.perf_counter() - started, after.user - before.user, after.system - before.system


def _make(directory: Path, files: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    chunk = os.urandom(128 * 1024)
    for i in range(files):
        with open(directory / str(i), "wb") as file:
            file.write(chunk)


def _row(label: str, spent: tuple[float, float, float], per: int | None = None) -> None:
    wall, user, system = spent
    each = f"  {wall / per * 1e6:7.0f} us a file" if per else ""
    print(f"  {label:44s} {wall:6.2f} s  (user {user:5.2f}, system {system:5.2f}){each}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--files", type=int, default=11_000)
    parser.add_argument("--cells", type=int, default=CELLS)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-files")
    args = parser.parse_args()
    import dask

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix

    work = fresh_work(args.work)
    try:
        # every new path first, so no deletion of this run comes before them
        print(f"{args.files:,} files of 128 KiB:")
        made = [work / f"files-{r}" for r in range(args.rounds)]
        for here in made:
            _row("in a new directory", _timed(_make, here, args.files), args.files)
        for here in made:
            shutil.rmtree(here)
            _row("in the same directory, just after deleting them",
                 _timed(_make, here, args.files), args.files)  # fmt: skip
        x = counts_matrix(cells=args.cells)
        with dask.config.set(scheduler="threads", num_workers=2):
            sd.to_sporadik(counts_matrix(cells=WARM_CELLS), work / "warm.zarr")
            print(f"threaded write of {args.cells:,} cells, both layouts:")
            stores = [work / f"write-{r}.zarr" for r in range(args.rounds)]
            for store in stores:
                _row("to a new path", _timed(sd.to_sporadik, x, store))
            for store in stores:
                _row(
                    "overwrite=True over a store written before",
                    _timed(sd.to_sporadik, x, store, overwrite=True),
                )
    finally:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
