"""HDR histograms of latencies: the aggregate form that crosses processes and lands in reports.

Owns `LatencyHistogram` and `BucketCounts`: the fixed unit (microseconds), range (0 µs .. 1 hour)
and precision (3 significant figures), clamping and counting of out-of-range values, percentiles,
merging, and the standard HdrHistogram V2 compressed base64 encoding (`"HISTFAAA..."`), so any
HDR implementation reads our histograms, we read theirs, and xdist shards merge exactly. Stdlib
only: it must not import pytest, hdrh or any other part of the package.

Why we own the V2 codec rather than use hdrh (HdrHistogram_py): the issue asked for hdrh's
public API only, or our own codec with hdrh as the test oracle, chosen by measurement
(benchmarks/bench_histogram.py; docs/performance.md, "Histogram codec"). With the public API,
values pre-counted per bucket still go in by `record_value(value, count)` at ~2 µs a bucket
into a fresh 23,552-counter ctypes array (~0.1 ms, 184 KiB), and buckets, percentiles and the
mean walk those counters in Python; going fast with hdrh meant writing its private `counts`,
`total_count` and `min_value`, as this module did until issue #13. Here a histogram is a
`Counter` of bucket index → count: counting is a list comprehension plus `Counter.update` in C
(~0.2 µs per value), merging is `Counter.update`, statistics sort only the non-empty buckets,
and the codec (~110 lines) works per non-empty bucket through memo lookups. At 1,000 tests the
public API is 2-5x slower to build a result file's blobs, 2-14x slower to read them back with
their buckets, and 5-30x slower for pooled statistics; it wins only the merge of a few pooled
blobs (hdrh decodes in C), ~10-30 ms in all. Our blobs are byte-identical to hdrh's (the same
zlib level); hdrh is the test oracle (tests/test_histogram.py) and a dev dependency only.

Memory note (research/sdk-findings.md §4): a histogram holds only its non-empty buckets (a few
hundred to a few thousand), but percentiles still come from buckets, so keep the raw per-call
values per test and judge budgets on them (`pytest_latency.stats`); histograms are for aggregate
groups (session, model, endpoint), for merging shards and for tools reading the result file.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import math
import operator
import re
import struct
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

__all__ = [
    "HIGHEST_US",
    "LOWEST_US",
    "MAX_BLOB_CHARS",
    "MAX_TOTAL_COUNT",
    "SIGNIFICANT_FIGURES",
    "BucketCounts",
    "LatencyHistogram",
    "record_values",
]

# 0 is trackable too: two chunks read in one go give a real 0 µs inter-chunk gap. `LOWEST_US`
# is HdrHistogram's "lowest discernible value", the resolution at the bottom of the range.
LOWEST_US: Final = 1
HIGHEST_US: Final = 3_600_000_000  # one hour: no single LLM call or gap is longer
SIGNIFICANT_FIGURES: Final = 3  # values within 0.1%; 2 would be 1% at a seventh of the buckets
# A histogram counts at most 2^53 values (9 * 10^15: a million calls a second for 285 years;
# HdrHistogram's own counts go to 2^63): a blob claiming more is damaged or hostile (a result
# file is input), and below it every total is exact as a float, so rank statistics over the
# counts stay exact in their counts.
MAX_TOTAL_COUNT: Final = 2**53


# ---- the bucket layout ---------------------------------------------------------------------------


class _Layout:
    """HdrHistogram's bucket layout for a (lowest, highest, significant figures) triple: which
    counts index a value falls in, and back. Ours is `_OURS`; others come from decoded blobs."""

    __slots__ = ("counts_len", "half_bits", "unit_bits")
    counts_len: int
    half_bits: int  # log2 of half the sub-buckets: 10 for 3 figures
    unit_bits: int

    def __init__(self, lowest: int, highest: int, figures: int) -> None:
        if not 1 <= figures <= 5 or lowest < 1 or highest < 2 * lowest:
            raise ValueError(f"bad layout: lowest {lowest}, highest {highest}, {figures} figures")
        self.unit_bits = lowest.bit_length() - 1  # floor(log2(lowest))
        # Enough sub-buckets to tell 10^figures values apart at unit resolution (2,048 for 3).
        sub_bits: int = (2 * 10**figures - 1).bit_length()  # ceil(log2(2 * 10^figures))
        self.half_bits = sub_bits - 1
        buckets, untrackable = 1, 1 << (sub_bits + self.unit_bits)
        while untrackable <= highest:
            untrackable <<= 1
            buckets += 1
        self.counts_len = (buckets + 1) << self.half_bits

    def index(self, value: int) -> int:
        sub_bits = self.half_bits + 1
        shift = max(value.bit_length() - sub_bits, self.unit_bits)  # the bucket + unit bits
        bucket = shift - self.unit_bits
        return (bucket << self.half_bits) + (value >> shift)

    def lowest(self, index: int) -> int:
        """The lowest value of the bucket at `index` (HdrHistogram's `valueFromIndex`)."""
        bucket = (index >> self.half_bits) - 1
        sub = index & ((1 << self.half_bits) - 1)
        if bucket < 0:
            return sub << self.unit_bits
        return (sub + (1 << self.half_bits)) << (bucket + self.unit_bits)

    def width(self, index: int) -> int:
        """How many values share the bucket at `index` (1 at the bottom of the range)."""
        return 1 << (max((index >> self.half_bits) - 1, 0) + self.unit_bits)


_OURS: Final = _Layout(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)  # 23,552 buckets
# `record_values` inlines `_OURS.index` with these numbers written out (a call per value would
# cost a third more): a value below 2,048 is its own index; above, bucket b = bit_length - 11
# keeps the value's top 11 bits. tests/test_histogram.py checks both against hdrh's layout.


def _highest(index: int) -> int:
    """The highest value equivalent to those in bucket `index`: what percentiles report."""
    return _OURS.lowest(index) + _OURS.width(index) - 1


# ---- the V2 codec ------------------------------------------------------------------------------
#
# A blob is base64 of: a big-endian header (compression cookie, length of what follows) and the
# zlib-deflated payload. The payload is a 40-byte big-endian header (encoding cookie, length of
# the counts, normalizing index offset, significant figures, lowest and highest trackable
# values, integer-to-double conversion ratio) and the counts from index 0 to the highest
# non-empty one, each ZigZag LEB128 (at most 9 bytes, the 9th holding 8 bits), a run of n empty
# buckets written as -n (hdrh writes -1 for a single one, as we do; Java writes 0: both read).

_ENCODING_COOKIE: Final = 0x1C849303 | 0x10  # V2, "word size" 9 (the LEB128 maximum)
_COMPRESSION_COOKIE: Final = 0x1C849304 | 0x10
_OUTER: Final = struct.Struct(">II")
_PAYLOAD: Final = struct.Struct(">IIIIQQd")


def _leb(n: int) -> bytes:
    """`n` (a signed 64-bit count, negative for a zero run) ZigZag LEB128 encoded."""
    v = 2 * n if n >= 0 else -2 * n - 1
    out = bytearray()
    for _ in range(8):
        if v < 0x80:
            out.append(v)
            return bytes(out)
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)  # the 9th byte carries the last 8 bits whole
    return bytes(out)


