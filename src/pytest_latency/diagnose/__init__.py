"""Diagnosis and what-ifs: which disease a test's latency has, which lever, what its tail becomes.

Owns the findings (DESIGN.md's stable kinds: prefill_bound, decode_bound, unstable_prefix,
below_cache_minimum, cache_fields_absent, serial_independent_calls, consumer_bound,
client_saturated, too_few_samples) and the what-ifs (fan-out to K parallel calls, hedging) computed
from the per-test data a test report carries (`Recording.to_data()`), and their short terminal
rendering. Pure functions, no state. May import the stdlib, `stats`, `budgets`, `metrics`,
`recording` and `aggregate` (whose scope rules it reuses); never pytest. See docs/diagnosis.md.

Private modules: `_finding` (the value, kinds, thresholds), `_phases` (prefill/decode), `_cache`
(prompt-cache health), `_serial` (serial-but-independent calls, step counts), `_whatif` (fan-out
and hedging on the smoothed empirical distribution).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pytest_latency import stats
from pytest_latency.aggregate import kept_calls, per_call_values
from pytest_latency.budgets import BudgetError, parse_expectation
from pytest_latency.diagnose._cache import cache_findings, first_divergence
from pytest_latency.diagnose._finding import (
    BELOW_CACHE_MINIMUM,
    CACHE_FIELDS_ABSENT,
    CACHE_MIN_TOKENS,
    CLIENT_SATURATED,
    CONSUMER_BOUND,
    DECODE_BOUND,
    DEFAULTS,
    KINDS,
    PREFILL_BOUND,
    SERIAL_INDEPENDENT_CALLS,
    TOO_FEW_SAMPLES,
    UNSTABLE_PREFIX,
    Finding,
    Thresholds,
    ms,
)
from pytest_latency.diagnose._phases import PrefillFit, fit_prefill, phase_findings
from pytest_latency.diagnose._serial import SampleSchedule, schedule, serial_findings, step_counts
from pytest_latency.diagnose._whatif import (
    FAN_OUT_KS,
    HEDGE_PERCENTILES,
    FanOutRow,
    Hedge,
    SmoothCdf,
    fan_out,
    hedge,
    hedged_quantile,
)
from pytest_latency.metrics import SATURATED_LAG_MS, CallMetrics

__all__ = [
    "BELOW_CACHE_MINIMUM",
    "CACHE_FIELDS_ABSENT",
    "CACHE_MIN_TOKENS",
    "CLIENT_SATURATED",
    "CONSUMER_BOUND",
    "DECODE_BOUND",
    "FAN_OUT_KS",
    "HEDGE_PERCENTILES",
    "KINDS",
    "PREFILL_BOUND",
    "SERIAL_INDEPENDENT_CALLS",
    "TOO_FEW_SAMPLES",
    "UNSTABLE_PREFIX",
    "FanOutRow",
    "Finding",
    "Hedge",
    "PrefillFit",
    "SampleSchedule",
    "SmoothCdf",
    "Thresholds",
    "diagnose_calls",
    "diagnose_test",
    "fan_out",
    "findings_for_group",
    "findings_for_test",
    "first_divergence",
    "fit_prefill",
    "hedge",
    "hedged_quantile",
    "schedule",
    "step_counts",
    "summary_lines",
    "what_if_lines",
    "what_ifs",
    "what_ifs_for_test",
]

# What-ifs are computed for these per-call metrics: the whole answer, and the first token (the
# moment a streaming UI stops looking frozen).
WHAT_IF_METRICS = ("e2e", "ttft")


def diagnose_calls(
    calls: Sequence[CallMetrics], thresholds: Thresholds = DEFAULTS
) -> list[Finding]:
    """Findings that need only calls (no samples): prefill/decode, cache health, consumer-bound.
    Use it for a group's pooled calls; `diagnose_test` adds the per-sample and budget checks."""
    found = phase_findings(calls, thresholds)
    found.extend(cache_findings(calls, thresholds))
    bound = [c for c in calls if c.consumer_bound]
    if bound:
        chunks = sum(c.consumer_bound_chunks for c in bound)
        found.append(
            Finding(
                CONSUMER_BOUND,
                f"{len(bound)} of {len(calls)} calls were consumer-bound ({chunks} chunks found "
                "already buffered when the test asked for them): their token timings measure the "
                "test body's pace, not the server's; do less work per chunk while streaming",
                {"calls": len(bound), "of": len(calls), "chunks": chunks},
            )
        )
    saturated = [c for c in calls if c.client_saturated]
    if saturated:
        worst = max(c.loop_lag_max_ms or 0.0 for c in saturated)
        found.append(
            Finding(
                CLIENT_SATURATED,
                f"{len(saturated)} of {len(calls)} calls ran while the test's event loop lagged up "
                f"to {worst:.0f} ms (over {SATURATED_LAG_MS:.0f} ms): their timings measure the "
                "client, not the server; spread concurrent streams over pytest-xdist workers or "
                "move CPU work out of the streaming loop",
                {"calls": len(saturated), "of": len(calls), "loop_lag_max_ms": round(worst, 1)},
            )
        )
    return found


