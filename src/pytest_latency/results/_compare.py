"""Comparing two runs: which test got slower, beyond a tolerance and beyond noise.

Owns `compare_results` (every test present in both files, metric by metric over the catalogue's
COMPARED_METRICS, and the session), `MetricChange` and `Comparison`, and the rule that a
regression needs both a shift beyond the tolerance (practical) and a one-sided Mann-Whitney U
test below SIGNIFICANCE (statistical). Works from the files' HDR histograms: no raw values are
needed. May import `stats`, `histogram`, `catalogue`; never pytest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pytest_latency import stats
from pytest_latency.catalogue import COMPARED_METRICS
from pytest_latency.histogram import LatencyHistogram

SIGNIFICANCE: Final = 0.05


@dataclass(frozen=True, slots=True)
class MetricChange:
    """One metric of one test (or of the session), base run against head run."""

    nodeid: str
    metric: str
    base_p50: float | None
    head_p50: float | None
    base_p95: float | None
    head_p95: float | None
    change_p50: float | None  # (head − base) / base
    change_p95: float | None
    p_value: float | None  # one-sided Mann-Whitney: head tends to be slower than base
    regression: bool
    improvement: bool


@dataclass(frozen=True, slots=True)
class Comparison:
    tolerance: float
    changes: tuple[MetricChange, ...]
    only_base: tuple[str, ...]
    only_head: tuple[str, ...]

    @property
    def regressions(self) -> tuple[MetricChange, ...]:
        return tuple(c for c in self.changes if c.regression)


def _buckets(block: Mapping[str, Any]) -> list[tuple[float, int]]:
    """A block's histogram as (bucket value, count): ranks survive bucketing (to 0.1%), which is
    all a rank test needs, and the test reads the counts as they are, never expanded into
    values (a count is up to 2^53: `histogram.MAX_TOTAL_COUNT`)."""
    return LatencyHistogram.decode(block["hdr"]).buckets()


def _change(base: float | None, head: float | None) -> float | None:
    if base is None or head is None or base == 0:
        return None
    return (head - base) / base


def _compare_block(
    nodeid: str,
    metric: str,
    base: Mapping[str, Any],
    head: Mapping[str, Any],
    tolerance: float,
) -> MetricChange:
    change_p50 = _change(base.get("p50"), head.get("p50"))
    change_p95 = _change(base.get("p95"), head.get("p95"))
    p_slower = p_faster = None
    a, b = _buckets(head), _buckets(base)
    if a and b:
        p_slower = stats.mann_whitney_u_counts(a, b, alternative="greater").p_value
        p_faster = stats.mann_whitney_u_counts(a, b, alternative="less").p_value
    # A regression needs both: a shift beyond the tolerance (practical) and one the rank test
    # cannot put down to noise (statistical). Either alone is not worth failing a PR over.
    worse = max((c for c in (change_p50, change_p95) if c is not None), default=None)
    better = min((c for c in (change_p50, change_p95) if c is not None), default=None)
    regression = (
        worse is not None and worse > tolerance and p_slower is not None and p_slower < SIGNIFICANCE
    )
    improvement = (
        better is not None
        and better < -tolerance
        and p_faster is not None
        and p_faster < SIGNIFICANCE
    )
    return MetricChange(
        nodeid,
        metric,
        base.get("p50"),
        head.get("p50"),
        base.get("p95"),
        head.get("p95"),
        change_p50,
        change_p95,
        p_slower,
        regression,
        improvement,
    )


def compare_results(
    base: Mapping[str, Any], head: Mapping[str, Any], *, tolerance: float = 0.10
) -> Comparison:
    """Compare every test present in both runs, metric by metric (ttft, tpot, itl, e2e), and
    the session. A test id repeated within a file (merged shards) is compared by its first copy."""
    base_tests: dict[str, Mapping[str, Any]] = {}
    for test in base["tests"]:
        base_tests.setdefault(test["nodeid"], test)
    head_tests: dict[str, Mapping[str, Any]] = {}
    for test in head["tests"]:
        head_tests.setdefault(test["nodeid"], test)
    changes: list[MetricChange] = []
    for nodeid, head_test in head_tests.items():
        base_test = base_tests.get(nodeid)
        if base_test is None:
            continue
        for metric in COMPARED_METRICS:
            a, b = base_test["metrics"].get(metric), head_test["metrics"].get(metric)
            if a is not None and b is not None:
                changes.append(_compare_block(nodeid, metric, a, b, tolerance))
    for metric in COMPARED_METRICS:
        a = base["session"]["metrics"].get(metric)
        b = head["session"]["metrics"].get(metric)
        if a is not None and b is not None:
            changes.append(_compare_block("(session)", metric, a, b, tolerance))
    return Comparison(
        tolerance,
        tuple(changes),
        tuple(n for n in base_tests if n not in head_tests),
        tuple(n for n in head_tests if n not in base_tests),
    )


__all__ = ["SIGNIFICANCE", "Comparison", "MetricChange", "compare_results"]