def _unleb(token: bytes) -> int:
    """The signed count of one ZigZag LEB128 token (as `_TOKEN` splits them)."""
    v = 0
    for i, byte in enumerate(token):
        v |= (byte & 0x7F if i < 8 else byte) << (7 * i)
    return -((v + 1) >> 1) if v & 1 else v >> 1


class _Memo(dict[Any, Any]):
    """A dict that computes a missing entry (and keeps it, up to a bound)."""

    def __init__(self, compute: Callable[[Any], Any]) -> None:
        super().__init__()
        self._compute = compute

    def __missing__(self, key: Any) -> Any:
        value = self._compute(key)
        if len(self) < 1 << 15:  # real counts and runs repeat: a few hundred distinct ones
            self[key] = value
        return value


# Counts and runs are mostly small and repeat, so their encodings are memoized and the codec is
# written as `map` over C functions and memo lookups (a dict's own __getitem__, no Python frame
# per bucket): a Python loop over the buckets would be 3x slower, and hdrh does this part in C.
_TOKEN_OF_COUNT: Final = _Memo(_leb)
_TOKEN_OF_STEP: Final = _Memo(lambda step: _leb(1 - step) if step > 1 else b"")  # a run
_COUNT_OF_TOKEN: Final = _Memo(_unleb)
_STEP_OF_TOKEN: Final = _Memo(lambda token: max(-_unleb(token), 1))
# One token: up to 7 continuation bytes and a final one, or 8 and a 9th of 8 full bits.
_TOKEN: Final = re.compile(rb"[\x80-\xff]{8}[\x00-\xff]|[\x80-\xff]{0,7}[\x00-\x7f]", re.DOTALL)


