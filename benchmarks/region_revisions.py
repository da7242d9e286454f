"""A 1 Mb region of a genome-length store read again and again, with the package at two git
revisions side by side in one run, beside zarr reading the region's values alone and its runs
alone.

    .venv/bin/python benchmarks/region_revisions.py BASE [--rounds 3] [--again 20]

The store is ``long_axes.py``'s at L = 3.1e7 with both layouts (made under ``--work`` if
missing; a region's read does not depend on L). ``BASE`` (a commit, tag or branch) is checked
out into a git worktree of its own; the other side is this working tree. Each case is one
``long_axes.py`` child process importing the package from one tree or the other: the first
read, then the median of ``--again`` reads of the same in that process. The two trees take turns
within each round, the order flipped every round, since this machine's noise is larger than
many of the differences measured. The medians over the rounds replace this script's section of
``docs/benchmarks.md`` (``--label``), with the command and the load average.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

from long_axes import LENGTHS, make_store, measure
from page import publish

ROOT = Path(__file__).resolve().parents[1]
#: The package's reads of the region, taken by each tree.
READS = ("1 Mb region, lazy", "1 Mb region, chunks={}")
#: zarr's reads of the region's values (with the offsets at its ends, or every offset of it).
ZARR = ("1 Mb region, values alone", "1 Mb region, runs alone")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the revision to compare this working tree with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--again", type=int, default=20, help="reads again per process")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "long-axes")
    parser.add_argument("--label", default="a region read again, by revision")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    store = args.work / "long-3e07-both.zarr"
    if not store.exists():
        make_store(store, LENGTHS[0], (0, 1))
    load = os.getloadavg()[0]
    tree = args.work / f"tree-{args.base.replace('/', '-')}"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.base],
        check=True,
        capture_output=True,
    )
    trees = {args.base: tree, "this tree": ROOT}
    rows: list[dict[str, Any]] = []
    try:
        for round_ in range(args.rounds):
            sides = list(trees.items())
            for side, path in sides if round_ % 2 == 0 else sides[::-1]:
                env = {**os.environ, "PYTHONPATH": str(path)}
                for case in READS:
                    rows.append(_run(store, case, side, args.again, env, round_))
            for case in ZARR:
                rows.append(_run(store, case, "zarr", args.again, None, round_))
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False
        )
    command = shlex.join(["python", "benchmarks/region_revisions.py", *sys.argv[1:]])
    lines = [
        f"<!-- region-revisions-{args.label}: made by benchmarks/region_revisions.py -->",
        f"## Genome-length axes, {args.label} ({date.today()})",
        "",
        f"`{command}` (load average before the run: {load:.1f}, after: "
        f"{os.getloadavg()[0]:.1f}): a 1 Mb region (positions 12,000,000 to 13,000,000, "
        "292,253 values of 100 samples) of the 100 x 3.1e7 store with both layouts. Each row: "
        f"one fresh process per round ({args.rounds} rounds, the revisions taking turns), the "
        f"first read, then the median of {args.again} reads of the same again in that process; "
        "the medians over the rounds (and their range), and the peak RSS past the imports. "
        "*values alone*: zarr reading the region's `data` and `indices` in the position layout "
        "with the `indptr` offsets at its two ends; *runs alone*: the same with every `indptr` "
        "offset of the region.",
        "",
        "| case | revision | first read | again (median) | again, by round | past imports |",
        "|---|---|---|---|---|---|",
    ]
    for case in (*READS, *ZARR):
        for side in (*trees, "zarr"):
            runs = [r for r in rows if r["case"] == case and r["side"] == side]
            if not runs:
                continue
            failed = [r["failed"] for r in runs if "failed" in r]
            if failed:
                lines.append(f"| {case} | {side} | {failed[0]} | | | |")
                continue
            again = [r["again_seconds"] * 1e3 for r in runs]
            lines.append(
                f"| {case} | {side} | "
                f"{statistics.median(r['seconds'] for r in runs):.2f} s | "
                f"{statistics.median(again):.1f} ms | {min(again):.1f} to {max(again):.1f} ms | "
                f"+{statistics.median(r['peak_mb'] - r['imported_mb'] for r in runs):,.0f} MB |"
            )
    publish(
        ROOT / "docs" / "benchmarks.md", lines[0], f"<!-- /region-revisions-{args.label} -->", lines
    )


def _run(
    store: Path, case: str, side: str, again: int, env: dict[str, str] | None, round_: int
) -> dict[str, Any]:
    """One case in a fresh process, printed as it ends."""
    found = {**measure(store, case, 6.0, 300.0, again, env), "case": case, "side": side}
    shown = found.get("failed") or (
        f"first {found['seconds'] * 1e3:7.1f} ms, again {found['again_seconds'] * 1e3:6.1f} ms"
    )
    print(f"round {round_} {side:>12} {case:28} {shown}", flush=True)
    return found


if __name__ == "__main__":
    main()
