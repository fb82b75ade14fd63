"""Comparing two runs: which test, group or session got slower, beyond a tolerance and noise.

Owns `compare_results` (every test present in both files, every group and the session, metric
by metric over the catalogue's COMPARED_METRICS), `MetricChange` and `Comparison`, the rule that
a regression needs both a shift beyond the tolerance (practical) and a one-sided Mann-Whitney U
test that stays below SIGNIFICANCE after Holm's adjustment over every comparison of the run
(statistical), the result file's `baseline` block (`baseline_block`, `changes_of`), and the one
sentence that describes a change wherever it is shown (`describe`). Works from the files' HDR
histograms: no raw values are needed. May import `stats`, `histogram`, `catalogue`, `units`;
never pytest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pytest_latency import stats
from pytest_latency import units as fmt
from pytest_latency.catalogue import COMPARED_METRICS
from pytest_latency.histogram import LatencyHistogram

SIGNIFICANCE: Final = 0.05
# The rank test's normal approximation holds from about 8 values a side (stats.mann_whitney_u);
# below that a comparison gets no p-value and can be neither a regression nor an improvement.
MIN_VALUES: Final = 8
SESSION: Final = "(session)"


@dataclass(frozen=True, slots=True)
class MetricChange:
    """One metric of one test, group or the session, base run against head run. `nodeid` is
    the test's node id, the group's key (`model=…`) or "(session)"; `scope` says which."""

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
    scope: str = "test"  # test | group | session
    n_base: int = 0
    n_head: int = 0
    p_adjusted: float | None = None  # p_value after Holm over every comparison of the run

    @property
    def worst(self) -> float | None:
        """The larger of the p50 and p95 changes: how much slower, at worst."""
        return max((c for c in (self.change_p50, self.change_p95) if c is not None), default=None)


@dataclass(frozen=True, slots=True)
class Comparison:
    tolerance: float
    changes: tuple[MetricChange, ...]
    only_base: tuple[str, ...]
    only_head: tuple[str, ...]

    @property
    def regressions(self) -> tuple[MetricChange, ...]:
        return tuple(c for c in self.changes if c.regression)

    @property
    def improvements(self) -> tuple[MetricChange, ...]:
        return tuple(c for c in self.changes if c.improvement)

    def regressed_tests(self) -> dict[str, list[str]]:
        """Each regressed test's node id → its regressed metrics."""
        return _metrics(self.regressions)

    def test_regressions(self) -> dict[str, list[MetricChange]]:
        """Each regressed test's node id → its regressions, in comparison order."""
        return _grouped(self.regressions, tests=True)

    def rollup_regressions(self) -> dict[str, list[MetricChange]]:
        """Each regressed group's key, or "(session)" → its regressions, in comparison order:
        what every output shows as one line per rollup (`describe_rollup`)."""
        return _grouped(self.regressions, tests=False)


def _grouped(regressions: Sequence[MetricChange], *, tests: bool) -> dict[str, list[MetricChange]]:
    """The regressions of tests (or of rollups) by node id (or key), in comparison order."""
    out: dict[str, list[MetricChange]] = {}
    for c in regressions:
        if (c.scope == "test") == tests:
            out.setdefault(c.nodeid, []).append(c)
    return out


def _metrics(regressions: Sequence[MetricChange]) -> dict[str, list[str]]:
    """Each regressed test's node id → its regressed metrics, in comparison order."""
    return {k: [c.metric for c in v] for k, v in _grouped(regressions, tests=True).items()}


def _buckets(block: Mapping[str, Any]) -> list[tuple[float, int]]:
    """A block's histogram as (bucket value, count): ranks survive bucketing (to 0.1%), which is
    all a rank test needs, and the test reads the counts as they are, never expanded into
    values (a count is up to 2^53: `histogram.MAX_TOTAL_COUNT`)."""
    return LatencyHistogram.decode(block["hdr"]).buckets()


def _change(base: float | None, head: float | None) -> float | None:
    if base is None or head is None or base == 0:
        return None
    return (head - base) / base


@dataclass(frozen=True, slots=True)
class _Raw:
    """A comparison before the run-wide adjustment: its figures and both one-sided p-values."""

    scope: str
    nodeid: str
    metric: str
    base: Mapping[str, Any]
    head: Mapping[str, Any]
    n_base: int
    n_head: int
    p_slower: float | None
    p_faster: float | None


