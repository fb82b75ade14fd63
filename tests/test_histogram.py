from __future__ import annotations

import base64
import math
import os
import random
import subprocess
import sys

import pytest
from hdrh.histogram import HdrHistogram  # the oracle: our codec and layout must agree with it
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_latency import histogram as histogram_module
from pytest_latency.histogram import (
    HIGHEST_US,
    LOWEST_US,
    SIGNIFICANT_FIGURES,
    BucketCounts,
    LatencyHistogram,
    record_values,
)


@pytest.fixture(scope="module")
def lognormal_us() -> list[float]:
    rng = random.Random(42)
    # Around 100 ms with a long tail, like TTFTs in microseconds.
    return [rng.lognormvariate(11.5, 0.8) for _ in range(20_000)]


def _filled(values: list[float]) -> LatencyHistogram:
    h = LatencyHistogram()
    h.record_many(values)
    return h


def _nearest_rank(sorted_values: list[int], p: float) -> int:
    # HdrHistogram's rank: the count at the percentile rounded half up, at least 1.
    rank = max(1, int(p / 100 * len(sorted_values) + 0.5))
    return sorted_values[rank - 1]


def test_importing_the_module_does_not_import_hdrh() -> None:
    code = "import sys, pytest_latency.histogram; print('hdrh' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert out.strip() == "False"


def test_percentiles_within_a_tenth_of_a_percent(lognormal_us: list[float]) -> None:
    h = _filled(lognormal_us)
    exact = sorted(round(v) for v in lognormal_us)
    for p in (50, 90, 95, 99, 99.9):
        got = h.percentile(p)
        want = _nearest_rank(exact, p)
        assert want <= got <= want * 1.001, (p, got, want)
    assert h.percentiles([50, 99]) == {50: h.percentile(50), 99: h.percentile(99)}
    assert h.count == len(lognormal_us)
    assert exact[0] * 0.999 <= h.min <= exact[0]
    assert exact[-1] <= h.max <= exact[-1] * 1.001
    assert h.mean == pytest.approx(sum(exact) / len(exact), rel=1e-12)  # exact running sum


def test_encode_decode_round_trip(lognormal_us: list[float]) -> None:
    h = _filled(lognormal_us)
    blob = h.encode()
    assert isinstance(blob, str) and blob.startswith("HISTF")  # V2 compressed, base64
    back = LatencyHistogram.decode(blob)
    assert back.count == h.count
    for p in (0, 50, 95, 99, 99.9, 100):
        assert back.percentile(p) == h.percentile(p)
    assert (back.min, back.max) == (h.min, h.max)
    assert back.mean == pytest.approx(h.mean, rel=5e-4)  # from bucket midpoints
    assert back.encode() == blob


def test_empty_histogram_round_trips_and_refuses_statistics() -> None:
    h = LatencyHistogram()
    back = LatencyHistogram.decode(h.encode())
    assert back.count == 0
    with pytest.raises(ValueError, match="empty"):
        h.percentile(50)
    for name in ("mean", "min", "max"):
        with pytest.raises(ValueError, match="empty"):
            getattr(h, name)
    with pytest.raises(ValueError, match="empty"):
        h.percentiles([50])


def test_merge_of_halves_equals_the_whole(lognormal_us: list[float]) -> None:
    half = len(lognormal_us) // 2
    whole = _filled(lognormal_us)
    a, b = _filled(lognormal_us[:half]), _filled(lognormal_us[half:])
    a.merge(b)
    assert a.count == whole.count
    for p in (1, 50, 90, 99, 99.9):
        assert a.percentile(p) == whole.percentile(p)
    assert (a.min, a.max) == (whole.min, whole.max)
    assert a.mean == pytest.approx(whole.mean, rel=1e-12)
    assert a.encode() == whole.encode()
    assert b.count == len(lognormal_us) - half  # the source is left alone


def test_merge_across_processes_via_blobs(lognormal_us: list[float]) -> None:
    """The xdist path: each worker encodes, the controller decodes and merges."""
    whole = _filled(lognormal_us)
    shards = [lognormal_us[i::4] for i in range(4)]
    merged = LatencyHistogram()
    for shard in shards:
        merged.merge(LatencyHistogram.decode(_filled(shard).encode()))
    assert merged.count == whole.count
    assert merged.percentile(99) == whole.percentile(99)
    assert merged.encode() == whole.encode()


def test_out_of_range_values_are_clamped_and_counted() -> None:
    h = LatencyHistogram()
    h.record_many([-5.0, 0.0, 0.4, 10.0, HIGHEST_US, HIGHEST_US + 1, 1e15, math.inf])
    assert h.count == 8  # nothing silently dropped (hdrh alone would drop four)
    assert h.below_range == 1
    assert h.above_range == 3
    assert h.min == 0
    assert h.max >= HIGHEST_US
    assert h.percentile(100) == h.max
    other = LatencyHistogram()
    other.record(-1.0)
    h.merge(other)
    assert (h.below_range, h.above_range, h.count) == (2, 3, 9)


