from __future__ import annotations

import math
import os
import random
import subprocess
import sys

import pytest

from pytest_latency.histogram import HIGHEST_US, LatencyHistogram


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
    from hdrh.histogram import HdrHistogram

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