def _encode(counts: Counter[int]) -> str:
    indices = sorted(counts)
    steps = map(operator.sub, indices, [-1, *indices[:-1]])  # 1 + the empty buckets before
    tokens = map(
        operator.add,
        map(_TOKEN_OF_STEP.__getitem__, steps),
        map(_TOKEN_OF_COUNT.__getitem__, map(counts.__getitem__, indices)),
    )
    out = b"".join(tokens)
    header = _PAYLOAD.pack(
        _ENCODING_COOKIE, len(out), 0, SIGNIFICANT_FIGURES, LOWEST_US, HIGHEST_US, 1.0
    )
    deflated = zlib.compress(header + out)  # the default level, as hdrh and Java's Deflater
    return base64.b64encode(_OUTER.pack(_COMPRESSION_COOKIE, len(deflated)) + deflated).decode()


def _counts_in(data: bytes, start: int, end: int) -> dict[int, int]:
    """The non-zero counts (index → count) of a payload's ZigZag LEB128 counts."""
    tokens = _TOKEN.findall(data, start, end)
    if sum(map(len, tokens)) != end - start:
        raise ValueError("the counts end inside a number")
    seq = list(map(_COUNT_OF_TOKEN.__getitem__, tokens))  # counts, and -n for n empty buckets
    # Each token advances the index by one (a count) or by n (a run of n empty buckets).
    indices = itertools.accumulate(map(_STEP_OF_TOKEN.__getitem__, tokens), initial=-1)
    next(indices)
    keep = list(map(operator.gt, seq, itertools.repeat(0)))
    return dict(zip(itertools.compress(indices, keep), itertools.compress(seq, keep), strict=True))


# A decoded payload is never larger than its layout allows: the 40-byte header and at most one
# 9-byte token per bucket (23,552 buckets: 212 kB for ours), and never more than 1 MiB for any
# layout (5 figures up to 2^63 would allow 55 MB). Inflating stops there, so a zlib bomb costs
# what a real blob costs; and a blob longer than the deflate bound of that 1 MiB cannot be one.
_MAX_PAYLOAD: Final = 1 << 20
_MAX_TOKEN: Final = 9
MAX_BLOB_CHARS: Final = 4 * (_OUTER.size + _MAX_PAYLOAD + (_MAX_PAYLOAD >> 12) + 64) // 3


def _inflate(deflated: bytes) -> tuple[bytes, _Layout | None]:
    """The payload of a blob's zlib stream and its layout (None: ours), inflating no more than
    the header says the counts take and the layout allows."""
    inflater = zlib.decompressobj()
    head = inflater.decompress(deflated, _PAYLOAD.size)
    if len(head) < _PAYLOAD.size:
        raise ValueError("the payload ends inside its header")
    cookie, length, _offset, figures, lowest, highest, _ratio = _PAYLOAD.unpack(head)
    # The offset and ratio are ignored, as hdrh does: they are 0 and 1.0 outside Java's
    # shifted and double histograms, which latency tools do not write.
    if cookie != _ENCODING_COOKIE:
        raise ValueError(f"bad payload cookie {cookie:#x}")
    ours = (lowest, highest, figures) == (LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)
    layout = None if ours else _Layout(lowest, highest, figures)
    room = min(_MAX_TOKEN * (layout or _OURS).counts_len, _MAX_PAYLOAD - _PAYLOAD.size)
    if length > room:
        raise ValueError(f"counts of {length} bytes: more than this layout's {room}")
    body = inflater.decompress(inflater.unconsumed_tail, length)
    # The stream must end with the counts (as every HdrHistogram writes it): one more byte of
    # output, or a stream that does not end and check its sum, is a damaged blob.
    extra = inflater.decompress(inflater.unconsumed_tail, 1)  # not flush(): it inflates it all
    if len(body) != length or extra or not inflater.eof:
        raise ValueError(f"payload length {length} does not match its counts")
    return head + body, layout


