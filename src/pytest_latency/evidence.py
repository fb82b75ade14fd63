"""What a budget was judged on, in a form that adds up across CI shards.

Owns `Evidence` and `gather`: for one budget over one pool, the sufficient statistic its verdict
needs and nothing more, and the rule of how two shards' statistics add (`Evidence.merge`):

* a percentile: the values' HDR histogram (adding bucket counts is exact; the estimate read
  back from buckets is within HDR's 0.1 %);
* `mean`: n, Σx and Σ(x − mean)² (pairwise-updated, so the Student-t bound of the union is
  what the union's values give, to rounding);
* `min` / `max`: the extreme value and n; `sum` (tokens, cost): Σx and n;
* `error_rate`, `good(...)`: hits and n; `retries`: the sum and n; `cache_read_ratio`: Σ reads,
  Σ input and the calls reporting (all exact);
* nothing in scope: how many calls `--latency-flagged=exclude` left out;
* for `cost`, how many successful calls in scope had no value (`unknown`), and of those, by
  model, the calls whose model has no price (`unknown_models`; the rest reported no usage): the
  budget cannot be judged on the priced ones alone, and its message names the models.

`gather` decides which calls and values are in scope (filters, flagged calls, failed calls,
hand-recorded values), once: `verdicts` judges a test from it, and `pytest-latency merge`
re-judges the `[session]` budgets of several shards from their entries' `evidence`
(`to_dict`/`from_dict`, docs/result-schema.md). May import `pools`, `calls`, `budgets`,
`catalogue`, `metrics`, `stats`, `histogram`; never pytest.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_latency import stats
from pytest_latency.budgets import Expectation
from pytest_latency.calls import metric_value
from pytest_latency.catalogue import METRICS, NO_PRICE, Scope
from pytest_latency.histogram import LatencyHistogram
from pytest_latency.metrics import CallMetrics
from pytest_latency.pools import CacheRatio, Pool

# Kinds, one per shape of statistic.
QUANTILE, MEAN, EXTREME, PROPORTION, SUM, RATIO, NOTHING = (
    "quantile",
    "mean",
    "extreme",
    "proportion",
    "sum",
    "ratio",
    "nothing",
)


@dataclass(frozen=True, slots=True)
class Evidence:
    """One budget's statistic over its scope. Which fields mean something depends on `kind`:
    `values` (sorted, for a test) or `histogram` (read from a file) for QUANTILE; `n`, `total`
    (Σx) and `squares` (Σ(x − mean)²) for MEAN; `n` and `total` (the extreme) for EXTREME;
    `hits` and `n` for PROPORTION; `total` and `n` for SUM; `hits` (Σ reads), `total` (Σ input)
    and `n` (calls reporting) for RATIO. `excluded` counts flagged calls left out of scope;
    `unknown` the successful calls in scope without a value of a metric every call should have
    (`cost`: a model with no price, or no usage reported), `unknown_models` those of them whose
    model has no price, by model (sorted pairs)."""

    kind: str
    n: int = 0
    hits: int = 0
    total: float = 0.0
    squares: float = 0.0
    values: stats.SortedValues | None = None
    histogram: LatencyHistogram | None = None
    excluded: int = 0
    unknown: int = 0
    unknown_models: tuple[tuple[str, int], ...] = ()

    def sample(self) -> Sequence[float]:
        """QUANTILE's values as `stats` estimators take them: the raw values, or a histogram's
        buckets as a sorted sequence (indexed by rank, never expanded)."""
        if self.values is not None:
            return self.values
        assert self.histogram is not None
        return stats.CountedValues(self.histogram.buckets())

    def merge(self, other: Evidence) -> Evidence:
        """This shard's statistic and another's, as one (same budget, disjoint calls)."""
        unknown, models = self.unknown + other.unknown, _add_counts((self, other))
        if other.kind == NOTHING:
            merged = replace(self, excluded=self.excluded + other.excluded)
        elif self.kind == NOTHING:
            merged = replace(other, excluded=self.excluded + other.excluded)
        elif other.kind != self.kind:
            raise ValueError(f"cannot add {self.kind} evidence to {other.kind} evidence")
        else:
            merged = self._merged(other, self.excluded + other.excluded)
        return replace(merged, unknown=unknown, unknown_models=models)

    def _merged(self, other: Evidence, excluded: int) -> Evidence:
        if self.kind == QUANTILE:
            merged = LatencyHistogram()
            for part in (self, other):
                merged.merge(part._as_histogram())
            return Evidence(QUANTILE, n=self.n + other.n, histogram=merged, excluded=excluded)
        if self.kind == EXTREME:
            # The kind does not say min or max: `merge_extreme` picks by the budget's stat.
            raise ValueError("extremes are merged by merge_extreme(stat, ...)")
        if self.kind == MEAN:
            # Chan et al.'s pairwise update of Σ(x − mean)²: stable where Σx² − n·mean² of
            # latencies in µs would cancel.
            n = self.n + other.n
            delta = other.total / other.n - self.total / self.n
            squares = self.squares + other.squares + delta * delta * self.n * other.n / n
            return Evidence(
                MEAN, n=n, total=self.total + other.total, squares=squares, excluded=excluded
            )
        return Evidence(
            self.kind,
            n=self.n + other.n,
            hits=self.hits + other.hits,
            total=self.total + other.total,
            squares=self.squares + other.squares,
            excluded=excluded,
        )

    def _as_histogram(self) -> LatencyHistogram:
        if self.histogram is not None:
            return self.histogram
        histogram = LatencyHistogram()
        histogram.record_many(self.values or ())
        return histogram

    def to_dict(self) -> dict[str, Any]:
        """The entry's `evidence` in the result file."""
        out: dict[str, Any] = {"kind": self.kind, "n": self.n}
        if self.kind == QUANTILE:
            out["hdr"] = self._as_histogram().encode()
        elif self.kind == MEAN:
            out.update(total=self.total, squares=self.squares)
        elif self.kind in (EXTREME, SUM):
            out["total"] = self.total
        elif self.kind == PROPORTION:
            out["hits"] = self.hits
        elif self.kind == RATIO:
            out.update(hits=self.hits, total=self.total)
        if self.excluded:
            out["excluded"] = self.excluded
        if self.unknown:
            out["unknown"] = self.unknown
        if self.unknown_models:
            out["unknown_models"] = dict(self.unknown_models)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Evidence:
        kind = str(data["kind"])
        histogram = LatencyHistogram.decode(data["hdr"]) if kind == QUANTILE else None
        return cls(
            kind,
            n=int(data.get("n", 0)),
            hits=int(data.get("hits", 0)),
            total=float(data.get("total", 0.0)),
            squares=float(data.get("squares", 0.0)),
            histogram=histogram,
            excluded=int(data.get("excluded", 0)),
            unknown=int(data.get("unknown", 0)),
            unknown_models=_counts(data.get("unknown_models") or {}),
        )


