"""The result file: the versioned JSON record of a run, and merging and comparing such files.

Owns the schema `pytest-latency/1` (documented field by field in docs/result-schema.md): turning
the per-test data the plugin collects into per-test metric blocks (exact percentiles from raw
values, with the same linear estimator budgets use), per-model/per-endpoint rollups and the
session block (HDR histograms, so CI shards merge exactly), the OpenTelemetry GenAI name and unit
each metric maps to, loading with schema validation, atomic writing, the merge of shard files
and the statistical comparison of two runs. It also attaches the diagnosis: per test the findings
the plugin computed (or `diagnose.findings_for_test` when absent) and the what-ifs (fan-out,
hedging), per group and for the session the findings over their pooled calls. The report renders
what this module builds; it never recomputes a metric.

May import `aggregate` (scope rules: kept calls, value pools, cache ratio), `budgets`, `diagnose`,
`histogram`, `stats`, `catalogue`, `metrics`; never pytest, never jinja2.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pytest_latency import diagnose, stats
from pytest_latency.aggregate import cache_read_ratio, error_counts, kept_calls, per_call_values
from pytest_latency.budgets import BudgetError, Expectation, parse_expectation
from pytest_latency.histogram import BucketCounts, LatencyHistogram, record_values
from pytest_latency.metrics import CallMetrics
from pytest_latency.recording import OUTSIDE, Call

__all__ = [
    "OTEL",
    "SCHEMA",
    "TIME_METRICS",
    "TOKEN_METRICS",
    "Comparison",
    "MetricChange",
    "OtelMapping",
    "ResultError",
    "budget_status",
    "build_result",
    "compare_results",
    "dumps",
    "load_result",
    "merge_results",
    "verdict_counts",
    "write_result",
]

SCHEMA: Final = "pytest-latency/1"
TIME_METRICS: Final = ("ttfb", "ttft", "ttfo", "e2e", "tpot", "itl")
TOKEN_METRICS: Final = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
PERCENTILES: Final = (50.0, 90.0, 95.0, 99.0)
# Bounds on the per-test lists, so the file grows with the number of tests, not with samples.
MAX_PREFILL_POINTS: Final = 500
MAX_TIMELINE_SAMPLES: Final = 50
MAX_TIMELINE_CALLS: Final = 100


@dataclass(frozen=True, slots=True)
class OtelMapping:
    """Where a metric lands in the OpenTelemetry GenAI semantic conventions (status:
    Development). `scale` converts our value to the OTel unit (µs → s is 1e-6). `kind` is
    "metric" (a histogram instrument) or "attribute" (a span/usage attribute, no instrument)."""

    name: str
    unit: str
    scale: float
    kind: str = "metric"
    attributes: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "unit": self.unit, "scale": self.scale}
        if self.kind != "metric":
            out["kind"] = self.kind
        if self.attributes:
            out["attributes"] = dict(self.attributes)
        return out


_TOKEN_USAGE = "gen_ai.client.token.usage"
# The one table of OTel names; docs/result-schema.md repeats it. ttfb and ttfo have no OTel
# counterpart and map to nothing (null) rather than to a near miss.
OTEL: Final[Mapping[str, OtelMapping]] = {
    "ttft": OtelMapping("gen_ai.client.operation.time_to_first_chunk", "s", 1e-6),
    "e2e": OtelMapping("gen_ai.client.operation.duration", "s", 1e-6),
    "tpot": OtelMapping("gen_ai.server.time_per_output_token", "s", 1e-6),
    "itl": OtelMapping("gen_ai.client.operation.time_per_output_chunk", "s", 1e-6),
    "input_tokens": OtelMapping(
        _TOKEN_USAGE, "{token}", 1.0, attributes=(("gen_ai.token.type", "input"),)
    ),
    "output_tokens": OtelMapping(
        _TOKEN_USAGE, "{token}", 1.0, attributes=(("gen_ai.token.type", "output"),)
    ),
    "cache_read_tokens": OtelMapping(
        "gen_ai.usage.cache_read.input_tokens", "{token}", 1.0, kind="attribute"
    ),
    "cache_write_tokens": OtelMapping(
        "gen_ai.usage.cache_creation.input_tokens", "{token}", 1.0, kind="attribute"
    ),
}


class ResultError(ValueError):
    """A result file that cannot be read: missing, not JSON, or not our schema."""


def _unit(metric: str) -> str:
    return "tok" if metric in TOKEN_METRICS else "us"


def _otel(metric: str) -> dict[str, Any] | None:
    mapping = OTEL.get(metric)
    return mapping.to_dict() if mapping else None


# ---- metric blocks ---------------------------------------------------------------------------


def _exact_block(metric: str, values: Sequence[float], counts: BucketCounts) -> dict[str, Any]:
    """A per-test block: percentiles by the budgets' estimator on the raw values, plus the
    values' HDR histogram for tools (and for `compare`, which has no raw values); `counts` holds
    the same values counted per bucket."""
    data = sorted(values)
    block: dict[str, Any] = {"unit": _unit(metric), "count": len(data)}
    for p in PERCENTILES:
        block[_pkey(p)] = stats.percentile(data, p)
    block.update(
        {
            "min": data[0],
            "max": data[-1],
            "mean": math.fsum(data) / len(data),
            "hdr": counts.encode(),
            "otel": _otel(metric),
        }
    )
    return block


def _pkey(p: float) -> str:
    return f"p{p:g}"


@dataclass(slots=True)
class _HdrPool:
    """One metric of a group: an HDR histogram plus the exact integer sum of what it holds, so
    the mean survives merging (a decoded histogram only knows bucket midpoints)."""

    hist: LatencyHistogram
    total: int = 0
    out_of_range: int = 0

    @classmethod
    def of(cls, parts: Iterable[BucketCounts]) -> _HdrPool:
        """The pool of values counted in `parts` (one histogram, filled bucket by bucket)."""
        pool = cls(LatencyHistogram())
        for counts in parts:
            pool.hist.add_counts(counts)
            pool.total += counts.total
            pool.out_of_range += counts.out_of_range
        return pool

    @classmethod
    def from_block(cls, block: Mapping[str, Any]) -> _HdrPool:
        return cls(
            LatencyHistogram.decode(block["hdr"]),
            int(block["sum"]),
            int(block.get("out_of_range", 0)),
        )

    def add(self, other: _HdrPool) -> None:
        self.hist.merge(other.hist)
        self.total += other.total
        self.out_of_range += other.out_of_range

    def block(self, metric: str) -> dict[str, Any]:
        blob = self.hist.encode()
        # Statistics from the decoded form only: a freshly recorded hdrh histogram tracks its
        # exact min/max, a decoded one the bucket edges, and a merged file must equal a built one.
        hist = LatencyHistogram.decode(blob)
        found = hist.percentiles(PERCENTILES)
        block: dict[str, Any] = {"unit": _unit(metric), "count": hist.count}
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
                "otel": _otel(metric),
            }
        )
        return block


# ---- per-test entries ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Tally:
    """Counters that groups and the session add up (all integers, so merging is exact)."""

    tests: int = 0
    call_count: int = 0
    error_count: int = 0
    retries: int = 0
    calls_reporting_cache: int = 0
    cache_read: int = 0
    cache_input: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tests": self.tests,
            "call_count": self.call_count,
            "error_count": self.error_count,
            "retries": self.retries,
        }


FLAGS: Final = ("consumer_bound", "client_saturated", "incomplete", "opaque")


# The group keys of a call (`_group_keys`, keys only): calls with the same keys land in the same
# rollups, so their values are counted once per key set and each rollup adds up its key sets.
_Keys = tuple[str, ...]


@dataclass(slots=True)
class _Rollup:
    tally: _Tally
    errors: Counter[str]
    retried_errors: Counter[str]
    flags: Counter[str]
    finals: list[CallMetrics]

    @classmethod
    def empty(cls) -> _Rollup:
        return cls(_Tally(), Counter(), Counter(), Counter({f: 0 for f in FLAGS}), [])

    def add_calls(self, calls: Sequence[Call]) -> None:
        finals = [c.final for c in calls]
        ok = [f for f in finals if f.error is None]
        self.finals.extend(finals)
        self.tally.call_count += len(calls)
        self.tally.error_count += len(finals) - len(ok)
        self.tally.retries += sum(c.retries for c in calls)
        self.errors.update(f.error for f in finals if f.error is not None)
        self.retried_errors.update(_retried_errors(calls))
        self.flags.update(_flags(finals))
        ratio = cache_read_ratio(ok)
        if ratio is not None:
            self.tally.calls_reporting_cache += ratio.n
            self.tally.cache_read += int(ratio.numerator)
            self.tally.cache_input += int(ratio.denominator)

    def to_dict(
        self,
        key_fields: Mapping[str, str],
        scope: str,
        values: Iterable[Mapping[str, BucketCounts]],
    ) -> dict[str, Any]:
        """`values`: the per-metric counts of every key set of calls this rollup covers."""
        parts = list(values)
        metrics: dict[str, dict[str, Any]] = {}
        for metric in (*TIME_METRICS, *TOKEN_METRICS):
            counted = [p[metric] for p in parts if metric in p and p[metric].count]
            if counted:
                metrics[metric] = _HdrPool.of(counted).block(metric)
        out = _aggregate_dict(
            key_fields, self.tally, self.errors, self.retried_errors, self.flags, metrics
        )
        # Findings over the pooled calls (prefill/decode, cache health, consumer-bound); the
        # per-sample checks (serial calls, budgets) stay per test.
        found = diagnose.diagnose_calls(self.finals)
        out["findings"] = _json_safe(
            [diagnose.Finding(f.kind, f.message, f.evidence, scope=scope).to_dict() for f in found]
        )
        return out


def _retried_errors(calls: Sequence[Call]) -> Counter[str]:
    """Errors of attempts the SDK retried (every attempt but the last), by kind."""
    return Counter(a.error for c in calls for a in c.attempts[:-1] if a.error is not None)


def _flags(finals: Sequence[CallMetrics]) -> dict[str, int]:
    return {
        "consumer_bound": sum(f.consumer_bound for f in finals),
        "client_saturated": sum(f.client_saturated for f in finals),
        "incomplete": sum(f.incomplete for f in finals),
        "opaque": sum(f.opaque for f in finals),
    }


def _aggregate_dict(
    key_fields: Mapping[str, str],
    tally: _Tally,
    errors: Mapping[str, int],
    retried_errors: Mapping[str, int],
    flags: Mapping[str, int],
    metrics: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    return {
        **key_fields,
        **tally.to_dict(),
        "errors": dict(sorted(errors.items())),
        "retried_errors": dict(sorted(retried_errors.items())),
        "flags": {f: int(flags.get(f, 0)) for f in FLAGS},
        "cache_read_ratio": _ratio_dict(
            tally.cache_read, tally.cache_input, tally.calls_reporting_cache
        ),
        "metrics": metrics,
    }


def _json_safe(value: Any, digits: int | None = None) -> Any:
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
        return {str(k): _json_safe(v, digits) for k, v in value.items()}
    if kind is list:
        return [_json_safe(v, digits) for v in value]
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return float(f"{value:.{digits}g}") if digits else value
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v, digits) for v in value]
    return value


def _ratio_dict(read: int, total: int, reporting: int) -> dict[str, Any]:
    return {
        "value": read / total if total else None,
        "cache_fields": "reported" if reporting else "absent",
        "calls_reporting": reporting,
        "read_tokens": read,
        "input_tokens": total,
    }


def _finite(value: float | None) -> float | None:
    """JSON has no infinity: an unbounded interval side is written as null."""
    return value if value is not None and math.isfinite(value) else None


def _budget_entry(judgement: Mapping[str, Any]) -> dict[str, Any]:
    """A judgement as the plugin stored it, plus what a reader needs to show the miss: the
    parsed budget, values rendered in the budget's own unit, the relative excess, and whether
    the interval was decisive (the gate falls back to the point estimate when it is not)."""
    verdict = str(judgement["verdict"])
    entry: dict[str, Any] = {
        "expr": judgement["expr"],
        "verdict": verdict,
        # The gate's decision after the inconclusive policy (absent in older data: the verdict).
        "passed": bool(judgement.get("passed", verdict == "pass")),
        "estimate": _finite(judgement.get("estimate")),
        "interval": None,
        "n": int(judgement.get("n", 0)),
        "message": judgement.get("message", ""),
    }
    interval = judgement.get("interval")
    if interval:
        entry["interval"] = [_finite(float(interval[0])), _finite(float(interval[1]))]
    try:
        expectation = parse_expectation(str(judgement["expr"]), source="result file")
    except BudgetError:
        return entry
    entry.update(_budget_terms(expectation, judgement))
    return entry


def _budget_terms(expectation: Expectation, judgement: Mapping[str, Any]) -> dict[str, Any]:
    estimate = judgement.get("estimate")
    interval = judgement.get("interval")
    terms: dict[str, Any] = {
        "metric": expectation.metric,
        "stat": expectation.stat,
        "op": expectation.op,
        "threshold": expectation.threshold,
        "threshold_text": expectation.format_value(expectation.threshold),
        "estimate_text": None,
        "interval_text": None,
        "excess": None,
        "confident": False,
    }
    if estimate is None or not math.isfinite(float(estimate)):
        return terms
    value = float(estimate)
    terms["estimate_text"] = expectation.format_value(value)
    if expectation.threshold:
        # Signed so that > 0 always means "on the wrong side of the budget by this fraction".
        over = (value - expectation.threshold) / abs(expectation.threshold)
        terms["excess"] = over if expectation.op in ("<", "<=") else -over
    bounds = None
    if interval:
        bounds = (float(interval[0]), float(interval[1]))
        lo, hi = bounds
        lo_s = "-∞" if math.isinf(lo) else expectation.format_value(lo)
        hi_s = "∞" if math.isinf(hi) else expectation.format_value(hi)
        terms["interval_text"] = f"{lo_s} .. {hi_s}"
    decided = stats.verdict(expectation.op, expectation.threshold, bounds, value)
    terms["confident"] = decided != "inconclusive" and judgement["verdict"] != "inconclusive"
    return terms


def budget_status(budget: Mapping[str, Any]) -> str:
    """How a reader should count a budget: "fail" when the gate failed it, whatever the
    statistics said (it failed the test); "inconclusive" when the gate let it through without a
    confident interval; otherwise "pass"."""
    verdict = budget.get("verdict")
    if not budget.get("passed", verdict == "pass"):
        return "fail"
    if verdict == "inconclusive" or not budget.get("confident", True):
        return "inconclusive"
    return "pass"


def verdict_counts(result: Mapping[str, Any]) -> dict[str, int]:
    """Budget outcomes over every test budget and session budget of a result."""
    counts = {"pass": 0, "fail": 0, "inconclusive": 0}
    for budget in _all_budgets(result):
        counts[budget_status(budget)] += 1
    return counts


def _all_budgets(result: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    for test in result.get("tests", []):
        yield from test.get("budgets", [])
    yield from result.get("session", {}).get("budgets", [])


def _kept_manual(data: Mapping[str, Any]) -> list[list[Any]]:
    return [m for m in data.get("manual", []) if m[0] >= 0 and not m[1]]


def _test_entry(
    data: Mapping[str, Any],
    calls: Sequence[Call],
    by_keys: dict[_Keys, dict[str, BucketCounts]],
) -> dict[str, Any]:
    """The test's entry; its calls' values are also counted into `by_keys` (per key set of the
    calls, per metric) for the group and session rollups."""
    finals = [c.final for c in calls]
    ok = [f for f in finals if f.error is None]
    ok_by_keys: dict[_Keys, list[CallMetrics]] = {}
    for final in ok:
        ok_by_keys.setdefault(tuple(k for k, _ in _group_keys(final)), []).append(final)
    manual = _kept_manual(data)
    metrics: dict[str, dict[str, Any]] = {}
    for metric in (*TIME_METRICS, *TOKEN_METRICS):
        values: list[float] = []
        counts = BucketCounts()
        for keys, subset in ok_by_keys.items():
            part = per_call_values(metric, subset)
            if part:
                pooled = by_keys.setdefault(keys, {}).setdefault(metric, BucketCounts())
                record_values(part, (counts, pooled))  # each value's bucket computed once
                values.extend(part)
        # Hand-recorded values join the pool exactly as they do when budgets are judged, so a
        # block's p95 is the estimate its budget saw (they stay out of the rollups).
        own = [float(m[3]) for m in manual if m[2] == metric]
        if own:
            counts.record_many(own)
            values.extend(own)
        if values:
            metrics[metric] = _exact_block(metric, values, counts)
    samples = int(data.get("samples", 0))
    per_sample = [0] * samples
    for call in calls:
        if call.sample < samples:
            per_sample[call.sample] += 1
    ratio = cache_read_ratio(ok)
    entry: dict[str, Any] = {
        "nodeid": data["nodeid"],
        "outcome": data.get("outcome", "passed"),
        "location": list(data["location"]) if data.get("location") else None,
        "policy": data.get("policy"),
        "samples": samples,
        "warmup": int(data.get("warmup", 0)),
        "call_count": len(calls),
        # Calls outside any sample (fixtures' setup and teardown): counted here, never pooled.
        "unsampled_call_count": sum(1 for c in data.get("calls", ()) if c["sample"] == OUTSIDE),
        "error_count": len(finals) - len(ok),
        "retries": sum(c.retries for c in calls),
        "calls_per_sample": per_sample,
        "metrics": metrics,
        "cache_read_ratio": _ratio_dict(
            int(ratio.numerator) if ratio else 0,
            int(ratio.denominator) if ratio else 0,
            ratio.n if ratio else 0,
        ),
        "usage_fields": _usage_fields(ok),
        "phase": _phase(ok),
        "budgets": [_budget_entry(j) for j in data.get("budgets", [])],
        "flags": _flags(finals),
        "errors": dict(sorted(error_counts(calls).items())),
        "retried_errors": dict(sorted(_retried_errors(calls).items())),
        "error_kinds": _error_kinds(calls),
        "timeline": _timeline(calls),
        "prefill": _prefill(ok),
        # The plugin attaches findings after judging budgets; data built elsewhere (tools,
        # older callers) gets them here, from the same function.
        "findings": _json_safe(
            list(data["findings"]) if "findings" in data else diagnose.findings_for_test(data)
        ),
        "what_ifs": _json_safe(_what_ifs(data, calls), digits=7),
    }
    return entry


def _what_ifs(data: Mapping[str, Any], calls: Sequence[Call]) -> dict[str, Any]:
    """`diagnose.what_ifs_for_test(data)` on the calls already parsed (it would parse them again:
    a tenth of `build_result` at 1,000 tests)."""
    out = diagnose.what_ifs([c.final for c in calls])
    out["calls_per_sample"] = diagnose.step_counts(calls, int(data.get("samples", 0)))
    return out


MAX_ERROR_DETAIL: Final = 200


def _error_kinds(calls: Sequence[Call]) -> dict[str, dict[str, Any]]:
    """Per error kind seen on any attempt: `failed` calls (their final attempt had it),
    `attempts` (every attempt with it, retried or final), `retried` (attempts with it that the
    SDK retried), `recovered` (calls that had it on an attempt and still succeeded), and
    `detail`, the first error message seen (cut to 200 characters; never request data)."""
    kinds: dict[str, dict[str, Any]] = {}
    for call in calls:
        seen: set[str] = set()
        for index, attempt in enumerate(call.attempts):
            if attempt.error is None:
                continue
            entry = kinds.setdefault(
                attempt.error,
                {"failed": 0, "attempts": 0, "retried": 0, "recovered": 0, "detail": None},
            )
            entry["attempts"] += 1
            if index < len(call.attempts) - 1:
                entry["retried"] += 1
            else:
                entry["failed"] += 1
            if entry["detail"] is None and attempt.error_detail:
                entry["detail"] = attempt.error_detail[:MAX_ERROR_DETAIL]
            seen.add(attempt.error)
        if not call.failed:
            for kind in seen:
                kinds[kind]["recovered"] += 1
    return dict(sorted(kinds.items()))


def _usage_fields(calls: Sequence[CallMetrics]) -> dict[str, int]:
    """How many successful calls reported each usage field (absent ≠ 0, so say which)."""
    return {
        "input_tokens": sum(c.input_tokens is not None for c in calls),
        "output_tokens": sum(c.output_tokens is not None for c in calls),
        "cache_fields": sum(c.cache_fields_reported for c in calls),
        "reasoning_tokens": sum(c.reasoning_tokens is not None for c in calls),
        "calls": len(calls),
    }


def _phase(calls: Sequence[CallMetrics]) -> dict[str, Any]:
    """Where a streamed call's time goes: before the first token (queueing, network, prefill)
    or after it (decode), as shares of the summed e2e of the calls that have both."""
    timed = [(c.ttft, c.e2e) for c in calls if c.ttft is not None and c.e2e is not None]
    total = math.fsum(e for _, e in timed)
    if not timed or total <= 0:
        return {"prefill_share": None, "decode_share": None, "n": len(timed)}
    before = min(math.fsum(t for t, _ in timed) / total, 1.0)
    return {"prefill_share": before, "decode_share": 1.0 - before, "n": len(timed)}


def _timeline(calls: Sequence[Call]) -> dict[str, Any]:
    """Per kept sample, its calls as [start, first token, end, api, error] in µs from the
    sample's first request: enough to draw overlap (fan-out) against serial chains."""
    by_sample: dict[int, list[Call]] = {}
    for call in calls:
        by_sample.setdefault(call.sample, []).append(call)
    samples = []
    truncated = len(by_sample) > MAX_TIMELINE_SAMPLES
    for sample in sorted(by_sample)[:MAX_TIMELINE_SAMPLES]:
        group = sorted(by_sample[sample], key=lambda c: c.attempts[0].t_start_ns)
        truncated = truncated or len(group) > MAX_TIMELINE_CALLS
        origin = group[0].attempts[0].t_start_ns
        rows = []
        for call in group[:MAX_TIMELINE_CALLS]:
            first, final = call.attempts[0], call.final
            final_offset = (final.t_start_ns - origin) / 1000
            end = (
                final_offset + final.e2e
                if final.e2e is not None
                else (final.t_end_ns - origin) / 1000
            )
            token = None if final.ttft is None else round(final_offset + final.ttft)
            rows.append(
                [
                    round((first.t_start_ns - origin) / 1000),
                    token,
                    round(end),
                    final.api,
                    final.error,
                ]
            )
        samples.append({"sample": sample, "calls": rows})
    return {"samples": samples, "truncated": truncated}