def _decode(blob: str) -> tuple[dict[int, int], _Layout | None]:
    """A blob's counts per index and its layout (None: ours). Raises ValueError if malformed,
    too large for its layout, or counting more than MAX_TOTAL_COUNT values."""
    try:
        if len(blob) > MAX_BLOB_CHARS:
            raise ValueError(f"{len(blob)} characters, more than any histogram takes")
        raw = base64.b64decode(blob.encode("ascii"))
        cookie, length = _OUTER.unpack_from(raw)
        if cookie != _COMPRESSION_COOKIE or length != len(raw) - _OUTER.size:
            raise ValueError(f"bad cookie {cookie:#x} or length {length}")
        data, foreign = _inflate(raw[_OUTER.size :])
        counts = _counts_in(data, _PAYLOAD.size, len(data))
        if counts and max(counts) >= (foreign or _OURS).counts_len:
            raise ValueError("counts beyond the histogram's range")
        total = sum(counts.values())
        if total > MAX_TOTAL_COUNT:
            raise ValueError(f"{total} values, more than the {MAX_TOTAL_COUNT} a histogram holds")
    except (ValueError, UnicodeError, binascii.Error, struct.error, zlib.error, IndexError) as exc:
        raise ValueError(f"not an HdrHistogram V2 blob: {exc}") from None
    return counts, foreign