def merge_extreme(stat: str, parts: Sequence[Evidence]) -> Evidence:
    """`min`/`max` evidence of several shards: the smallest minimum or the largest maximum."""
    present = [p for p in parts if p.kind == EXTREME]
    excluded = sum(p.excluded for p in parts)
    unknown = sum(p.unknown for p in parts)
    models = _add_counts(parts)
    if not present:
        return Evidence(NOTHING, excluded=excluded, unknown=unknown, unknown_models=models)
    pick = min if stat == "min" else max
    return Evidence(
        EXTREME,
        n=sum(p.n for p in present),
        total=pick(p.total for p in present),
        excluded=excluded,
        unknown=unknown,
        unknown_models=models,
    )


def _counts(counts: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((str(k), int(v)) for k, v in counts.items()))


def _add_counts(parts: Sequence[Evidence]) -> tuple[tuple[str, int], ...]:
    total: dict[str, int] = {}
    for part in parts:
        for model, n in part.unknown_models:
            total[model] = total.get(model, 0) + n
    return _counts(total)


def merge_all(expectation: Expectation, parts: Sequence[Evidence]) -> Evidence:
    """Several shards' evidence for one budget, as one."""
    if expectation.stat in ("min", "max") and not expectation.is_goodput:
        return merge_extreme(expectation.stat, parts)
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    return merged


