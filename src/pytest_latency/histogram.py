"""HDR histograms of latencies: the aggregate form that crosses processes and lands in reports.

Owns `LatencyHistogram`: the fixed unit (microseconds), range (0 µs .. 1 hour) and precision (3
significant figures), clamping and counting of out-of-range values, percentiles, merging, and
the standard HdrHistogram V2 compressed base64 encoding (`"HISTFAAA..."`), so any HDR
implementation can read our histograms and xdist shards merge exactly. It is the only module
that imports `hdrh` (HdrHistogram_py), and does so lazily, so importing this module stays cheap;
it must not import pytest or any other part of the package.

Memory note (research/sdk-findings.md §4): one histogram at this range and precision holds
23,552 eight-byte counters, about 184 KiB. 500 tests × 4 metrics would be ~370 MB. So keep the raw
per-call values per test (a test has at most a few hundred) and build histograms only per
aggregate group (session, model, endpoint) at the end. Budgets are judged on the raw values
(`pytest_latency.stats`), not on histograms.

hdrh costs to design around: `record_value` is pure Python (~2 µs), a percentile query walks the
counters (~1-2 ms), `get_mean_value` ~90 ms (so the mean here comes from a running sum), and even
creating an empty histogram ~0.1 ms (ctypes zero-fills the 23,552 counters). So `BucketCounts`
counts values per HDR bucket in plain Python: the bucket index of a value is computed in one list
comprehension and counted by `Counter` in C (~0.2 µs per value instead of ~2 µs), one set of
values can be counted into several `BucketCounts` at once (a test's block and its group rollup),
and a `BucketCounts` encodes to the very blob `LatencyHistogram` would, without allocating an hdrh
histogram of its own.
"""

from __future__ import annotations

import math
import re
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Final

__all__ = [
    "HIGHEST_US",
    "LOWEST_US",
    "SIGNIFICANT_FIGURES",
    "BucketCounts",
    "LatencyHistogram",
    "record_values",
]

# 0 is trackable too: two chunks read in one go give a real 0 µs inter-chunk gap. `LOWEST_US`
# is hdrh's "lowest discernible value", the resolution at the bottom of the range.
LOWEST_US: Final = 1
HIGHEST_US: Final = 3_600_000_000  # one hour: no single LLM call or gap is longer
SIGNIFICANT_FIGURES: Final = 3  # values within 0.1%; 2 would be 1% at a seventh of the memory


def _new_hdr() -> Any:
    from hdrh.histogram import HdrHistogram

    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)


# The bucket layout of hdrh at our range and precision (lowest 1 → unit magnitude 0; 3 significant
# figures → 2,048 sub-buckets, half of them, 1,024, per bucket after the first). A value below
# 2,048 is its own index; above, bucket b = bit_length - 11 keeps the value's top 11 bits.
# `_check_layout` proves this against hdrh's own index function the first time it is used;
# `record_values` inlines the same arithmetic with these numbers written out.
_SUB_BUCKET_BITS: Final = 11
_HALF_COUNT_BITS: Final = 10
_layout_checked = False


def _bucket_index(value: int) -> int:
    """hdrh's counts index of an integer value in 0..HIGHEST_US (`_counts_index_for`)."""
    if value < 1 << _SUB_BUCKET_BITS:
        return value
    shift = value.bit_length() - _SUB_BUCKET_BITS
    return ((shift + 1) << _HALF_COUNT_BITS) + (value >> shift) - (1 << _HALF_COUNT_BITS)


def _check_layout() -> None:
    global _layout_checked
    if _layout_checked:
        return
    hdr = _new_hdr()
    probes = [0, 1, 1023, 1024, 2047, 2048, 2049, 4095, 4096, 65_535, 1_000_003, HIGHEST_US]
    for value in probes:
        if _bucket_index(value) != hdr._counts_index_for(value):  # pragma: no cover
            raise RuntimeError(f"hdrh's bucket layout changed (value {value})")
    _layout_checked = True