def test_nan_is_refused() -> None:
    with pytest.raises(ValueError, match="NaN"):
        LatencyHistogram().record(math.nan)


def test_values_are_rounded_to_whole_microseconds() -> None:
    h = LatencyHistogram()
    h.record_many([1.4, 1.6])
    assert h.min == 1 and h.max == 2
    assert h.mean == 1.5


def test_percentile_arguments_are_checked() -> None:
    h = _filled([1.0, 2.0])
    with pytest.raises(ValueError):
        h.percentile(101)
    with pytest.raises(ValueError):
        h.percentiles([50, -1])


def test_decode_rejects_garbage() -> None:
    for blob in ("", "not base64!", "SElTVEZBQUFB"):
        with pytest.raises(ValueError, match="HdrHistogram V2"):
            LatencyHistogram.decode(blob)
    with pytest.raises(TypeError):
        LatencyHistogram.decode(b"HISTF")  # type: ignore[arg-type]


def test_decode_accepts_other_layouts_and_clamps() -> None:
    foreign = HdrHistogram(1, 10 * HIGHEST_US, 2)  # another tool, wider range, 2 figures
    for value in (1_000, 50_000, 2 * HIGHEST_US):
        foreign.record_value(value)
    h = LatencyHistogram.decode(foreign.encode().decode("ascii"))
    assert h.count == 3
    assert h.above_range == 1
    assert h.percentile(50) == pytest.approx(50_000, rel=0.01)
    merged = LatencyHistogram()
    merged.merge(h)  # and it merges with ours
    assert merged.count == 3


def test_repr_mentions_count() -> None:
    assert "count=2" in repr(_filled([1.0, 2.0]))


def _one_by_one(values: list[float]) -> LatencyHistogram:
    h = LatencyHistogram()
    for value in values:
        h.record(value)
    return h


@pytest.mark.parametrize("seed", range(12))
def test_bulk_counting_is_bit_identical_to_recording_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([0, 1, 5, 40, 1_000, 5_000])
    values = [rng.lognormvariate(rng.uniform(0, 20), rng.uniform(0.1, 3)) for _ in range(n)]
    if seed % 3 == 1:  # bucket edges, clamping, out-of-range and rounding at .5
        values += [-5.0, -0.0, 0.4, 1023.5, 2047.5, 2048.0, 4095.0, HIGHEST_US + 0.4, 1e15]
        values += [math.inf, -math.inf]
    if seed % 3 == 2:  # token counts: small integers that repeat
        values = [float(rng.randint(0, 5_000)) for _ in range(n)]
    want = _one_by_one(values)
    bulk = _filled(values)
    counts = BucketCounts()
    counts.record_many(values)
    assert bulk.encode() == counts.encode() == counts.to_histogram().encode() == want.encode()
    assert counts.count == want.count and counts.out_of_range == want.below_range + want.above_range
    if values:
        assert (bulk.min, bulk.max, bulk.mean) == (want.min, want.max, want.mean)
        assert (bulk.below_range, bulk.above_range) == (want.below_range, want.above_range)


def test_counts_recorded_into_several_targets_and_added_equal_one_histogram() -> None:
    rng = random.Random(5)
    parts = [[rng.lognormvariate(9, 1) for _ in range(300)] for _ in range(4)]
    whole, pooled = BucketCounts(), BucketCounts()
    each = []
    for part in parts:
        own = BucketCounts()
        record_values(part, (own, whole))
        each.append(own)
    for own in each:
        pooled.add(own)
    want = _one_by_one([v for part in parts for v in part]).encode()
    assert whole.encode() == pooled.encode() == want
    merged = LatencyHistogram()
    for own in each:
        merged.add_counts(own)
    assert merged.encode() == want
    with pytest.raises(ValueError, match="NaN"):
        BucketCounts().record_many([1.0, math.nan])


# ---- hdrh as the oracle ------------------------------------------------------------------------


def _hdrh() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)


def _hdrh_of(values: list[float]) -> HdrHistogram:
    """What `LatencyHistogram.record` does, through hdrh: clamp, round, record."""
    hdr = _hdrh()
    for value in values:
        assert hdr.record_value(min(max(round(value), 0), HIGHEST_US))
    return hdr


def _hdrh_indices(hdr: HdrHistogram) -> range:
    """The indices up to the highest non-empty one (hdrh's public API has no sparse view)."""
    if not hdr.get_total_count():
        return range(0)
    return range(hdr.get_counts_array_index(hdr.get_max_value()) + 1)