def _raw(
    scope: str, nodeid: str, metric: str, base: Mapping[str, Any], head: Mapping[str, Any]
) -> _Raw:
    a, b = _buckets(head), _buckets(base)
    n_head, n_base = sum(c for _, c in a), sum(c for _, c in b)
    p_slower = p_faster = None
    if n_head >= MIN_VALUES and n_base >= MIN_VALUES:
        p_slower = stats.mann_whitney_u_counts(a, b, alternative="greater").p_value
        p_faster = stats.mann_whitney_u_counts(a, b, alternative="less").p_value
    return _Raw(scope, nodeid, metric, base, head, n_base, n_head, p_slower, p_faster)


def _adjusted(values: Sequence[float | None]) -> list[float | None]:
    """Holm over the comparisons that have a p-value; None stays None."""
    present = [i for i, p in enumerate(values) if p is not None]
    adjusted = stats.holm_adjusted([values[i] for i in present])  # type: ignore[misc]
    out: list[float | None] = [None] * len(values)
    for i, p in zip(present, adjusted, strict=True):
        out[i] = p
    return out


def _decide(raws: Sequence[_Raw], tolerance: float) -> tuple[MetricChange, ...]:
    slower = _adjusted([r.p_slower for r in raws])
    faster = _adjusted([r.p_faster for r in raws])
    changes = []
    for raw, p_slower, p_faster in zip(raws, slower, faster, strict=True):
        base, head = raw.base, raw.head
        change_p50 = _change(base.get("p50"), head.get("p50"))
        change_p95 = _change(base.get("p95"), head.get("p95"))
        shifts = [c for c in (change_p50, change_p95) if c is not None]
        # A regression needs both: a shift beyond the tolerance (practical) and one the rank
        # test cannot put down to noise, among every comparison of the run (statistical).
        # Either alone is not worth failing a PR over.
        regression = (
            bool(shifts) and max(shifts) > tolerance and p_slower is not None
        ) and p_slower < SIGNIFICANCE
        improvement = (
            bool(shifts) and min(shifts) < -tolerance and p_faster is not None
        ) and p_faster < SIGNIFICANCE
        changes.append(
            MetricChange(
                raw.nodeid,
                raw.metric,
                base.get("p50"),
                head.get("p50"),
                base.get("p95"),
                head.get("p95"),
                change_p50,
                change_p95,
                raw.p_slower,
                regression,
                improvement,
                scope=raw.scope,
                n_base=raw.n_base,
                n_head=raw.n_head,
                p_adjusted=p_slower,
            )
        )
    return tuple(changes)