def _prefill(calls: Sequence[CallMetrics]) -> dict[str, Any] | None:
    """TTFT against uncached input tokens, with a least-squares line: its slope is the prefill
    cost per uncached token, its intercept the fixed overhead (network, queueing)."""
    points = [
        (
            c.input_tokens - (c.cache_read_tokens or 0),
            c.ttft,
            bool(c.cache_read_tokens),
        )
        for c in calls
        if c.ttft is not None and c.input_tokens is not None
    ]
    if not points:
        return None
    slope = intercept = None
    n = len(points)
    mean_x = math.fsum(p[0] for p in points) / n
    mean_y = math.fsum(p[1] for p in points) / n
    sxx = math.fsum((p[0] - mean_x) ** 2 for p in points)
    if n >= 2 and sxx > 0:
        slope = math.fsum((p[0] - mean_x) * (p[1] - mean_y) for p in points) / sxx
        intercept = mean_y - slope * mean_x
    # An even stride keeps the kept points spread over the run rather than its first calls.
    stride = max(1, math.ceil(n / MAX_PREFILL_POINTS))
    kept = points[::stride][:MAX_PREFILL_POINTS]
    return {
        "points": [[x, round(y), cached] for x, y, cached in kept],
        "n": n,
        "slope_us_per_token": slope,
        "intercept_us": intercept,
    }


