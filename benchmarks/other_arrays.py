"""The speed of xarray and dask on other people's arrays, in a process that never imported the
package and in one that used a store first: the patches must cost them nothing.

    .venv/bin/python benchmarks/other_arrays.py --rounds 3

Each round runs two fresh processes in turn (the order flipped each round), one per mode of
``tests/backend/other_arrays.py`` (which ``tests/backend/test_other_arrays.py`` runs to compare
types and values): ``plain`` finds no ``sporadik_dask``; ``after-sporadik`` writes a store, opens,
reduces, groups, multiplies, selects and joins it, and writes it again. Each then times every
operation of that module on numpy, dask-of-numpy, ``sparse.COO``, dask-of-sparse and
``scipy.sparse`` arrays (6 x 4: the per-call cost a patch's type check adds is largest beside
small work), computed on dask's synchronous scheduler, ``--repeat`` times after one untimed call,
and reports the median CPU time of the process (a shared machine's load moves it less than the
clock).
Printed: per kind of array, the sum of the operations' medians in each mode (the median over
rounds), and every operation whose median over rounds differs by more than 1.2x.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("plain", "after-sporadik")


def child(mode: str, store: str, repeat: int) -> dict[str, float]:
    sys.path.insert(0, str(ROOT))
    from tests.backend import other_arrays as ops

    if mode == "plain":
        sys.meta_path.insert(0, ops._NotInstalled())
    else:
        ops.use_sporadik(store)
    medians: dict[str, float] = {}
    for kind, make in ops._arrays().items():
        for name, operation in ops._operations().items():
            took = []
            for _ in range(repeat + 1):  # the first call, which imports and compiles, untimed
                start = time.process_time()
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        result = operation(ops._labelled(make()))
                        if hasattr(result, "compute"):
                            result.compute()
                except Exception:  # the same error in both modes: the test checks that
                    pass
                took.append(time.process_time() - start)
            medians[f"{kind} | {name}"] = statistics.median(took[1:])
    if mode == "plain":
        assert not [m for m in sys.modules if m.partition(".")[0] == "sporadik_dask"]
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "STORE"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.repeat)))
        return
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as work:
        for round_ in range(args.rounds):
            for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
                store = str(Path(work) / f"s{round_}-{mode}.zarr")
                command = [sys.executable, __file__, "--repeat", str(args.repeat)]
                done = subprocess.run(
                    [*command, "--child", mode, store],
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=ROOT,
                )
                runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    cases = list(runs["plain"][0])
    median: dict[str, dict[str, float]] = {
        mode: {case: statistics.median(run[case] for run in runs[mode]) for case in cases}
        for mode in MODES
    }
    kinds = sorted({case.split(" | ")[0] for case in cases})
    print(f"`{' '.join(['python', *sys.argv])}`\n")
    print("| array | operations | plain, CPU ms (sum of medians) | after a store, CPU ms | ratio |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        mine = [case for case in cases if case.startswith(kind + " |")]
        plain = sum(median["plain"][case] for case in mine) * 1e3
        after = sum(median["after-sporadik"][case] for case in mine) * 1e3
        print(f"| {kind} | {len(mine)} | {plain:.1f} | {after:.1f} | {after / plain:.2f} |")
    apart: list[tuple[str, float, float]] = []
    for case in cases:
        plain, after = median["plain"][case], median["after-sporadik"][case]
        if max(plain, after) / max(min(plain, after), 1e-9) > 1.2:
            apart.append((case, plain * 1e3, after * 1e3))
    print(f"\nOperations apart by more than 1.2x: {len(apart)} of {len(cases)}\n")
    if apart:
        print("| array and operation | plain, CPU ms | after a store, CPU ms |")
        print("|---|---|---|")
        for case, plain, after in apart:
            print(f"| {case} | {plain:.2f} | {after:.2f} |")


if __name__ == "__main__":
    main()
