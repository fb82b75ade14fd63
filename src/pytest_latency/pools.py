"""The pool of values: what one test (or several pooled) measured, as every reader reads it.

Owns `Pool`: a test's kept calls (those of kept, non-warmup samples), their final attempts, the
successful ones, the sorted values of every per-call and per-chunk metric (successful calls plus
the values recorded by hand), each sample's calls and `turn`, the prompt-cache ratio, errors and
retries. It is built once per test and read by the verdicts, the diagnosis, the terminal, the
result file and the report, so a figure they share is one figure. Subsets (a budget's
`{model=...}` filters, the unflagged calls) are pools too, built on first use and kept.

May import `calls`, `metrics` (types), `catalogue` and `stats`; never pytest, never the layers
that read it (verdicts, diagnose, results, report).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import TYPE_CHECKING, NamedTuple

from pytest_latency.calls import Call, ManualValue, SampleSpan, reading
from pytest_latency.catalogue import NO_PRICE, NO_USAGE, POOLED_METRICS
from pytest_latency.stats import SortedValues

if TYPE_CHECKING:
    from pytest_latency.metrics import CallMetrics

Filters = tuple[tuple[str, str], ...]


class CacheRatio(NamedTuple):
    """Σ cache reads / Σ input tokens over the `calls` successful calls that reported cache
    fields (DESIGN: absent when none did, never 0)."""

    read_tokens: int
    input_tokens: int
    calls: int

    @property
    def value(self) -> float | None:
        return self.read_tokens / self.input_tokens if self.input_tokens else None


class CostTotals(NamedTuple):
    """What a pool's successful calls cost, in µ$ (`cost`'s own values summed, so it is what a
    `cost.sum` budget reads): the priced calls, what their cache reads saved and their writes
    cost extra, and the calls left unpriced, by model (no price) or for want of usage."""

    cost: float
    cache_saved: float
    cache_extra: float
    priced: int
    unpriced: dict[str, int]
    no_usage: int

    @property
    def net_saved(self) -> float:
        """What the cache saved less what writing it cost: negative when writes outweigh reads."""
        return self.cache_saved - self.cache_extra

    def plus(self, other: CostTotals) -> CostTotals:
        """Two disjoint sets of calls' totals as one (rollups, merged shards)."""
        unpriced = Counter(self.unpriced)
        unpriced.update(other.unpriced)
        return CostTotals(
            self.cost + other.cost,
            self.cache_saved + other.cache_saved,
            self.cache_extra + other.cache_extra,
            self.priced + other.priced,
            dict(sorted(unpriced.items())),
            self.no_usage + other.no_usage,
        )


NO_COST = CostTotals(0.0, 0.0, 0.0, 0, {}, 0)


def cost_totals(ok: Iterable[CallMetrics]) -> CostTotals:
    """What the successful calls `ok` cost (`Pool.cost_totals`, and a rollup's share of calls)."""
    ok = list(ok)
    priced = [f for f in ok if f.cost is not None]
    unpriced = Counter(f.model or "?" for f in ok if f.price_source == NO_PRICE)
    return CostTotals(
        math.fsum(f.cost for f in priced if f.cost is not None),
        math.fsum(f.cost_cache_saved or 0.0 for f in priced),
        math.fsum(f.cost_cache_extra or 0.0 for f in priced),
        len(priced),
        dict(sorted(unpriced.items())),
        sum(1 for f in ok if f.price_source == NO_USAGE),
    )


class _Part(NamedTuple):
    """One test's share of a pool: its kept calls, how many samples it ran (a sample that made
    no call still counts, with 0 calls) and the wall time of each, in µs, with the spans they
    are read from (a sample's own: a subset of the calls keeps them all)."""

    calls: tuple[Call, ...]
    samples: int
    turns: tuple[float, ...] = ()
    spans: tuple[SampleSpan, ...] = ()


_CALL_KEYS = ("model", "endpoint", "api")


def _matches(call: CallMetrics, filters: Filters) -> bool:
    for key, value in filters:
        if key not in _CALL_KEYS:
            continue  # a sweep's level ({concurrency=16}) chose the test, not its calls
        actual = {"model": call.model, "endpoint": call.endpoint, "api": call.api}.get(key)
        if actual != value:
            return False
    return True


def call_values(finals: Iterable[CallMetrics], metric: str) -> list[float]:
    """What the calls whose final attempts are `finals` contribute to a per-call or per-chunk
    metric: each call's value where it has one (absent stays absent; read as `metric_value`
    reads it), every gap of the final attempt for `itl`."""
    raw: list[float] = []
    if metric == "itl":
        for final in finals:
            raw.extend(final.itl)
        return raw
    how = reading(metric)  # once, not per call: pools read thousands of calls
    if not how.queued and not how.waits:
        name = how.field
        for final in finals:
            value = getattr(final, name)
            if value is not None:
                raw.append(float(value))
        return raw
    for final in finals:
        value = how.of(final)
        if value is not None:
            raw.append(value)
    return raw


def cache_ratio(calls: Iterable[CallMetrics]) -> CacheRatio | None:
    """Σ cache reads / Σ input over the calls that reported cache fields; None when none did."""
    reporting = [c for c in calls if c.cache_fields_reported and c.input_tokens is not None]
    if not reporting:
        return None
    return CacheRatio(
        sum(c.cache_read_tokens or 0 for c in reporting),
        sum(c.input_tokens or 0 for c in reporting),
        len(reporting),
    )