# Per bucket index (at most 23,552 of each), for statistics over many buckets at C speed.
_LOWEST: Final = _Memo(_OURS.lowest)
_HIGHEST: Final = _Memo(_highest)
_MIDPOINT: Final = _Memo(lambda i: _OURS.lowest(i) + _OURS.width(i) // 2)  # HdrHistogram's mean


# ---- counting --------------------------------------------------------------------------------


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
    """Values counted per HDR bucket: the cheap way to build many histograms.

    Holds exactly what `LatencyHistogram.record` would put in a histogram (the same clamping,
    rounding and out-of-range counts, the exact integer sum), so `encode()` is bit-identical to
    recording the same values into a `LatencyHistogram` and encoding it, and `to_histogram()`
    equals that histogram. Creating one costs a `Counter`.
    """

    __slots__ = ("_above", "_below", "_counts", "_n", "_sum")

    def __init__(self) -> None:
        self._counts: Counter[int] = Counter()
        self._n = 0
        self._sum = 0
        self._below = 0
        self._above = 0

    def record_many(self, values_us: Iterable[float]) -> None:
        record_values(values_us, (self,))

    @property
    def count(self) -> int:
        return self._n

    @property
    def total(self) -> int:
        """The exact sum of the recorded (rounded, clamped) values."""
        return self._sum

    @property
    def out_of_range(self) -> int:
        return self._below + self._above

    def add(self, other: BucketCounts) -> None:
        self._counts.update(other._counts)
        self._n += other._n
        self._sum += other._sum
        self._below += other._below
        self._above += other._above

    def to_histogram(self) -> LatencyHistogram:
        hist = LatencyHistogram()
        hist.add_counts(self)
        return hist

    def encode(self) -> str:
        """`self.to_histogram().encode()`."""
        return _encode(self._counts)


def record_values(values_us: Iterable[float], into: Sequence[BucketCounts]) -> None:
    """Count the values into each of `into` (the bucket indices are computed once)."""
    values = values_us if isinstance(values_us, list | tuple) else list(values_us)
    ints, below, above = _clamped(values)
    if not ints:
        return
    total = sum(ints)
    # `_OURS.index` inlined (a call per value would cost a third more).
    indices = [
        v if v < 2048 else (((b := v.bit_length() - 11) + 1) << 10) + (v >> b) - 1024 for v in ints
    ]
    for target in into:
        target._counts.update(indices)  # a list, not a mapping: counted in C
        target._n += len(indices)
        target._sum += total
        target._below += below
        target._above += above


# ---- the histogram -----------------------------------------------------------------------------


class LatencyHistogram:
    """A mergeable latency histogram in microseconds.

    `record` never loses a value: anything below 0 or above one hour is clamped to the edge of
    the range and counted in `below_range` / `above_range` (HdrHistogram alone would drop it).
    Percentiles follow HdrHistogram: the nearest-rank value, reported as the highest value
    equivalent to it at 3 significant figures, so `percentile(p)` is never below the true
    nearest-rank value and at most 0.1% above it. `min` and `max` are the lowest and highest
    values equivalent to the extreme buckets, as HdrHistogram reports them.

    `mean` is exact for values recorded here (a running sum). A decoded histogram has only
    buckets, so its mean is reconstructed from bucket midpoints (within 0.05%); the out-of-range
    counters do not travel in the V2 encoding and start at zero after `decode`.
    """

    __slots__ = ("_above", "_below", "_counts", "_n", "_sum")

    def __init__(self) -> None:
        self._counts: Counter[int] = Counter()  # bucket index → count, only non-empty buckets
        self._n = 0
        self._sum: float | None = 0  # None: unknown (decoded), rebuilt from the buckets on demand
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
        self._counts[_OURS.index(value)] += 1
        self._n += 1
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
        self._counts.update(counts._counts)
        self._n += counts._n
        self._below += counts._below
        self._above += counts._above

    @property
    def count(self) -> int:
        return self._n

    @property
    def below_range(self) -> int:
        """Values under 0 µs recorded as 0 (a clock or attribution bug upstream)."""
        return self._below

    @property
    def above_range(self) -> int:
        """Values over one hour recorded as one hour."""
        return self._above

    def _require_values(self) -> None:
        if not self._n:
            raise ValueError("the histogram is empty: the metric is absent, not zero")

    def percentile(self, p: float) -> float:
        """The value at percentile `p` (0..100); raises ValueError when empty."""
        return self.percentiles([p])[p]

    def percentiles(self, ps: Sequence[float]) -> dict[float, float]:
        """Several percentiles in one pass over the non-empty buckets."""
        for p in ps:
            if not 0 <= p <= 100:
                raise ValueError(f"percentile must be in [0, 100], got {p!r}")
        self._require_values()
        indices = sorted(self._counts)
        ranks = list(itertools.accumulate(self._counts[i] for i in indices))
        out: dict[float, float] = {}
        for p in ps:
            # HdrHistogram's rank: the count at p rounded half up, at least 1 (same arithmetic).
            rank = max(int(p * self._n / 100 + 0.5), 1)
            index = indices[bisect.bisect_left(ranks, rank)]
            out[p] = float(_HIGHEST[index] if p else _LOWEST[index])
        return out

    @property
    def min(self) -> float:
        self._require_values()
        return float(_LOWEST[min(self._counts)])

    @property
    def max(self) -> float:
        self._require_values()
        return float(_HIGHEST[max(self._counts)])

    @property
    def mean(self) -> float:
        self._require_values()
        return self._total() / self._n

    def _total(self) -> float:
        if self._sum is None:
            counts = self._counts
            return float(
                sum(map(operator.mul, counts.values(), map(_MIDPOINT.__getitem__, counts)))
            )
        return self._sum

    def buckets(self) -> list[tuple[float, int]]:
        """The non-empty buckets in ascending order: (the bucket's highest equivalent value,
        count), i.e. the values `percentile` reports, so a reader can redraw the distribution
        or regenerate values from a decoded histogram (e.g. for a rank test)."""
        indices = sorted(self._counts)
        highest = map(float, map(_HIGHEST.__getitem__, indices))
        return list(zip(highest, map(self._counts.__getitem__, indices), strict=True))

    def merge(self, other: LatencyHistogram) -> None:
        """Add every value of `other` into this histogram (exact: same bucket layout)."""
        self._sum = self._total() + other._total()
        self._counts.update(other._counts)
        self._n += other._n
        self._below += other._below
        self._above += other._above

    def encode(self) -> str:
        """The standard HdrHistogram V2 compressed, base64 encoding (`"HISTFAAA..."`)."""
        return _encode(self._counts)

    @classmethod
    def decode(cls, blob: str) -> LatencyHistogram:
        """Read a V2 blob written by `encode` or by any other HdrHistogram implementation.

        A blob with another range or precision is re-recorded into ours; values it holds above
        one hour are clamped and counted like `record` does. Raises ValueError on a bad blob.
        """
        if not isinstance(blob, str):
            raise TypeError(f"expected a str blob, got {type(blob).__name__}")
        counts, foreign = _decode(blob)
        hist = cls()
        hist._sum = None
        if foreign is None:
            # Our own layout, but maybe not our writer: HdrHistogram's counts run past the
            # bucket of its highest value (hdrh records 3,600,809,984 with a highest of one
            # hour), where `record` clamps anything over one hour; a bucket past one hour's is
            # clamped and counted the same way (it was read as in range: found by Hypothesis).
            top = _OURS.index(HIGHEST_US)
            for index, count in counts.items():
                if index > top:
                    hist._above += count
                    index = top
                hist._counts[index] += count
        else:
            for index, count in counts.items():
                value = foreign.lowest(index)
                if value > HIGHEST_US:
                    hist._above += count
                    value = HIGHEST_US
                hist._counts[_OURS.index(value)] += count
        hist._n = sum(counts.values())  # at most MAX_TOTAL_COUNT: `_decode` checks
        return hist

    def __repr__(self) -> str:
        return f"<LatencyHistogram count={self._n} range=0..{HIGHEST_US} us>"