# ---- the whole file ------------------------------------------------------------------------------


def _group_keys(call: CallMetrics) -> tuple[tuple[str, dict[str, str]], ...]:
    model = call.model if call.model is not None else "(unknown)"
    return (
        (f"model={model}", {"model": model}),
        (f"endpoint={call.api}", {"endpoint": call.api}),
        (f"model={model},endpoint={call.api}", {"model": model, "endpoint": call.api}),
    )


def build_result(
    tests: list[dict[str, Any]], *, session: dict[str, Any], run: dict[str, Any]
) -> dict[str, Any]:
    """The result file of one run from the plugin's per-test data (see docs/result-schema.md).

    `tests` are `Recording.to_data()` dicts plus `outcome`, `location`, `budgets`, `policy`;
    `session` is `{"budgets": [...], "partial": bool}`; `run` is `{"started", "duration_s",
    "versions", "git"}`. Metric scope follows `aggregate`: kept samples, successful calls.
    Each test keeps its `findings` (computed here when absent) and gets its `what_ifs`; each
    group and the session get `findings` over their pooled calls.
    """
    entries: list[dict[str, Any]] = []
    everything = _Rollup.empty()
    groups: dict[str, tuple[dict[str, str], _Rollup]] = {}
    # Every value is counted once (per test block and per key set of its call, in one pass);
    # a rollup adds up the few key sets it covers instead of re-recording its values.
    by_keys: dict[_Keys, dict[str, BucketCounts]] = {}
    for data in tests:
        calls = kept_calls(data)
        entries.append(_test_entry(data, calls, by_keys))
        everything.add_calls(calls)
        everything.tally.tests += 1
        seen: set[str] = set()
        by_key: dict[str, list[Call]] = {}
        for call in calls:
            for key, fields in _group_keys(call.final):
                if key not in groups:
                    groups[key] = (fields, _Rollup.empty())
                by_key.setdefault(key, []).append(call)
        for key, group_calls in by_key.items():
            rollup = groups[key][1]
            rollup.add_calls(group_calls)
            if key not in seen:
                rollup.tally.tests += 1
                seen.add(key)
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "run": {
            "started": run.get("started"),
            "duration_s": run.get("duration_s"),
            "partial": bool(session.get("partial", False)),
            "versions": dict(run.get("versions", {})),
            "git": run.get("git"),
            "shards": 1,
        },
        "metrics_info": _metrics_info(),
        "tests": entries,
        "groups": {
            key: rollup.to_dict(fields, key, (v for ks, v in by_keys.items() if key in ks))
            for key, (fields, rollup) in sorted(groups.items())
        },
        "session": {
            **everything.to_dict({}, "session", by_keys.values()),
            "budgets": [_budget_entry(j) for j in session.get("budgets", [])],
        },
    }
    result["summary"] = verdict_counts(result)
    return result