def _hdrh_counts(hdr: HdrHistogram) -> dict[int, int]:
    counts = {i: hdr.get_count_at_index(i) for i in _hdrh_indices(hdr)}
    return {i: c for i, c in counts.items() if c}


def test_the_bucket_layout_is_hdrhs() -> None:
    hdr = _hdrh()
    ours = histogram_module._OURS
    assert ours.counts_len == hdr.counts_len == 23_552
    for index in range(hdr.counts_len):
        value = hdr.get_value_from_index(index)
        assert ours.lowest(index) == value, index
        assert histogram_module._HIGHEST[index] == hdr.get_highest_equivalent_value(value), index
    rng = random.Random(7)
    probes = [*range(5_000), *(rng.randrange(HIGHEST_US + 1) for _ in range(20_000)), HIGHEST_US]
    probes += [(1 << k) + d for k in range(11, 32) for d in (-1, 0, 1)]
    counts = BucketCounts()
    counts.record_many([float(v) for v in probes])  # `record_values` inlines the index
    assert set(counts._counts) == {hdr.get_counts_array_index(v) for v in probes}
    for value in probes:
        assert ours.index(value) == hdr.get_counts_array_index(value), value


_values_us = st.lists(
    st.one_of(
        st.floats(min_value=0, max_value=HIGHEST_US),
        st.floats(min_value=0, max_value=5_000),
        st.integers(min_value=0, max_value=HIGHEST_US).map(float),
        st.sampled_from([0.0, 1.0, 2047.0, 2048.0, 4095.0, 4096.0, float(HIGHEST_US)]),
    ),
    max_size=300,
)


_PS = (0, 1, 50, 90, 99, 99.9, 100)


@settings(max_examples=100, deadline=None)
@given(_values_us)
def test_our_blobs_are_hdrhs_byte_for_byte_and_it_reads_them(values: list[float]) -> None:
    ours = _filled(values)
    oracle = _hdrh_of(values)
    blob = ours.encode()
    assert blob == oracle.encode().decode("ascii")
    back = HdrHistogram.decode(blob.encode("ascii"))
    assert back.get_total_count() == len(values)
    assert _hdrh_counts(back) == _hdrh_counts(oracle)
    if values:
        assert ours.percentiles(_PS) == back.get_percentile_to_value_dict(list(_PS))
        assert ours.min == oracle.get_min_value()
        assert ours.max == oracle.get_max_value()


@settings(max_examples=100, deadline=None)
@given(_values_us, st.lists(st.integers(min_value=1, max_value=2**40), max_size=3))
def test_we_read_hdrhs_blobs(values: list[float], big_counts: list[int]) -> None:
    oracle = _hdrh_of(values)
    for n, count in enumerate(big_counts):  # multi-byte LEB128 counts
        oracle.record_value(10_000 * (n + 1), count)
    ours = LatencyHistogram.decode(oracle.encode().decode("ascii"))
    assert ours.count == oracle.get_total_count()
    assert dict(ours._counts) == _hdrh_counts(oracle)
    if ours.count:
        assert ours.percentiles(_PS) == oracle.get_percentile_to_value_dict(list(_PS))
        assert ours.percentile(99) == oracle.get_value_at_percentile(99)
        assert ours.min == oracle.get_min_value()
        assert ours.max == oracle.get_max_value()
    assert ours.encode() == oracle.encode().decode("ascii")


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([1, 2, 1000, 1024]),
    st.sampled_from([10_000_000, HIGHEST_US, 10 * HIGHEST_US, 2**50]),
    st.integers(min_value=1, max_value=5),
    st.lists(st.integers(min_value=0, max_value=2**62), min_size=1, max_size=50),
)
# Our own layout from hdrh, a value past one hour's bucket: it was read as in range.
@example(1, HIGHEST_US, 3, [3_600_809_984])
def test_we_read_other_layouts_as_hdrh_adds_them(
    lowest: int, highest: int, figures: int, raw: list[int]
) -> None:
    foreign = HdrHistogram(lowest, highest, figures)
    for value in raw:
        foreign.record_value(value)  # hdrh drops values beyond its range
    hist = LatencyHistogram.decode(foreign.encode().decode("ascii"))
    assert hist.count == foreign.get_total_count()
    # hdrh re-records each foreign bucket's lowest value; beyond our range we clamp and count.
    want = _hdrh()
    above = 0
    for index, count in _hdrh_counts(foreign).items():
        if count:
            value = foreign.get_value_from_index(index)
            above += count if value > HIGHEST_US else 0
            want.record_value(min(value, HIGHEST_US), count)
    assert hist.above_range == above
    assert hist.encode() == want.encode().decode("ascii")


