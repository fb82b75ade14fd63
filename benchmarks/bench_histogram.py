"""The histogram codec: our own V2 codec against hdrh's public API (and the old private use).

Issue #13 asks whether `pytest_latency.histogram` should use only hdrh's public API or own the
HdrHistogram V2 codec with hdrh as the test oracle. This script times the operations the result
file needs, on realistic sizes (default: 1,000 tests × 40 per-call values each, one metric, and
1,000 tests × 1,200 ITL gaps, ~1.2 M values), for three implementations side by side in one run
(interleaved, ``--reps`` times, median reported, ratios to ours):

    ours      pytest_latency.histogram: a Counter of buckets, the V2 codec in Python (stdlib)
    public    hdrh's public API only: values pre-counted per bucket the same way (a Counter), then
              `record_value(value, count)` per bucket into a fresh `HdrHistogram`, `encode`,
              `HdrHistogram.decode`, `add`, `get_percentile_to_value_dict`, `get_min_value`,
              `get_max_value`, `get_mean_value`, the recorded iterator for the buckets
    legacy    histogram.py at git ``--legacy REF`` (default de0ee31, the last commit before the
              own codec: the module that wrote hdrh's private `counts`, `total_count`, `min_value`);
              skipped with ``--legacy ''``

Stages, per metric shape: ``count+encode`` (each test's values counted into its own histogram
and a pooled one, each test's blob encoded: what `build_result` does), ``decode+buckets`` (every
test's blob decoded and its buckets listed: what the report's per-test ITL chart and `compare`
do), ``merge`` (4 shards' pooled blobs decoded and merged,
then encoded: `pytest-latency merge`, xdist), ``stats`` (the pooled blob decoded, 7 percentiles,
min, max, mean, buckets) and ``record 1-by-1`` (`record` per value, 40,000 values). It also
checks that the three produce identical blobs and statistics.

    python benchmarks/bench_histogram.py            # ~1 min
    python benchmarks/bench_histogram.py --quick    # 200 tests, 1 rep
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import statistics
import subprocess
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _common import load

from pytest_latency import histogram as ours

PERCENTILES = (50, 90, 95, 99, 99.9, 0, 100)
H = ours.HIGHEST_US
COMMAND = "python benchmarks/bench_histogram.py"


class Public:
    """The same operations through hdrh's public API only."""

    @staticmethod
    def _new() -> Any:
        from hdrh.histogram import HdrHistogram

        return HdrHistogram(ours.LOWEST_US, H, ours.SIGNIFICANT_FIGURES)

    @staticmethod
    def _count(values: Sequence[float]) -> Counter[int]:
        ints = [min(max(round(v), 0), H) for v in values]
        return Counter(
            v if v < 2048 else (((b := v.bit_length() - 11) + 1) << 10) + (v >> b) - 1024
            for v in ints
        )

    @classmethod
    def _filled(cls, counts: Counter[int]) -> Any:
        hdr = cls._new()
        for index, count in counts.items():
            hdr.record_value(hdr.get_value_from_index(index), count)
        return hdr

    @classmethod
    def count_encode(cls, tests: list[list[float]]) -> tuple[list[str], str]:
        pooled: Counter[int] = Counter()
        blobs = []
        for values in tests:
            own = cls._count(values)
            pooled.update(own)
            blobs.append(cls._filled(own).encode().decode())
        return blobs, cls._filled(pooled).encode().decode()

    @staticmethod
    def _buckets(hdr: Any) -> list[tuple[float, int]]:
        # The fastest public way: the counts by index up to the highest (the recorded iterator
        # is ~30x slower). `counts` itself is hdrh's internal ctypes array.
        out = []
        for index in range(hdr.get_counts_array_index(hdr.get_max_value()) + 1):
            count = hdr.get_count_at_index(index)
            if count:
                value = hdr.get_highest_equivalent_value(hdr.get_value_from_index(index))
                out.append((float(value), count))
        return out

    @classmethod
    def decode_all(cls, blobs: list[str]) -> list[Any]:
        from hdrh.histogram import HdrHistogram

        return [cls._buckets(HdrHistogram.decode(b.encode())) for b in blobs]

    @classmethod
    def merge(cls, blobs: list[str]) -> str:
        from hdrh.histogram import HdrHistogram

        merged = cls._new()
        for blob in blobs:
            merged.add(HdrHistogram.decode(blob.encode()))
        return str(merged.encode().decode())

    @classmethod
    def stats(cls, blob: str) -> tuple[Any, ...]:
        from hdrh.histogram import HdrHistogram

        hdr = HdrHistogram.decode(blob.encode())
        found = hdr.get_percentile_to_value_dict(list(PERCENTILES))
        buckets = cls._buckets(hdr)
        ps = {p: float(found[p]) for p in PERCENTILES}
        return ps, hdr.get_min_value(), hdr.get_max_value(), hdr.get_mean_value(), buckets

    @classmethod
    def one_by_one(cls, values: list[float]) -> str:
        hdr = cls._new()
        for value in values:
            hdr.record_value(min(max(round(value), 0), H))
        return str(hdr.encode().decode())


