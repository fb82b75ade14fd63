"""The result file's numeric blocks: metric distributions, counters, cache ratios, flags.

Owns a test's metric block (exact percentiles of its sorted raw values, with the same linear
estimator budgets use, plus the values' HDR histogram), a rollup's block (from its HDR histogram,
with the exact integer sum so the mean survives merging), the counters groups and the session add
up (`Tally`), the flag counts, the cache-ratio block, the `metrics_info` table (units and OTel
names from the catalogue) and `json_safe` (diagnosis output made strict JSON). May import
`stats`, `histogram`, `catalogue`, `pools` (the `CacheRatio` and `CostTotals` types); never
pytest.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pytest_latency import stats
from pytest_latency.catalogue import ATTEMPT_METRICS, BLOCK_METRICS, CALL_FLAGS, METRICS
from pytest_latency.histogram import BucketCounts, LatencyHistogram
from pytest_latency.pools import NO_COST, CacheRatio, CostTotals
from pytest_latency.results._schema import CacheRatioBlock, MetricBlock, OtelBlock

if TYPE_CHECKING:
    from pytest_latency.metrics import CallMetrics

PERCENTILES: Final = (50.0, 90.0, 95.0, 99.0)
FLAGS: Final = CALL_FLAGS  # the per-call flags each block counts (`catalogue.FLAG_SPECS`)


def otel(metric: str) -> OtelBlock | None:
    mapping = METRICS[metric].otel
    return mapping.to_dict() if mapping else None  # type: ignore[return-value]


def metrics_info() -> dict[str, dict[str, Any]]:
    return {m: {"unit": METRICS[m].unit, "otel": otel(m)} for m in BLOCK_METRICS}


def _pkey(p: float) -> str:
    return f"p{p:g}"


def exact_block(metric: str, data: stats.SortedValues, counts: BucketCounts) -> MetricBlock:
    """A per-test block: percentiles by the budgets' estimator on the (sorted) raw values, plus
    the values' HDR histogram for tools (and for `compare`, which has no raw values); `counts`
    holds the same values counted per bucket."""
    block: dict[str, Any] = {"unit": METRICS[metric].unit, "count": len(data)}
    for p in PERCENTILES:
        block[_pkey(p)] = stats.percentile(data, p)
    block.update(
        {
            "min": data[0],
            "max": data[-1],
            "mean": math.fsum(data) / len(data),
            "hdr": counts.encode(),
            "otel": otel(metric),
        }
    )
    return block  # type: ignore[return-value]


@dataclass(slots=True)
class HdrPool:
    """One metric of a group: an HDR histogram plus the exact integer sum of what it holds, so
    the mean survives merging (a decoded histogram only knows bucket midpoints)."""

    hist: LatencyHistogram
    total: int = 0
    out_of_range: int = 0

    @classmethod
    def of(cls, parts: Iterable[BucketCounts]) -> HdrPool:
        """The pool of values counted in `parts` (one histogram, filled bucket by bucket)."""
        pool = cls(LatencyHistogram())
        for counts in parts:
            pool.hist.add_counts(counts)
            pool.total += counts.total
            pool.out_of_range += counts.out_of_range
        return pool

    @classmethod
    def from_block(cls, block: Mapping[str, Any]) -> HdrPool:
        return cls(
            LatencyHistogram.decode(block["hdr"]),
            int(block["sum"]),
            int(block.get("out_of_range", 0)),
        )

    def add(self, other: HdrPool) -> None:
        self.hist.merge(other.hist)
        self.total += other.total
        self.out_of_range += other.out_of_range

    def block(self, metric: str) -> MetricBlock:
        blob = self.hist.encode()
        # Statistics from the decoded form only: a freshly recorded hdrh histogram tracks its
        # exact min/max, a decoded one the bucket edges, and a merged file must equal a built one.
        hist = LatencyHistogram.decode(blob)
        found = hist.percentiles(PERCENTILES)
        block: dict[str, Any] = {"unit": METRICS[metric].unit, "count": hist.count}
        for p in PERCENTILES:
            block[_pkey(p)] = found[p]
        block.update(
            {
                "min": hist.min,
                "max": hist.max,
                "mean": self.total / hist.count,
                "sum": self.total,
                "out_of_range": self.out_of_range,
                "hdr": blob,
                "otel": otel(metric),
            }
        )
        return block  # type: ignore[return-value]


@dataclass(slots=True)
class Tally:
    """Counters that groups and the session add up (all integers, so merging is exact)."""

    tests: int = 0
    call_count: int = 0
    error_count: int = 0
    # Calls whose final attempt carries a distorting flag (`CallMetrics.flagged`): the one count
    # of "flagged calls" the outputs show (`flags` counts each flag, and a call may carry two).
    flagged_count: int = 0
    retries: int = 0
    calls_reporting_cache: int = 0
    cache_read: int = 0
    cache_input: int = 0

    def add(self, other: Tally) -> None:
        """Another tally's counts added to these (every field is a count)."""
        self.tests += other.tests
        self.call_count += other.call_count
        self.error_count += other.error_count
        self.flagged_count += other.flagged_count
        self.retries += other.retries
        self.calls_reporting_cache += other.calls_reporting_cache
        self.cache_read += other.cache_read
        self.cache_input += other.cache_input

    def add_ratio(self, ratio: CacheRatio | None) -> None:
        if ratio is not None:
            self.calls_reporting_cache += ratio.calls
            self.cache_read += ratio.read_tokens
            self.cache_input += ratio.input_tokens

    def ratio_block(self) -> CacheRatioBlock:
        return ratio_block(
            CacheRatio(self.cache_read, self.cache_input, self.calls_reporting_cache)
        )