def _clamped(values: Sequence[float]) -> tuple[list[int], int, int]:
    """Values as the integer µs `LatencyHistogram.record` stores, with the below/above counts."""
    try:
        ints = list(map(round, values))  # NaN and ±inf raise: the slow path handles them
        if not ints or (min(values) >= 0 and max(values) <= HIGHEST_US):
            return ints, 0, 0
    except (ValueError, OverflowError):
        pass
    ints = []
    below = above = 0
    for value_us in values:
        if math.isnan(value_us):
            raise ValueError("cannot record NaN as a latency")
        if value_us < 0:
            below += 1
            ints.append(0)
        elif value_us > HIGHEST_US:
            above += 1
            ints.append(HIGHEST_US)
        else:
            ints.append(round(value_us))
    return ints, below, above


class BucketCounts:
    """Values counted per HDR bucket, in plain Python: the cheap way to build many histograms.

    Holds exactly what `LatencyHistogram.record` would put in a histogram (the same clamping,
    rounding and out-of-range counts, the exact integer sum, the extreme values), so
    `encode()` is bit-identical to recording the same values into a `LatencyHistogram` and
    encoding it, and `to_histogram()` equals that histogram. Creating one costs a `Counter`,
    not hdrh's 184 KiB of counters.
    """

    __slots__ = ("_above", "_below", "_counts", "_max", "_min", "_sum")

    def __init__(self) -> None:
        self._counts: Counter[int] = Counter()
        self._sum = 0
        self._below = 0
        self._above = 0
        self._min: int | None = None
        self._max: int | None = None

    def record_many(self, values_us: Iterable[float]) -> None:
        record_values(values_us, (self,))

    @property
    def count(self) -> int:
        return sum(self._counts.values())

    @property
    def total(self) -> int:
        """The exact sum of the recorded (rounded, clamped) values."""
        return self._sum

    @property
    def out_of_range(self) -> int:
        return self._below + self._above

    def add(self, other: BucketCounts) -> None:
        self._counts.update(other._counts)
        self._sum += other._sum
        self._below += other._below
        self._above += other._above
        self._extend(other._min, other._max)

    def _extend(self, low: int | None, high: int | None) -> None:
        if low is not None and (self._min is None or low < self._min):
            self._min = low
        if high is not None and (self._max is None or high > self._max):
            self._max = high

    def _apply(self, hdr: Any) -> None:
        """Add these counts into an hdrh histogram, as `record_value` would have."""
        counts = hdr.counts
        for index, count in self._counts.items():
            counts[index] += count
        hdr.total_count += sum(self._counts.values())
        if self._min is not None:
            hdr.min_value = min(hdr.min_value, self._min)
        if self._max is not None:
            hdr.max_value = max(hdr.max_value, self._max)

    def to_histogram(self) -> LatencyHistogram:
        hist = LatencyHistogram()
        hist.add_counts(self)
        return hist

    def encode(self) -> str:
        """`self.to_histogram().encode()`, through one reused hdrh histogram per thread."""
        hdr = getattr(_scratch, "hdr", None)
        if hdr is None:
            hdr = _scratch.hdr = _new_hdr()
        try:
            self._apply(hdr)
            blob: bytes = hdr.encode()
        finally:
            counts = hdr.counts
            for index in self._counts:
                counts[index] = 0
            hdr.total_count = 0
            hdr.min_value = sys.maxsize  # hdrh's "no value yet"
            hdr.max_value = 0
        return blob.decode("ascii")


_scratch = threading.local()