class Pool:
    """The values of kept calls (and kept hand-recorded values) of one or more tests."""

    __slots__ = ("_cache", "_members", "_parts", "_subsets", "calls", "finals", "manual", "ok")

    def __init__(
        self,
        parts: Sequence[_Part],
        manual: Sequence[ManualValue],
        members: Sequence[Pool] = (),
    ) -> None:
        self._parts = tuple(parts)
        # The pools a merged pool was made of: their values are sorted already.
        self._members = tuple(members)
        self.calls: tuple[Call, ...] = tuple(c for part in self._parts for c in part.calls)
        self.finals: tuple[CallMetrics, ...] = tuple(c.final for c in self.calls)
        self.ok: tuple[CallMetrics, ...] = tuple(f for f in self.finals if f.error is None)
        self.manual: tuple[ManualValue, ...] = tuple(manual)
        self._cache: dict[str, SortedValues] = {}
        self._subsets: dict[tuple[Filters, bool], Pool] = {}

    @classmethod
    def of(
        cls,
        calls: Iterable[Call],
        manual: Iterable[ManualValue],
        samples: int,
        spans: Iterable[SampleSpan],
    ) -> Pool:
        """One test's pool from all its calls, values and sample spans (only the kept ones are
        pooled)."""
        kept = tuple(s for s in spans if s.kept)
        part = _Part(tuple(c for c in calls if c.kept), samples, tuple(s.turn for s in kept), kept)
        return cls([part], [m for m in manual if m.kept])

    @classmethod
    def merged(cls, pools: Iterable[Pool]) -> Pool:
        """Several tests pooled (session and group budgets, rollups)."""
        pools = list(pools)
        return cls(
            [p for pool in pools for p in pool._parts],
            [m for p in pools for m in p.manual],
            pools,
        )

    # ---- values --------------------------------------------------------------------------------

    def values(self, metric: str) -> SortedValues:
        """The sorted values of a distribution metric: every successful call that has it (a
        per-call or per-chunk metric), or one value per kept sample (`calls`, `turn`), plus the
        values the tests recorded by hand."""
        found = self._cache.get(metric)
        if found is None:
            if self._members:
                # Each member's values are sorted (and usually cached): sorting their
                # concatenation merges runs, several times cheaper than sorting afresh.
                raw = list(chain.from_iterable(m.values(metric) for m in self._members))
            else:
                if metric == "calls":
                    raw = [float(c) for c in self.calls_per_sample()]
                elif metric == "turn":
                    raw = list(self.turns())
                elif metric in POOLED_METRICS:
                    raw = call_values(self.ok, metric)
                else:
                    raise ValueError(f"{metric!r} is not a distribution metric")
                raw.extend(m.value for m in self.manual if m.metric == metric)
            found = self._cache[metric] = SortedValues.of(raw)
        return found

    def percentile(self, metric: str, p: float) -> float | None:
        """The metric's p-th percentile by the budgets' estimator; None when it is absent."""
        from pytest_latency import stats

        data = self.values(metric)
        return stats.percentile(data, p) if data else None

    def mean(self, metric: str) -> float | None:
        data = self.values(metric)
        return math.fsum(data) / len(data) if data else None

    # ---- counts --------------------------------------------------------------------------------

    def calls_per_sample(self) -> tuple[int, ...]:
        """The `calls` metric: LLM calls each kept sample made, test after test."""
        counts: list[int] = []
        for part in self._parts:
            per = [0] * part.samples
            for call in part.calls:
                if 0 <= call.sample < part.samples:
                    per[call.sample] += 1
            counts.extend(per)
        return tuple(counts)

    def turns(self) -> tuple[float, ...]:
        """The `turn` metric as measured (no hand-recorded values): each kept sample's wall
        time in µs, test after test."""
        return tuple(t for part in self._parts for t in part.turns)

    def spans(self) -> tuple[SampleSpan, ...]:
        """The kept samples' spans, test after test (each test's in the order they ended)."""
        return tuple(s for part in self._parts for s in part.spans)

    @property
    def samples(self) -> int:
        return sum(part.samples for part in self._parts)

    @property
    def errors(self) -> int:
        return len(self.finals) - len(self.ok)

    @property
    def retries(self) -> int:
        return sum(c.retries for c in self.calls)

    def error_counts(self) -> Counter[str]:
        """What went wrong, by error kind: each call counted once, by its final attempt."""
        return Counter(f.error for f in self.finals if f.error is not None)

    def manual_counts(self) -> Counter[str]:
        """How many values the tests recorded by hand (kept ones), by metric."""
        return Counter(m.metric for m in self.manual)

    def cost_totals(self) -> CostTotals:
        """Σ `cost` over the successful calls (the values a `cost.sum` budget adds: none can be
        recorded by hand), and the calls without one."""
        return cost_totals(self.ok)

    def cache_ratio(self) -> CacheRatio | None:
        """Σ cache reads / Σ input over the successful calls that reported cache fields."""
        return cache_ratio(self.ok)

    # ---- subsets -------------------------------------------------------------------------------

    def subset(self, filters: Filters = (), *, unflagged: bool = False) -> Pool:
        """The calls matching a budget's filters (and, with `unflagged`, none the client
        distorted); hand-recorded values stay: they carry no model or endpoint."""
        if not filters and not unflagged:
            return self
        key = (filters, unflagged)
        found = self._subsets.get(key)
        if found is None:
            parts = [
                _Part(
                    tuple(
                        c
                        for c in part.calls
                        if _matches(c.final, filters) and not (unflagged and c.final.flagged)
                    ),
                    part.samples,
                    part.turns,
                    part.spans,
                )
                for part in self._parts
            ]
            found = self._subsets[key] = Pool(parts, self.manual)
        return found


__all__ = ["CacheRatio", "Filters", "Pool", "cache_ratio", "call_values"]