def _metrics_info() -> dict[str, Any]:
    return {m: {"unit": _unit(m), "otel": _otel(m)} for m in (*TIME_METRICS, *TOKEN_METRICS)}


def merge_results(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge the result files of CI shards into the file of the whole run.

    Tests are concatenated in shard order; a node id found in more than one shard is kept every
    time, each copy marked with its 0-based `shard`. Group and session histograms are added
    exactly (same bucket layout), counters summed; the run is partial if any shard was. Session
    budgets cannot be re-judged from histograms: each shard's are kept, marked with `shard`.
    """
    if not results:
        raise ResultError("nothing to merge: no result files given")
    for index, result in enumerate(results):
        _validate(result, f"shard {index}")
    owners: Counter[str] = Counter()
    for result in results:
        owners.update({t["nodeid"] for t in result["tests"]})
    tests: list[dict[str, Any]] = []
    for index, result in enumerate(results):
        for test in result["tests"]:
            copy = dict(test)
            if owners[test["nodeid"]] > 1:
                copy["shard"] = index
            tests.append(copy)
    groups: dict[str, dict[str, Any]] = {}
    for key in sorted({k for r in results for k in r["groups"]}):
        parts = [(i, r["groups"][key]) for i, r in enumerate(results) if key in r["groups"]]
        fields = {f: parts[0][1][f] for f in ("model", "endpoint") if f in parts[0][1]}
        groups[key] = _merge_aggregates(parts, fields)
    session = _merge_aggregates([(i, r["session"]) for i, r in enumerate(results)], {})
    session["budgets"] = [
        {**b, "shard": i} if len(results) > 1 else dict(b)
        for i, r in enumerate(results)
        for b in r["session"].get("budgets", [])
    ]
    merged: dict[str, Any] = {
        "schema": SCHEMA,
        "run": _merge_runs([r["run"] for r in results]),
        "metrics_info": _metrics_info(),
        "tests": tests,
        "groups": groups,
        "session": session,
    }
    merged["summary"] = verdict_counts(merged)
    return merged


def _merge_aggregates(
    shards: Sequence[tuple[int, Mapping[str, Any]]], fields: Mapping[str, str]
) -> dict[str, Any]:
    """Add up one rollup over the shard files that have it (`(shard index, rollup)` pairs)."""
    parts = [part for _, part in shards]
    tally = _Tally()
    errors: Counter[str] = Counter()
    retried: Counter[str] = Counter()
    flags: Counter[str] = Counter()
    pools: dict[str, _HdrPool] = {}
    for part in parts:
        tally.tests += int(part["tests"])
        tally.call_count += int(part["call_count"])
        tally.error_count += int(part["error_count"])
        tally.retries += int(part["retries"])
        ratio = part["cache_read_ratio"]
        tally.calls_reporting_cache += int(ratio["calls_reporting"])
        tally.cache_read += int(ratio["read_tokens"])
        tally.cache_input += int(ratio["input_tokens"])
        errors.update(part.get("errors", {}))
        retried.update(part.get("retried_errors", {}))
        flags.update(part.get("flags", {}))
        for metric, block in part["metrics"].items():
            pool = _HdrPool.from_block(block)
            if metric in pools:
                pools[metric].add(pool)
            else:
                pools[metric] = pool
    order: list[str] = [m for m in (*TIME_METRICS, *TOKEN_METRICS) if m in pools]
    metrics = {m: pools[m].block(m) for m in order}
    out = _aggregate_dict(fields, tally, errors, retried, flags, metrics)
    # Findings need the calls, which a file does not keep: a merged rollup carries each shard's
    # own findings, marked with its `shard` (0-based index among the merged files), and none
    # recomputed. A single file passes through unchanged.
    # A shard without calls has nothing to say, so with one shard that has calls its findings
    # are exactly the run's and pass through unchanged.
    speaking = [(i, part) for i, part in shards if int(part.get("call_count", 0))]
    if len(speaking) <= 1:
        out["findings"] = [dict(f) for _, part in speaking for f in part.get("findings", [])]
    else:
        out["findings"] = [
            {**f, "shard": index} for index, part in speaking for f in part.get("findings", [])
        ]
    return out


def _merge_runs(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    starts = [r["started"] for r in runs if r.get("started")]
    # ISO timestamps of one timezone sort as strings; the run spans its shards' earliest start.
    ends = []
    for r in runs:
        ends.append(float(r.get("duration_s") or 0.0))
    first = runs[0]
    return {
        "started": min(starts) if starts else None,
        "duration_s": max(ends) if ends else None,
        "partial": any(bool(r.get("partial")) for r in runs),
        "versions": dict(first.get("versions", {})),
        "git": first.get("git"),
        "shards": sum(int(r.get("shards", 1)) for r in runs),
    }


# ---- reading and writing ---------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def dumps(result: Mapping[str, Any]) -> str:
    """Strict JSON (no NaN or Infinity, which other parsers reject)."""
    return json.dumps(result, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def write_result(path: str | os.PathLike[str], result: Mapping[str, Any]) -> None:
    """Write atomically: a reader (or a crashed run) never sees half a file."""
    target = Path(path)
    text = dumps(result)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    try:
        # mkstemp makes the file private (0600); the result is an ordinary artifact, readable as
        # any file written with the user's umask would be.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a result file; any problem is one `ResultError` naming the file."""
    name = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultError(f"{name}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultError(f"{name}: cannot read: {exc}") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ResultError(f"{name}: not valid JSON: {exc}") from None
    _validate(data, name)
    return data  # type: ignore[no-any-return]


def _validate(data: Any, name: str) -> None:
    if not isinstance(data, dict):
        raise ResultError(f"{name}: not a pytest-latency result file (expected a JSON object)")
    schema = data.get("schema")
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith("pytest-latency/"):
            raise ResultError(
                f"{name}: result schema {schema!r} is not supported by this version "
                f"(it reads {SCHEMA!r})"
            )
        raise ResultError(f"{name}: not a pytest-latency result file (schema {schema!r})")
    for key, kind in (("run", dict), ("tests", list), ("groups", dict), ("session", dict)):
        if not isinstance(data.get(key), kind):
            raise ResultError(f"{name}: malformed result file: {key!r} missing or wrong type")
    for index, test in enumerate(data["tests"]):
        if not isinstance(test, dict) or not isinstance(test.get("nodeid"), str):
            raise ResultError(f"{name}: malformed result file: tests[{index}] has no nodeid")
    # The rollups are what merge and compare compute with, and there are few of them: check that
    # their histograms decode, so a damaged file fails here, with its name, not halfway through.
    rollups = [("session", data["session"])] + [
        (f"groups[{k!r}]", g) for k, g in data["groups"].items()
    ]
    for where, rollup in rollups:
        metrics = rollup.get("metrics") if isinstance(rollup, dict) else None
        if not isinstance(metrics, dict):
            raise ResultError(f"{name}: malformed result file: {where} has no metrics")
        for metric, block in metrics.items():
            try:
                LatencyHistogram.decode(block["hdr"])
                int(block["sum"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ResultError(
                    f"{name}: malformed result file: {where}.metrics.{metric}: {exc}"
                ) from None


# ---- comparing two runs ----------------------------------------------------------------------

COMPARED_METRICS: Final = ("ttft", "tpot", "itl", "e2e")
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


def _values(block: Mapping[str, Any]) -> list[float]:
    """Values regenerated from a block's histogram: each bucket's value, count times. Ranks
    survive bucketing (to 0.1%), which is all a rank test needs."""
    out: list[float] = []
    for value, count in LatencyHistogram.decode(block["hdr"]).buckets():
        out.extend([value] * count)
    return out


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
    a, b = _values(head), _values(base)
    if a and b:
        p_slower = stats.mann_whitney_u(a, b, alternative="greater").p_value
        p_faster = stats.mann_whitney_u(a, b, alternative="less").p_value
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