def cost_block(totals: CostTotals) -> dict[str, Any]:
    """A test's, group's or the session's `cost`: Σ cost of its successful calls and what the
    cache saved and cost extra (µ$, as the `cost` metric), the calls priced and those not. With
    no call priced the sums are null: absent, never 0."""
    priced = totals.priced > 0
    return {
        "unit": METRICS["cost"].unit,
        "total": totals.cost if priced else None,
        "cache_saved": totals.cache_saved if priced else None,
        "cache_extra": totals.cache_extra if priced else None,
        "net_saved": totals.net_saved if priced else None,
        "calls_priced": totals.priced,
        "unpriced_models": dict(totals.unpriced),
        "calls_without_usage": totals.no_usage,
    }


def cost_of_block(block: Mapping[str, Any] | None) -> CostTotals:
    """`cost_block` read back (a merge adds the shards'); a file written before costs: none."""
    if not block:
        return NO_COST
    return CostTotals(
        float(block.get("total") or 0.0),
        float(block.get("cache_saved") or 0.0),
        float(block.get("cache_extra") or 0.0),
        int(block.get("calls_priced", 0)),
        {str(k): int(v) for k, v in (block.get("unpriced_models") or {}).items()},
        int(block.get("calls_without_usage", 0)),
    )


def ratio_block(ratio: CacheRatio | None) -> CacheRatioBlock:
    ratio = ratio or CacheRatio(0, 0, 0)
    return {
        "value": ratio.value,
        "cache_fields": "reported" if ratio.calls else "absent",
        "calls_reporting": ratio.calls,
        "read_tokens": ratio.read_tokens,
        "input_tokens": ratio.input_tokens,
    }


_FLAGS_OF: Final = operator.attrgetter(*FLAGS)


def flag_counts(finals: Sequence[CallMetrics]) -> dict[str, int]:
    """How many of `finals` carry each flag (most carry none: one pass finds the few that do)."""
    flagged = [values for values in map(_FLAGS_OF, finals) if any(values)]
    return {flag: sum(bool(v[i]) for v in flagged) for i, flag in enumerate(FLAGS)}


def flagged_count(finals: Sequence[CallMetrics]) -> int:
    """How many of `finals` are flagged: their timings do not measure the server
    (`catalogue.DISTORTING_FLAGS`). `incomplete` and `opaque` alone are not: they say what a call
    is (read only in part, undecodable), not that its stamps are wrong."""
    return sum(1 for f in finals if f.flagged)


def without_repeats(blocks: Mapping[str, MetricBlock]) -> dict[str, MetricBlock]:
    """`blocks` without each `attempt_*` block whose numbers are its call metric's (no
    successful call in scope came after an SDK retry): absent is "the same as the call metric",
    never a copy that says nothing, and `merge` reads an absent one so (`attempt_blocks`)."""
    out: dict[str, MetricBlock] = {}
    for metric, block in blocks.items():
        base = ATTEMPT_METRICS.get(metric)
        if base is not None and base in blocks and _numbers(block) == _numbers(blocks[base]):
            continue
        out[metric] = block
    return out


def _numbers(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k not in ("unit", "otel")}


def attempt_blocks(blocks: Mapping[str, Any], present: Iterable[str]) -> dict[str, Any]:
    """One shard's blocks of a rollup to be added up, where another shard wrote the attempt
    metrics in `present`: an attempt block this shard left out is its call metric's block (it
    was left out because it was the same, `without_repeats`)."""
    out = dict(blocks)
    for metric in present:
        base = ATTEMPT_METRICS[metric]
        if metric not in out and base in out:
            out[metric] = out[base]
    return out


def rollup_dict(
    key_fields: Mapping[str, str],
    tally: Tally,
    errors: Mapping[str, int],
    retried_errors: Mapping[str, int],
    flags: Mapping[str, int],
    metrics: dict[str, MetricBlock],
) -> dict[str, Any]:
    return {
        **key_fields,
        "tests": tally.tests,
        "call_count": tally.call_count,
        "error_count": tally.error_count,
        "flagged_count": tally.flagged_count,
        "retries": tally.retries,
        "errors": dict(sorted(errors.items())),
        "retried_errors": dict(sorted(retried_errors.items())),
        "flags": {f: int(flags.get(f, 0)) for f in FLAGS},
        "cache_read_ratio": tally.ratio_block(),
        "metrics": metrics,
    }


def json_safe(value: Any, digits: int | None = None) -> Any:
    """Diagnosis output made strict JSON: non-finite floats become null, tuples lists; with
    `digits`, floats keep that many significant digits (the what-ifs: 7 is 1 µs at seconds)."""
    kind = type(value)  # exact types first: the what-ifs are thousands of plain floats
    if kind is int or kind is str or value is None:
        return value
    if kind is float:
        if not math.isfinite(value):
            return None
        return float(f"{value:.{digits}g}") if digits else value
    if kind is dict:
        return {str(k): json_safe(v, digits) for k, v in value.items()}
    if kind is list:
        return [json_safe(v, digits) for v in value]
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return float(f"{value:.{digits}g}") if digits else value
    if isinstance(value, Mapping):
        return {str(k): json_safe(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v, digits) for v in value]
    return value


def finite(value: float | None) -> float | None:
    """JSON has no infinity: an unbounded interval side is written as null."""
    return value if value is not None and math.isfinite(value) else None