class Module:
    """The operations through a `histogram` module's own API (ours, or the legacy one)."""

    def __init__(self, module: Any) -> None:
        self.m = module

    def count_encode(self, tests: list[list[float]]) -> tuple[list[str], str]:
        pooled = self.m.BucketCounts()
        blobs = []
        for values in tests:
            own = self.m.BucketCounts()
            self.m.record_values(values, (own, pooled))
            blobs.append(own.encode())
        return blobs, pooled.encode()

    def decode_all(self, blobs: list[str]) -> list[Any]:
        return [self.m.LatencyHistogram.decode(b).buckets() for b in blobs]

    def merge(self, blobs: list[str]) -> str:
        merged = self.m.LatencyHistogram()
        for blob in blobs:
            merged.merge(self.m.LatencyHistogram.decode(blob))
        return str(merged.encode())

    def stats(self, blob: str) -> tuple[Any, ...]:
        h = self.m.LatencyHistogram.decode(blob)
        return h.percentiles(PERCENTILES), h.min, h.max, h.mean, h.buckets()

    def one_by_one(self, values: list[float]) -> str:
        h = self.m.LatencyHistogram()
        for value in values:
            h.record(value)
        return str(h.encode())


def legacy_module(ref: str) -> Any:
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(
        ["git", "-C", str(root), "show", f"{ref}:src/pytest_latency/histogram.py"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    module = types.ModuleType("_legacy_histogram")
    module.__file__ = f"{ref}:src/pytest_latency/histogram.py"
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", type=int, default=1000)
    ap.add_argument("--per-call", type=int, default=40, help="per-call values per test")
    ap.add_argument("--gaps", type=int, default=1200, help="ITL gaps per test")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--legacy", default="de0ee31", help="git ref of the old histogram.py ('' = no)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.tests, args.reps = 200, 1
    argv = " ".join(sys.argv[1:])
    print(f"command: {COMMAND}{' ' + argv if argv else ''}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  cores: {os.cpu_count()}  "
          f"load average {load()}")  # fmt: skip

    rng = random.Random(13)
    shapes = {  # TTFT-like per-call values around 100 ms; ITL gaps around 13 ms, some 0 µs
        "per-call": [
            [rng.lognormvariate(11.5, 0.8) for _ in range(args.per_call)] for _ in range(args.tests)
        ],
        "itl": [
            [0.0 if rng.random() < 0.02 else rng.lognormvariate(9.5, 1.0) for _ in range(args.gaps)]
            for _ in range(args.tests)
        ],
    }
    impls: dict[str, Any] = {"ours": Module(ours), "public": Public}
    if args.legacy:
        impls["legacy"] = Module(legacy_module(args.legacy))
    names = list(impls)

    times: dict[tuple[str, str, str], list[float]] = {}
    results: dict[tuple[str, str, str], Any] = {}
    for _ in range(args.reps):
        for shape, tests in shapes.items():
            for name in names:  # interleaved: load drift hits all three alike
                impl = impls[name]
                stages_out = {"count+encode": timed(functools.partial(impl.count_encode, tests))}
                blobs, pooled = stages_out["count+encode"][1]
                # Shards: the tests split in `--shards`, each pooled into one blob.
                shard_blobs = [
                    impl.count_encode(tests[i :: args.shards])[1] for i in range(args.shards)
                ]
                stages: list[tuple[str, Callable[[], Any]]] = [
                    ("decode+buckets", functools.partial(impl.decode_all, blobs)),
                    ("merge", functools.partial(impl.merge, shard_blobs)),
                    ("stats", functools.partial(impl.stats, pooled)),
                ]
                if shape == "per-call":
                    flat = [v for values in tests for v in values]
                    stages.append(("record 1-by-1", functools.partial(impl.one_by_one, flat)))
                for stage, fn in stages:
                    stages_out[stage] = timed(fn)
                for stage, (t, out) in stages_out.items():
                    times.setdefault((shape, stage, name), []).append(t)
                    results[(shape, stage, name)] = out

    same = True
    for (shape, stage, name), out in results.items():
        if name != "ours" and out != results[(shape, stage, "ours")]:
            same = False
            print(f"DIFFERENT: {shape} {stage}: {name} differs from ours")
    print(f"identical blobs and statistics across {', '.join(names)}: {same}")
    print(f"load average after: {load()}")
    print()
    header = f"{'shape':9} {'stage':14}" + "".join(f"{n:>11}" for n in names)
    print(header + "".join(f"{n + '/ours':>13}" for n in names[1:]))
    for shape in shapes:
        for stage in dict.fromkeys(s for (sh, s, _) in times if sh == shape):
            med = {n: statistics.median(times[(shape, stage, n)]) for n in names}
            row = f"{shape:9} {stage:14}" + "".join(f"{med[n] * 1e3:9.1f}ms" for n in names)
            print(row + "".join(f"{med[n] / med['ours']:12.1f}x" for n in names[1:]))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