def _first_by_id(tests: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for test in tests:
        out.setdefault(test["nodeid"], test)
    return out


def compare_results(
    base: Mapping[str, Any], head: Mapping[str, Any], *, tolerance: float = 0.10
) -> Comparison:
    """Compare every test present in both runs (with or without budgets), metric by metric
    (ttft, tpot, itl, e2e, turn), and, when both runs hold the same tests, every group (`model=…`,
    `endpoint=…`) and the session. A test id repeated within a file (merged shards) is
    compared by its first copy."""
    base_tests, head_tests = _first_by_id(base["tests"]), _first_by_id(head["tests"])
    pairs: list[tuple[str, str, Mapping[str, Any], Mapping[str, Any]]] = [
        ("test", nodeid, base_tests[nodeid], test)
        for nodeid, test in head_tests.items()
        if nodeid in base_tests
    ]
    only_base = tuple(n for n in base_tests if n not in head_tests)
    only_head = tuple(n for n in head_tests if n not in base_tests)
    if not only_base and not only_head:
        # A rollup mixes its tests' calls: it is the same population in both runs only when
        # they hold the same tests. One CI shard against a whole run's baseline is not (its
        # session is half the suite); the merged file is, and is compared whole.
        base_groups, head_groups = base.get("groups", {}), head.get("groups", {})
        pairs += [
            ("group", k, base_groups[k], g) for k, g in head_groups.items() if k in base_groups
        ]
        pairs.append(("session", SESSION, base["session"], head["session"]))
    raws = [
        _raw(scope, nodeid, metric, a["metrics"][metric], b["metrics"][metric])
        for scope, nodeid, a, b in pairs
        for metric in COMPARED_METRICS
        if metric in a["metrics"] and metric in b["metrics"]
    ]
    return Comparison(tolerance, _decide(raws, tolerance), only_base, only_head)


def describe(change: MetricChange) -> str:
    """One line for a change, the same in the terminal, annotations, junitxml and Markdown:
    `tests/a.py::t: tpot slower by +26% (p50 4.0 ms → 5.0 ms, p95 4.2 ms → 5.3 ms; p = 3e-08,
    Holm-adjusted 1.2e-06)`."""
    direction = "slower" if (change.worst or 0) >= 0 else "faster"
    p, adjusted = p_text(change.p_value, "p"), p_text(change.p_adjusted, "Holm-adjusted", "")
    return (
        f"{change.nodeid}: {change.metric} {direction} by {fmt.change(change.worst)} "
        f"(p50 {fmt.duration(change.base_p50)} → {fmt.duration(change.head_p50)}, "
        f"p95 {fmt.duration(change.base_p95)} → {fmt.duration(change.head_p95)}; "
        f"n {change.n_base} → {change.n_head}; {p}, {adjusted})"
    )


# Below this a p-value is past double precision's reach (the normal tail rounds to 0 past
# z ≈ 8): it is shown as a bound, never as a certainty of 0.
TINY_P: Final = 1e-15


def p_text(p: float | None, label: str = "", relation: str = "=") -> str:
    """A p-value in two significant digits, the only formatter of one (terminal, annotations,
    junitxml, result-file messages and Markdown all come through here). With a label it reads
    `p = 3e-08` (`relation` between them: `Holm-adjusted p ≤ 1.5e-10`, or none:
    `Holm-adjusted 1.2e-06`); bare, the value alone (`3e-08`, a table cell). One below TINY_P
    reads as the bound it is: `p < 1e-15`, bare `< 1e-15`."""
    if p is not None and p < TINY_P:
        parts = (label, "<", f"{TINY_P:.0e}")
    else:
        parts = (label, relation if label else "", "–" if p is None else f"{p:.2g}")
    return " ".join(part for part in parts if part)


def describe_rollup(changes: Sequence[MetricChange]) -> str:
    """One line for a group's or the session's regressions, which repeat the tests' figures:
    `model=m: ttft +145%, itl +199% (Holm-adjusted p up to 1.5e-10)`."""
    worst = max((c.p_adjusted or 0.0) for c in changes)
    listed = ", ".join(f"{c.metric} {fmt.change(c.worst)}" for c in changes)
    return f"{changes[0].nodeid}: slower {listed} ({p_text(worst, 'Holm-adjusted p', '≤')})"


_FIELDS: Final = tuple(f.name for f in dataclasses.fields(MetricChange))


def baseline_block(comparison: Comparison, path: str | None) -> dict[str, Any]:
    """The result file's `baseline`: how the run was compared and every regression and
    improvement, each with `message` (`describe`); docs/result-schema.md."""

    def entry(change: MetricChange) -> dict[str, Any]:
        return {**{name: getattr(change, name) for name in _FIELDS}, "message": describe(change)}

    return {
        "path": path,
        "tolerance": comparison.tolerance,
        "significance": SIGNIFICANCE,
        "correction": "holm",
        "min_values": MIN_VALUES,
        "compared": len(comparison.changes),
        "only_base": len(comparison.only_base),
        "only_head": len(comparison.only_head),
        "regressions": [entry(c) for c in comparison.regressions],
        "improvements": [entry(c) for c in comparison.improvements],
    }


def changes_of(entries: Sequence[Mapping[str, Any]]) -> tuple[MetricChange, ...]:
    """A `baseline` block's regressions or improvements as `MetricChange`s again (what the
    Markdown and the report render); fields a file lacks take their defaults."""
    # `_validate` has checked every field without a default is there.
    defaults = {f.name: f.default for f in dataclasses.fields(MetricChange)}
    return tuple(
        MetricChange(**{name: entry.get(name, defaults[name]) for name in _FIELDS})
        for entry in entries
    )


def regressed_metrics(baseline: Mapping[str, Any]) -> dict[str, list[str]]:
    """From a result file's `baseline` block: each regressed test's node id → its metrics."""
    return _metrics(changes_of(baseline.get("regressions", [])))


__all__ = [
    "MIN_VALUES",
    "SESSION",
    "SIGNIFICANCE",
    "Comparison",
    "MetricChange",
    "baseline_block",
    "changes_of",
    "compare_results",
    "describe",
    "describe_rollup",
    "p_text",
    "regressed_metrics",
]
