"""Encoding a layout's chunks: numcodecs' ``Zstd.encode`` against a context each thread keeps.

    .venv/bin/python benchmarks/encode.py [--chunks N] [--rounds R]

Each encoder compresses the same chunks (32,768 values: sorted int32 indices and float32 counts,
as a write of the benchmark data makes them) in a fresh process of its own, once as a plain
process starts and once with ``MALLOC_TRIM_THRESHOLD_=65536``, as a distributed nanny starts its
workers; the rounds alternate the four, so the machine's noise falls on each alike. Prints
microseconds and minor page faults per chunk.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = """
import json, resource, sys, time
import numcodecs, numpy as np
from sporadik_dask import zstd
chunks = int(sys.argv[2])
rng = np.random.default_rng(0)
made = [np.sort(rng.integers(0, 20_000, 32_768)).astype(np.int32) for _ in range(chunks // 2)]
made += [rng.poisson(0.6, 32_768).astype(np.float32) for _ in range(chunks - len(made))]
codec = numcodecs.Zstd(level=0)
encode = codec.encode if sys.argv[1] == "numcodecs" else zstd.encoder(codec)
encode(made[0])
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
start = time.perf_counter()
for chunk in made:
    encode(chunk)
seconds = time.perf_counter() - start
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
print(json.dumps({"us": seconds / chunks * 1e6, "faults": faults / chunks}))
"""

CASES = [
    ("numcodecs", "plain process"),
    ("kept context", "plain process"),
    ("numcodecs", "nanny's trim threshold"),
    ("kept context", "nanny's trim threshold"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=4_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    found: dict[tuple[str, str], list[dict[str, float]]] = {case: [] for case in CASES}
    for _ in range(args.rounds):
        for encoder, where in CASES:
            environment = dict(os.environ)
            environment.pop("MALLOC_TRIM_THRESHOLD_", None)
            if where != "plain process":
                environment["MALLOC_TRIM_THRESHOLD_"] = "65536"
            name = "numcodecs" if encoder == "numcodecs" else "kept"
            done = subprocess.run(
                [sys.executable, "-c", CHILD, name, str(args.chunks)],
                env=environment,
                capture_output=True,
                text=True,
                check=True,
            )
            found[encoder, where].append(json.loads(done.stdout))
    print(f"{args.chunks:,} chunks of 32,768 values, {args.rounds} rounds (median, min-max)")
    print("| encoder | process | us per chunk | faults per chunk |")
    print("|---|---|---|---|")
    for (encoder, where), runs in found.items():
        us = [run["us"] for run in runs]
        faults = statistics.median(run["faults"] for run in runs)
        print(
            f"| {encoder} | {where} | {statistics.median(us):.0f} ({min(us):.0f}-{max(us):.0f}) "
            f"| {faults:.1f} |"
        )


if __name__ == "__main__":
    main()
