"""Encoding and decoding a layout's chunks: numcodecs' zstd against contexts each thread keeps.

    .venv/bin/python benchmarks/encode.py [--chunks N] [--rounds R]

Each way compresses the same chunks (32,768 values: sorted int32 indices and float32 counts, as
a write of the benchmark data makes them), then decompresses them into one joined array as a
read does (numcodecs' ``decode`` then a copy into place, against decoding in place), in a fresh
process of its own, once as a plain process starts and once with
``MALLOC_TRIM_THRESHOLD_=65536``, as a distributed nanny starts its workers; the rounds
alternate the four, so the machine's noise falls on each alike. Prints microseconds and minor
page faults per chunk.
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
from sporadik_dask.store import zstd
chunks, ours = int(sys.argv[2]), sys.argv[1] != "numcodecs"
rng = np.random.default_rng(0)
made = [np.sort(rng.integers(0, 20_000, 32_768)).astype(np.int32) for _ in range(chunks // 2)]
made += [rng.poisson(0.6, 32_768).astype(np.float32).view(np.int32) for _ in range(chunks // 2)]
codec = numcodecs.Zstd(level=0)
encode = zstd.encoder(codec) if ours else codec.encode
decode_into = zstd.decoder()
joined = np.empty(len(made) * 32_768, dtype=np.int32)

def decode(k, blob):
    out = joined[k * 32_768 : (k + 1) * 32_768]
    if ours:
        decode_into(blob, out)
    else:
        out[:] = np.frombuffer(codec.decode(blob), dtype=np.int32)

def timed(step, items):
    step(*items[0])
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    for item in items:
        step(*item)
    return {
        "us": (time.perf_counter() - start) / len(items) * 1e6,
        "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / len(items),
    }

blobs = [encode(chunk) for chunk in made]
found = {
    "encode": timed(encode, [(chunk,) for chunk in made]),
    "decode": timed(decode, list(enumerate(blobs))),
}
assert (joined == np.concatenate(made)).all()
print(json.dumps(found))
"""

CASES = [
    ("numcodecs", "plain process"),
    ("kept contexts", "plain process"),
    ("numcodecs", "nanny's trim threshold"),
    ("kept contexts", "nanny's trim threshold"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=4_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    found: dict[tuple[str, str], list[dict[str, dict[str, float]]]] = {c: [] for c in CASES}
    for _ in range(args.rounds):
        for way, where in CASES:
            environment = dict(os.environ)
            environment.pop("MALLOC_TRIM_THRESHOLD_", None)
            if where != "plain process":
                environment["MALLOC_TRIM_THRESHOLD_"] = "65536"
            name = "numcodecs" if way == "numcodecs" else "kept"
            done = subprocess.run(
                [sys.executable, "-c", CHILD, name, str(args.chunks)],
                env=environment,
                capture_output=True,
                text=True,
                check=True,
            )
            found[way, where].append(json.loads(done.stdout))
    print(f"{args.chunks:,} chunks of 32,768 values, {args.rounds} rounds (median, min-max)")
    print("| step | way | process | µs per chunk | faults per chunk |")
    print("|---|---|---|---|---|")
    for step in ("encode", "decode"):
        for (way, where), runs in found.items():
            us = [run[step]["us"] for run in runs]
            faults = statistics.median(run[step]["faults"] for run in runs)
            print(
                f"| {step} | {way} | {where} | {statistics.median(us):.0f} "
                f"({min(us):.0f}-{max(us):.0f}) | {faults:.1f} |"
            )


if __name__ == "__main__":
    main()