def _budget_findings(data: Mapping[str, Any]) -> list[Finding]:
    """too_few_samples for percentile budgets judged on fewer values than their bound needs."""
    found = []
    for judgement in data.get("budgets", []):
        expr, n = str(judgement.get("expr", "")), int(judgement.get("n", 0))
        try:
            expectation = parse_expectation(expr, source="diagnose")
        except BudgetError:
            continue
        p = expectation.percentile
        if p is None or not 0 < p < 100 or n == 0:
            continue
        # `<` budgets pass on the upper bound, `>` budgets on the lower one.
        bound: Literal["upper", "lower"] = "upper" if expectation.op.startswith("<") else "lower"
        needed = stats.min_samples_for(p, bound=bound)
        if n < needed:
            found.append(
                Finding(
                    TOO_FEW_SAMPLES,
                    f"{expr} was judged on {n} values; its {bound} confidence bound needs at "
                    f"least {needed} (95%), so the verdict rests on the point estimate alone: "
                    f"raise samples to {needed} or budget a lower percentile",
                    {"check": "budget", "expr": expr, "n": n, "needed": needed, "bound": bound},
                )
            )
    return found


def diagnose_test(data: Mapping[str, Any], thresholds: Thresholds = DEFAULTS) -> list[Finding]:
    """Every finding for one test's data (`Recording.to_data()`, with `budgets` if judged)."""
    calls = kept_calls(dict(data))
    finals = [c.final for c in calls]
    found = diagnose_calls(finals, thresholds)
    found.extend(serial_findings(calls, int(data.get("samples", 0)), thresholds))
    found.extend(_budget_findings(data))
    return found


def findings_for_test(
    data: Mapping[str, Any], thresholds: Thresholds = DEFAULTS
) -> list[dict[str, Any]]:
    """`diagnose_test` as plain data, for `data["findings"]` and the result file."""
    return [f.to_dict() for f in diagnose_test(data, thresholds)]


def findings_for_group(
    name: str, tests: Iterable[Mapping[str, Any]], thresholds: Thresholds = DEFAULTS
) -> list[dict[str, Any]]:
    """Findings over a group's tests pooled (calls only; per-sample checks stay per test)."""
    finals = [c.final for data in tests for c in kept_calls(dict(data))]
    found = diagnose_calls(finals, thresholds)
    return [Finding(f.kind, f.message, f.evidence, scope=name).to_dict() for f in found]


def what_ifs(calls: Sequence[CallMetrics], thresholds: Thresholds = DEFAULTS) -> dict[str, Any]:
    """Fan-out and hedging for each of WHAT_IF_METRICS over successful calls (µs)."""
    ok = [c for c in calls if c.error is None]
    out: dict[str, Any] = {}
    for metric in WHAT_IF_METRICS:
        values = per_call_values(metric, ok)
        if len(values) < thresholds.min_calls:
            out[metric] = {"n": len(values), "too_few": True, "needed": thresholds.min_calls}
            continue
        out[metric] = {
            "n": len(values),
            "fan_out": [r.to_dict() for r in fan_out(values)],
            "hedge": [hedge(values, p).to_dict() for p in HEDGE_PERCENTILES],
        }
    return out


def what_ifs_for_test(data: Mapping[str, Any], thresholds: Thresholds = DEFAULTS) -> dict[str, Any]:
    """The what-ifs of one test, plus its calls-per-sample distribution."""
    calls = kept_calls(dict(data))
    out = what_ifs([c.final for c in calls], thresholds)
    out["calls_per_sample"] = step_counts(calls, int(data.get("samples", 0)))
    return out


def summary_lines(findings: Iterable[Finding | Mapping[str, Any]]) -> list[str]:
    """One line per finding for the terminal summary: `kind: message`."""
    lines = []
    for f in findings:
        finding = f if isinstance(f, Finding) else Finding.from_dict(f)
        scope = f"[{finding.scope}] " if finding.scope else ""
        lines.append(f"{scope}{finding.kind}: {finding.message}")
    return lines


def what_if_lines(what: Mapping[str, Any]) -> list[str]:
    """A two-line-per-metric terminal rendering of `what_ifs` (p99 under fan-out, hedging)."""
    lines = []
    for metric in WHAT_IF_METRICS:
        entry = what.get(metric)
        if not entry or entry.get("too_few"):
            continue
        rows = entry["fan_out"]
        fan = " · ".join(f"K={r['k']} {ms(r['p99'])}{'' if r['supported'] else '?'}" for r in rows)
        lines.append(f"{metric} p99 of the slowest of K parallel calls: {fan}")
        for h in entry["hedge"]:
            lines.append(
                f"{metric} hedged at p{h['delay_percentile']:g} ({ms(h['delay'])}): "
                f"p99 {ms(h['baseline_p99'])} → {ms(h['p99'])}, "
                f"p95 {ms(h['baseline_p95'])} → {ms(h['p95'])}, "
                f"+{100 * h['extra_load']:.0f}% requests"
            )
    return lines
