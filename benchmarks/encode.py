"""Encoding and decoding a layout's chunks: numcodecs' zstd against contexts each thread keeps.

    .venv/bin/python benchmarks/encode.py [--cells N] [--passes P] [--rounds R]

The chunks are those of a store the package writes with its default codecs (zstd at zarr's
level): the ``data`` (float32 counts) and ``indices`` (int32) of the cell-major layout of
``benchmarks/codecs.py``'s realistic matrix, every whole chunk (32,768 values, 128 KiB). Each way
compresses them and decompresses them into one joined array per array as a read does, ``P``
times over, in a fresh process of its own, once as a plain process starts and once with
``MALLOC_TRIM_THRESHOLD_=65536``, as a distributed nanny starts its workers; the rounds alternate
the cases, so the machine's noise falls on each alike. Prints microseconds and minor page faults
per chunk. The ways: numcodecs' ``encode``, and ``decode`` then a copy into place; numcodecs'
``decode(buf, out=view)`` into place; and the package's own (``zstd.encoder``, and what reads
decode with).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sys, time
from pathlib import Path
import numcodecs, numpy as np
from sporadik_dask.store import codecs as ours, zstd
layout, passes, ways = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
codec = numcodecs.Zstd(level=0)
arrays = {"data": np.dtype("<f4"), "indices": np.dtype("<i4")}
blobs, tables = [], {}
for name, dtype in arrays.items():
    files = sorted((layout / name / "c").iterdir(), key=lambda f: int(f.name))
    made = [f.read_bytes() for f in files]
    whole = [b for b in made if len(codec.decode(b)) == 32_768 * dtype.itemsize]
    tables[name] = np.ones(len(whole) * 32_768, dtype=dtype)  # its pages faulted in already
    blobs += [(tables[name], k, b) for k, b in enumerate(whole)]
values = [np.frombuffer(codec.decode(b), dtype=t.dtype) for t, _, b in blobs]
kept = zstd.encoder(codec)

def copied(blob, out):
    out[:] = np.frombuffer(codec.decode(blob), dtype=out.dtype)

def read(blob, out):
    ours.decode_chunk_into(None, blob, [codec], out)

steps = {
    ("encode", "numcodecs"): lambda value, blob, out: codec.encode(value),
    ("encode", "package"): lambda value, blob, out: kept(value),
    ("decode", "numcodecs"): lambda value, blob, out: copied(blob, out),
    ("decode", "numcodecs out="): lambda value, blob, out: codec.decode(blob, out=out),
    ("decode", "package"): lambda value, blob, out: read(blob, out),
}
steps = {key: step for key, step in steps.items() if key[1] in ways}
found = {f"{step} {way}": [0, 0, 0] for step, way in steps}  # ns, CPU ns, faults
usage = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for turn in range(passes + 1):  # the first warms up
    for at, ((table, k, blob), value) in enumerate(zip(blobs, values)):
        out = table[k * 32_768 : (k + 1) * 32_768]
        order = list(steps.items())
        shift = (turn + at) % len(order)  # each way first in turn: noise falls on all alike
        for (step, way), work in order[shift:] + order[:shift]:
            faults, start, cpu = usage(), time.perf_counter_ns(), time.thread_time_ns()
            work(value, blob, out)
            cpu, end, faults = time.thread_time_ns() - cpu, time.perf_counter_ns(), usage() - faults
            if turn:
                totals = found[f"{step} {way}"]
                totals[0] += end - start
                totals[1] += cpu
                totals[2] += faults
            if step == "decode":
                assert (out == value).all()
                out[:] = 1
done = passes * len(blobs)
print(json.dumps({
    key: {"us": ns / done / 1e3, "cpu": cpu / done / 1e3, "faults": f / done, "chunks": len(blobs)}
    for key, (ns, cpu, f) in found.items()
}))
"""

#: What each step is measured by (``numcodecs out=`` encodes as numcodecs does).
LABELS = {
    ("encode", "numcodecs"): "numcodecs' `Zstd.encode`",
    ("encode", "package"): "a context each thread keeps (`store/zstd.py`)",
    ("decode", "numcodecs"): "numcodecs' `decode`, then copied into place",
    ("decode", "numcodecs out="): "numcodecs' `decode(buf, out=view)`, into place",
    ("decode", "package"): "the package's read (`decode_chunk_into`)",
}
PROCESSES = ("plain process", "nanny's trim threshold")


def _layout(where: Path, cells: int) -> Path:
    """The cell-major layout of a store of the realistic matrix, written with default codecs."""
    import importlib.util

    import sporadik_dask as sd

    # benchmarks/codecs.py, by path: the standard library's ``codecs`` is imported already
    spec = importlib.util.spec_from_file_location(
        "codec_chains", Path(__file__).with_name("codecs.py")
    )
    assert spec is not None and spec.loader is not None
    chains = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(chains)
    sd.to_sporadik(chains.realistic(cells, 20_000), where / "s.zarr", axes=(0,))
    return where / "s.zarr" / "layouts" / "axis0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=3_000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ways = sorted({way for _, way in LABELS})
    found: dict[str, list[dict[str, dict[str, float]]]] = {where: [] for where in PROCESSES}
    with tempfile.TemporaryDirectory() as work:
        layout = _layout(Path(work), args.cells)
        for _ in range(args.rounds):
            for where in PROCESSES:
                environment = dict(os.environ)
                environment.pop("MALLOC_TRIM_THRESHOLD_", None)
                if where != "plain process":
                    environment["MALLOC_TRIM_THRESHOLD_"] = "65536"
                command = [sys.executable, "-c", CHILD, str(layout), str(args.passes)]
                done = subprocess.run(
                    [*command, json.dumps(ways)],
                    env=environment,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                found[where].append(json.loads(done.stdout))
    chunks = found[PROCESSES[0]][0]["decode package"]["chunks"]
    print(
        f"{chunks:.0f} whole chunks of 32,768 values (data and indices of {args.cells:,} cells), "
        f"each {args.passes} times, {args.rounds} rounds (median, min-max)"
    )
    print(
        "| step | way | process | µs per chunk, median (min-max) | CPU µs per chunk, median "
        "(min-max) | page faults per chunk |"
    )
    print("|---|---|---|---|---|---|")
    for (step, way), label in LABELS.items():
        for where in PROCESSES:
            runs = [run[f"{step} {way}"] for run in found[where]]
            cells = [
                f"{statistics.median(t):.0f} ({min(t):.0f}-{max(t):.0f})"
                for t in ([run["us"] for run in runs], [run["cpu"] for run in runs])
            ]
            faults = statistics.median(run["faults"] for run in runs)
            print(f"| {step} | {label} | {where} | {' | '.join(cells)} | {faults:.1f} |")


if __name__ == "__main__":
    main()