def _good(final: CallMetrics, expectation: Expectation) -> bool:
    if final.error is not None:
        return False
    values = {
        c.metric: value
        for c in expectation.conditions
        if (value := metric_value(final, c.metric)) is not None
    }
    return expectation.good_call(values)


def _of_values(expectation: Expectation, values: stats.SortedValues, excluded: int) -> Evidence:
    if not values:
        return Evidence(NOTHING, excluded=excluded)
    if expectation.stat == "sum":
        return Evidence(SUM, n=len(values), total=math.fsum(values), excluded=excluded)
    if expectation.stat == "mean":
        total = math.fsum(values)
        mean = total / len(values)
        squares = math.fsum((x - mean) ** 2 for x in values)
        return Evidence(MEAN, n=len(values), total=total, squares=squares, excluded=excluded)
    if expectation.stat in ("min", "max"):
        extreme = values[0] if expectation.stat == "min" else values[-1]
        return Evidence(EXTREME, n=len(values), total=extreme, excluded=excluded)
    return Evidence(QUANTILE, n=len(values), values=values, excluded=excluded)


def _of_ratio(ratio: CacheRatio | None) -> Evidence:
    if ratio is None or ratio.value is None:
        return Evidence(NOTHING)
    return Evidence(RATIO, n=ratio.calls, hits=ratio.read_tokens, total=ratio.input_tokens)


def gather(expectation: Expectation, pool: Pool, *, exclude: bool = False) -> Evidence:
    """The statistic `expectation` is judged on over `pool` (DESIGN's scope rules): per-call
    metrics over the successful calls in its filters plus the values recorded by hand, without
    flagged calls when `exclude`; `calls` and `turn` one value per sample; the aggregates over
    calls."""
    in_scope = pool.subset(expectation.filters)
    # The timing pools: without the flagged calls when the policy excludes them.
    timed = pool.subset(expectation.filters, unflagged=exclude)
    excluded = len(in_scope.finals) - len(timed.finals)
    if expectation.is_goodput:  # good(...): the fraction of calls meeting every condition
        if not timed.finals:
            return Evidence(NOTHING, excluded=excluded)
        good = sum(_good(c, expectation) for c in timed.finals)
        return Evidence(PROPORTION, n=len(timed.finals), hits=good, excluded=excluded)
    if expectation.metric == "error_rate":
        if not in_scope.finals:
            return Evidence(NOTHING)
        return Evidence(PROPORTION, n=len(in_scope.finals), hits=in_scope.errors)
    if expectation.metric == "retries":
        return Evidence(SUM, n=len(in_scope.calls), total=float(in_scope.retries))
    if expectation.metric == "cache_read_ratio":
        return _of_ratio(in_scope.cache_ratio())
    if METRICS[expectation.metric].scope is Scope.SAMPLE:
        # One value per kept sample (and the values recorded by hand, as for per-call metrics),
        # whatever the flagged-calls policy: a flagged call's stamps are the client's pace, but
        # the sample still made its calls and took its time.
        return _of_values(expectation, in_scope.values(expectation.metric), 0)
    evidence = _of_values(expectation, timed.values(expectation.metric), excluded)
    if expectation.metric in PRICED:
        # A call the price table does not know is not free: count it, so the verdict says the
        # cost is unknown rather than judging the priced calls alone.
        unknown = [c for c in timed.ok if metric_value(c, expectation.metric) is None]
        if unknown:
            models = Counter(c.model or "?" for c in unknown if c.price_source == NO_PRICE)
            evidence = replace(evidence, unknown=len(unknown), unknown_models=_counts(models))
    return evidence


# The per-call metrics every successful call has a value of once priced: one without is unknown.
PRICED = ("cost",)


__all__ = [
    "EXTREME",
    "MEAN",
    "NOTHING",
    "PROPORTION",
    "QUANTILE",
    "RATIO",
    "SUM",
    "Evidence",
    "gather",
    "merge_all",
    "merge_extreme",
]