@pytest.mark.parametrize(
    "n", [0, 1, -1, 63, 64, -64, 8191, 8192, 2**55 - 1, 2**55, 2**62, -(2**62)]
)
def test_zigzag_leb128_round_trips_up_to_nine_bytes(n: int) -> None:
    token = histogram_module._leb(n)
    assert 1 <= len(token) <= 9
    assert histogram_module._unleb(token) == n
    stream = token + histogram_module._leb(5) + token
    assert histogram_module._TOKEN.findall(stream) == [token, histogram_module._leb(5), token]


def test_truncated_or_damaged_blobs_are_refused() -> None:
    blob = _filled([float(v) for v in range(0, 300_000, 7)]).encode()
    for cut in range(0, len(blob), 37):
        with pytest.raises(ValueError, match="HdrHistogram V2"):
            LatencyHistogram.decode(blob[:cut])
    raw = bytearray(base64.b64decode(blob))
    raw[0] ^= 0xFF  # the compression cookie
    with pytest.raises(ValueError, match="HdrHistogram V2"):
        LatencyHistogram.decode(base64.b64encode(bytes(raw)).decode())


def test_a_decoded_mean_is_hdrhs_bucket_midpoint_mean(lognormal_us: list[float]) -> None:
    oracle = _hdrh_of(lognormal_us)
    ours = LatencyHistogram.decode(oracle.encode().decode("ascii"))
    assert ours.mean == pytest.approx(oracle.get_mean_value(), rel=1e-12)


def test_merging_into_an_empty_histogram_keeps_the_minimum(lognormal_us: list[float]) -> None:
    # The minimum is derived from the buckets, so no "no value yet" sentinel can leak into it.
    whole = _filled(lognormal_us)
    merged = LatencyHistogram()
    merged.merge(LatencyHistogram.decode(whole.encode()))
    assert merged.min == whole.min > 0
    assert (merged.max, merged.count) == (whole.max, whole.count)


def _bomb_blob(inflated: int, claimed: int) -> str:
    """Our layout's payload header claiming `claimed` bytes of counts, then `inflated` bytes of
    zero counts, deflated (1 MB of zeros deflates to ~1 kB)."""
    import struct
    import zlib

    header = struct.pack(">IIIIQQd", 0x1C849313, claimed, 0, 3, 1, HIGHEST_US, 1.0)
    deflater = zlib.compressobj(9)
    deflated = deflater.compress(header)
    for _ in range(inflated >> 20):
        deflated += deflater.compress(bytes(1 << 20))
    deflated += deflater.flush()
    outer = struct.pack(">II", 0x1C849314, len(deflated))
    return base64.b64encode(outer + deflated).decode()


@pytest.mark.parametrize(
    ("claimed", "why"),
    [
        (200_000, "does not match its counts"),  # within the layout's room, inflates past it
        ((64 << 20) + 40, "more than this layout's 211968"),  # honest about its 64 MB
    ],
)
def test_a_zlib_bomb_is_refused_after_inflating_what_a_real_blob_holds(
    claimed: int, why: str
) -> None:
    import time
    import tracemalloc

    blob = _bomb_blob(64 << 20, claimed)
    assert len(blob) < 200_000  # 64 MB of counts in a blob a result file can carry
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(ValueError, match=why):
            LatencyHistogram.decode(blob)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 1.0  # was 12 s and 2.1 GB for a 2 GB bomb
    assert peak < 8 << 20, peak  # the 212 kB a real blob inflates to, and its tokens


def test_a_blob_longer_than_any_histogram_is_refused_before_decoding() -> None:
    blob = "HISTFAAA" + "A" * histogram_module.MAX_BLOB_CHARS
    with pytest.raises(ValueError, match="more than any histogram takes"):
        LatencyHistogram.decode(blob)


def test_totals_up_to_the_cap_decode_and_beyond_it_are_refused() -> None:
    from collections import Counter

    cap = histogram_module.MAX_TOTAL_COUNT
    big = LatencyHistogram.decode(histogram_module._encode(Counter({3000: 2**40, 5000: 2**40})))
    assert big.count == 2**41 and [c for _, c in big.buckets()] == [2**40, 2**40]
    at_cap = LatencyHistogram.decode(histogram_module._encode(Counter({10: cap - 1, 11: 1})))
    assert at_cap.count == cap
    with pytest.raises(ValueError, match="more than the 9007199254740992"):
        LatencyHistogram.decode(histogram_module._encode(Counter({10: cap, 11: 1})))
    with pytest.raises(ValueError, match="HdrHistogram V2"):  # 2^63, the format's own maximum
        LatencyHistogram.decode(histogram_module._encode(Counter({10: 2**63 - 1})))