def record_values(values_us: Iterable[float], into: Sequence[BucketCounts]) -> None:
    """Count the values into each of `into` (the bucket indices are computed once)."""
    _check_layout()
    values = values_us if isinstance(values_us, list | tuple) else list(values_us)
    ints, below, above = _clamped(values)
    if not ints:
        return
    total = sum(ints)
    low, high = min(ints), max(ints)
    # `_bucket_index` inlined (a call per value would cost a third more).
    indices = [
        v if v < 2048 else (((b := v.bit_length() - 11) + 1) << 10) + (v >> b) - 1024 for v in ints
    ]
    for target in into:
        target._counts.update(indices)  # a list, not a mapping: counted in C
        target._sum += total
        target._below += below
        target._above += above
        target._extend(low, high)


class LatencyHistogram:
    """A mergeable latency histogram in microseconds.

    `record` never loses a value: anything below 0 or above one hour is clamped to the edge of
    the range and counted in `below_range` / `above_range` (hdrh alone would silently drop it).
    Percentiles follow HdrHistogram: the nearest-rank value, reported as the highest value
    equivalent to it at 3 significant figures, so `percentile(p)` is never below the true
    nearest-rank value and at most 0.1% above it.

    `mean` is exact for values recorded here (a running sum). A decoded histogram has only
    buckets, so its mean is reconstructed from bucket midpoints (within 0.05%); the out-of-range
    counters do not travel in the V2 encoding and start at zero after `decode`.
    """

    __slots__ = ("_above", "_below", "_hdr", "_sum")

    def __init__(self) -> None:
        self._init(_new_hdr(), 0.0)

    def _init(self, hdr: Any, total: float | None) -> None:
        self._hdr = hdr
        self._sum = total  # None: unknown (decoded), rebuilt from the buckets on demand
        self._below = 0
        self._above = 0

    def record(self, value_us: float) -> None:
        """Record one value in µs (rounded to an integer µs; clamped and counted if outside)."""
        if math.isnan(value_us):
            raise ValueError("cannot record NaN as a latency")
        if value_us < 0:
            self._below += 1
            value = 0
        elif value_us > HIGHEST_US:
            self._above += 1
            value = HIGHEST_US
        else:
            value = round(value_us)
        if not self._hdr.record_value(value):  # pragma: no cover - guarded by the clamp above
            raise RuntimeError(f"hdrh refused {value} µs inside its own range")
        if self._sum is not None:
            self._sum += value

    def record_many(self, values_us: Iterable[float]) -> None:
        """`record` each value (the same histogram, counted in bulk)."""
        counts = BucketCounts()
        counts.record_many(values_us)
        self.add_counts(counts)

    def add_counts(self, counts: BucketCounts) -> None:
        """Add values counted per bucket: the same as recording them here one by one."""
        if self._sum is not None:
            self._sum += counts.total
        counts._apply(self._hdr)
        self._below += counts._below
        self._above += counts._above

    @property
    def count(self) -> int:
        return int(self._hdr.get_total_count())

    @property
    def below_range(self) -> int:
        """Values under 0 µs recorded as 0 (a clock or attribution bug upstream)."""
        return self._below

    @property
    def above_range(self) -> int:
        """Values over one hour recorded as one hour."""
        return self._above

    def _require_values(self) -> None:
        if not self.count:
            raise ValueError("the histogram is empty: the metric is absent, not zero")

    def percentile(self, p: float) -> float:
        """The value at percentile `p` (0..100); raises ValueError when empty."""
        if not 0 <= p <= 100:
            raise ValueError(f"percentile must be in [0, 100], got {p!r}")
        self._require_values()
        return float(self._hdr.get_value_at_percentile(p))

    def percentiles(self, ps: Sequence[float]) -> dict[float, float]:
        """Several percentiles in one pass over the counters (one query costs ~1-2 ms)."""
        for p in ps:
            if not 0 <= p <= 100:
                raise ValueError(f"percentile must be in [0, 100], got {p!r}")
        self._require_values()
        found = self._hdr.get_percentile_to_value_dict(list(ps))
        return {p: float(found[p]) for p in ps}

    @property
    def min(self) -> float:
        self._require_values()
        return float(self._hdr.get_min_value())

    @property
    def max(self) -> float:
        self._require_values()
        return float(self._hdr.get_max_value())

    @property
    def mean(self) -> float:
        self._require_values()
        return self._total() / self.count

    def _total(self) -> float:
        if self._sum is None:
            self._sum = self._bucket_sum()
        return self._sum

    def _bucket_sum(self) -> float:
        # Walk the raw counters once; hdrh's iterator-based get_mean_value is ~50x slower.
        hdr = self._hdr
        total = 0
        for index, count in enumerate(hdr.counts):
            if count:
                value = hdr.get_value_from_index(index)
                low = hdr.get_lowest_equivalent_value(value)
                width = hdr.get_highest_equivalent_value(value) - low + 1
                total += count * (low + width // 2)  # the bucket's midpoint, as hdrh's mean
        return float(total)

    def buckets(self) -> list[tuple[float, int]]:
        """The non-empty buckets in ascending order: (the bucket's highest equivalent value,
        count), i.e. the values `percentile` reports, so a reader can redraw the distribution
        or regenerate values from a decoded histogram (e.g. for a rank test)."""
        hdr = self._hdr
        raw = bytes(hdr.counts)
        width = len(raw) // max(len(hdr.counts), 1)
        # Find the non-zero counters in C (a regex over the raw bytes) rather than looping over
        # all 23,552 of them in Python: ~0.1 ms instead of ~2.5 ms per histogram.
        indices = sorted({m.start() // width for m in re.finditer(rb"[^\x00]", raw)})
        out: list[tuple[float, int]] = []
        for index in indices:
            value = hdr.get_value_from_index(index)
            out.append((float(hdr.get_highest_equivalent_value(value)), int(hdr.counts[index])))
        return out

    def merge(self, other: LatencyHistogram) -> None:
        """Add every value of `other` into this histogram (exact: same bucket layout)."""
        total = self._total() + other._total()
        self._hdr.add(other._hdr)
        self._sum = total
        self._below += other._below
        self._above += other._above

    def encode(self) -> str:
        """The standard HdrHistogram V2 compressed, base64 encoding (`"HISTFAAA..."`)."""
        blob: bytes = self._hdr.encode()
        return blob.decode("ascii")

    @classmethod
    def decode(cls, blob: str) -> LatencyHistogram:
        """Read a V2 blob written by `encode` or by any other HdrHistogram implementation.

        A blob with another range or precision is re-recorded into ours; values it holds above
        one hour are clamped and counted like `record` does. Raises ValueError on a bad blob.
        """
        from hdrh.histogram import HdrHistogram

        if not isinstance(blob, str):
            raise TypeError(f"expected a str blob, got {type(blob).__name__}")
        try:
            decoded = HdrHistogram.decode(blob.encode("ascii"))
        except Exception as exc:
            # hdrh raises TypeError, zlib.error, binascii.Error or its own cookie/length errors.
            raise ValueError(f"not an HdrHistogram V2 blob: {exc}") from exc
        hist = cls.__new__(cls)
        if (
            decoded.lowest_trackable_value == LOWEST_US
            and decoded.highest_trackable_value == HIGHEST_US
            and decoded.significant_figures == SIGNIFICANT_FIGURES
            and decoded.word_size == 8
        ):
            hist._init(decoded, None)
            return hist
        hist._init(_new_hdr(), None)
        ours = hist._hdr
        # A foreign layout: re-record bucket by bucket (hdrh.add would do the same, but raises
        # IndexError for values beyond our range instead of clamping them).
        for index in range(decoded.counts_len):
            count = decoded.get_count_at_index(index)
            if count:
                value = decoded.get_value_from_index(index)
                if value > HIGHEST_US:
                    hist._above += count
                    value = HIGHEST_US
                ours.record_value(value, count)
        return hist

    def __repr__(self) -> str:
        return f"<LatencyHistogram count={self.count} range=0..{HIGHEST_US} us>"
