"""Diagnosis and what-ifs: which disease a test's latency has, which lever, what its tail becomes.

Owns the findings (DESIGN.md's stable kinds: prefill_bound, decode_bound, unstable_prefix,
below_cache_minimum, cache_fields_absent, serial_independent_calls, consumer_bound,
client_saturated, too_few_samples; and cpu_starved and gc_paused, issue #14; unpriced_model, #18;
schedule_slipped, #17),
their titles and order, the thresholds every check reads, the derived numbers they rest on (the
prefill/decode split and its leaning, the prefill cost fit, how far a sample's calls overlap), the
what-ifs (fan-out to K parallel calls, hedging) and their short terminal rendering. Everything is
computed from a test's `pools.Pool` (or a group's pooled calls); the result file and the report
print these numbers and never recompute them. Pure functions, no state. May import the stdlib,
`stats`, `budgets`, `metrics`, `calls`, `pools`, `catalogue` (the price sources), `units` (the
models named with their calls), `verdicts` (the `Judgement` type, and how many values a budget
needs) and `audit` (the words for what escaped capture); never pytest. See docs/diagnosis.md.

Private modules: `_finding` (the value, kinds, titles, thresholds), `_phases` (prefill/decode),
`_cache` (prompt-cache health), `_serial` (serial-but-independent calls, overlap, step counts),
`_whatif` (fan-out and hedging on the smoothed empirical distribution), `_schedule` (samples in
flight and an open loop's schedule kept or slipped).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pytest_latency import units
from pytest_latency.catalogue import NO_PRICE
from pytest_latency.diagnose._cache import cache_findings, compares_prefix, first_divergence
from pytest_latency.diagnose._finding import (
    BELOW_CACHE_MINIMUM,
    CACHE_FIELDS_ABSENT,
    CACHE_MIN_TOKENS,
    CAPTURE_ESCAPED,
    CLIENT_SATURATED,
    CONSUMER_BOUND,
    CPU_STARVED,
    DECODE_BOUND,
    DEFAULTS,
    GC_PAUSED,
    KINDS,
    PREFILL_BOUND,
    SCHEDULE_SLIPPED,
    SERIAL_INDEPENDENT_CALLS,
    TOO_FEW_SAMPLES,
    UNPRICED_MODEL,
    UNSTABLE_PREFIX,
    Finding,
    Thresholds,
    rank,
    title,
)
from pytest_latency.diagnose._phases import (
    PhaseColumns,
    PhaseSplit,
    PrefillFit,
    fit_prefill,
    leaning,
    phase_findings,
    phase_split,
)
from pytest_latency.diagnose._schedule import LoadFigures, knee, load_figures, schedule_finding
from pytest_latency.diagnose._serial import (
    Overlap,
    SampleSchedule,
    overlap,
    overlap_of,
    schedule,
    serial_findings,
    step_counts,
)
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
from pytest_latency.metrics import STAMP_TARGET_MS, CallMetrics

if TYPE_CHECKING:
    from pytest_latency.audit import Escape
    from pytest_latency.pools import Pool
    from pytest_latency.verdicts import Judgement

__all__ = [
    "BELOW_CACHE_MINIMUM",
    "CACHE_FIELDS_ABSENT",
    "CACHE_MIN_TOKENS",
    "CAPTURE_ESCAPED",
    "CLIENT_SATURATED",
    "CONSUMER_BOUND",
    "CPU_STARVED",
    "DECODE_BOUND",
    "FAN_OUT_KS",
    "GC_PAUSED",
    "HEDGE_PERCENTILES",
    "KINDS",
    "PREFILL_BOUND",
    "SCHEDULE_SLIPPED",
    "SERIAL_INDEPENDENT_CALLS",
    "TOO_FEW_SAMPLES",
    "UNPRICED_MODEL",
    "UNSTABLE_PREFIX",
    "FanOutRow",
    "Finding",
    "Hedge",
    "LoadFigures",
    "Overlap",
    "PhaseColumns",
    "PhaseSplit",
    "PrefillFit",
    "SampleSchedule",
    "SmoothCdf",
    "Thresholds",
    "compares_prefix",
    "diagnose_calls",
    "diagnose_test",
    "escaped_finding",
    "fan_out",
    "first_divergence",
    "fit_prefill",
    "hedge",
    "hedged_quantile",
    "knee",
    "leaning",
    "load_figures",
    "overlap",
    "overlap_of",
    "phase_split",
    "rank",
    "schedule",
    "step_counts",
    "summary_lines",
    "test_figures",
    "title",
    "what_ifs",
]

# What-ifs are computed for these per-call metrics: the whole answer, and the first token (the
# moment a streaming UI stops looking frozen).
WHAT_IF_METRICS = ("e2e", "ttft")


def diagnose_calls(
    calls: Sequence[CallMetrics],
    thresholds: Thresholds = DEFAULTS,
    *,
    phases: PhaseColumns | None = None,
) -> list[Finding]:
    """Findings that need only calls (no samples): prefill/decode, cache health, consumer-bound.
    Use it for a group's pooled calls; `diagnose_test` adds the per-sample and budget checks.
    `phases`: the calls' `PhaseColumns`, when the caller added them up already."""
    found = phase_findings(calls if phases is None else phases, thresholds)
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
        # One figure for the text and the data: rounded to whole ms, a call 5.0-5.5 ms late
        # read "up to 5 ms late (over 5 ms)".
        worst = round(max(c.stamps_late_ms or 0.0 for c in saturated), 1)
        found.append(
            Finding(
                CLIENT_SATURATED,
                f"{len(saturated)} of {len(calls)} calls were stamped while the test's event loop "
                f"was busy with its own work, up to {worst:g} ms late (over "
                f"{STAMP_TARGET_MS:g} ms): their timings measure the client, not the server; "
                "spread concurrent streams over pytest-xdist workers or move CPU work out of the "
                "streaming loop",
                {"calls": len(saturated), "of": len(calls), "stamps_late_ms": worst},
            )
        )
    unpriced = Counter(
        c.model or "?" for c in calls if c.error is None and c.price_source == NO_PRICE
    )
    if unpriced:
        models = dict(sorted(unpriced.items()))
        found.append(
            Finding(
                UNPRICED_MODEL,
                f"no price for {units.calls_by_model(models)}: neither genai-prices' table nor "
                "budgets.toml knows the model, so these calls' cost is absent (not 0) and a cost "
                "budget over them is inconclusive; give its price per million tokens under "
                '[prices."<model>"] in budgets.toml (input, output, cache_read, cache_write)',
                {"models": models, "calls": sum(unpriced.values())},
            )
        )
    starved = [c for c in calls if c.cpu_starved]
    if starved:
        found.append(
            Finding(
                CPU_STARVED,
                f"{len(starved)} of {len(calls)} calls were held back by a busy machine: the "
                "process waited for a CPU while they streamed (other processes, or more "
                "pytest-xdist workers than cores), so their token timings show the machine's "
                "delays, not the server's; the test's code is not the cause (run on a quieter "
                "machine, or with fewer workers)",
                {"calls": len(starved), "of": len(calls)},
            )
        )
    paused = [c for c in calls if c.gc_paused]
    if paused:
        found.append(
            Finding(
                GC_PAUSED,
                f"{len(paused)} of {len(calls)} calls were held back by garbage collection: "
                "CPython's collector stopped the process while their data waited to be read, "
                "so their token timings show the pause, not the server; the plugin freezes "
                "what exists when the first measured test starts (gc.freeze), so a pause here "
                "scanned objects made since: objects the tests keep alive, or cyclic garbage "
                "they leave behind",
                {"calls": len(paused), "of": len(calls)},
            )
        )
    return found


def _budget_findings(
    judgements: Iterable[Judgement], policy: str | None, confidence: float | None
) -> list[Finding]:
    """too_few_samples for percentile budgets judged on fewer values than a confident pass needs
    (`verdicts.values_needed`, at the confidence they were judged at), saying what became of
    each: inconclusive and what the policy did with it, or failed with confidence all the same."""
    from pytest_latency.verdicts import CONFIDENCE, pass_bound, values_needed

    level = CONFIDENCE if confidence is None else confidence
    found = []
    for judgement in judgements:
        expectation, n = judgement.expectation, judgement.n
        if expectation is None or n == 0 or judgement.verdict == "pass":
            continue
        needed = values_needed(expectation, level)
        if needed is None or n >= needed:
            continue
        bound = pass_bound(expectation)
        expr = judgement.expr
        found.append(
            Finding(
                TOO_FEW_SAMPLES,
                f"{expr} was judged on {n} values; its {bound} confidence bound needs at least "
                f"{needed} ({_percent(level)}) to pass with confidence, so "
                f"{_what_became(judgement, policy)}: raise samples to {needed} or budget a "
                f"lower percentile",
                {"check": "budget", "expr": expr, "n": n, "needed": needed, "bound": bound},
            )
        )
    return found


def _what_became(judgement: Judgement, policy: str | None) -> str:
    """What the verdict was, and what the inconclusive policy did with it, in words."""
    if judgement.verdict == "fail":
        return "it could only fail, and failed with confidence"
    done = "passed" if judgement.passed else "failed"
    if policy == "estimate":
        return f"it stayed inconclusive and was {done} on the point estimate (policy 'estimate')"
    if policy is None:
        return f"it stayed inconclusive and the inconclusive policy {done} it"
    return f"it stayed inconclusive and policy {policy!r} {done} it"


def _percent(level: float) -> str:
    return f"{level * 100:.4g}%"


def diagnose_test(
    pool: Pool,
    thresholds: Thresholds = DEFAULTS,
    *,
    judgements: Iterable[Judgement] = (),
    policy: str | None = None,
    confidence: float | None = None,
) -> list[Finding]:
    """Every finding for one test: over its pool's calls, per sample, and on its judgements
    (made under the inconclusive `policy` at `confidence`, when known)."""
    found = diagnose_calls(pool.finals, thresholds)
    found.extend(serial_findings(pool, thresholds))
    slipped = schedule_finding(load_figures(pool, thresholds), thresholds)
    if slipped is not None:
        found.append(slipped)
    found.extend(_budget_findings(judgements, policy, confidence))
    return found


def escaped_finding(escapes: Sequence[Escape]) -> Finding | None:
    """The session's finding on LLM traffic no captured client made (`audit`), if any."""
    if not escapes:
        return None
    from pytest_latency import audit

    return Finding(
        CAPTURE_ESCAPED,
        audit.summary(escapes) + ". Instrument those clients (pytest_latency.instrument) or run "
        "with --latency-capture=auto; their calls are in no figure.",
        {
            "endpoints": [e.to_dict() for e in escapes],
            "connections": sum(e.connections for e in escapes),
            "requests": sum(e.requests_seen for e in escapes),
        },
    )


def what_ifs(pool: Pool, thresholds: Thresholds = DEFAULTS) -> dict[str, Any]:
    """Fan-out and hedging for each of WHAT_IF_METRICS over the pool's values (µs: the same
    values the report's percentiles are read from, so K = 1 reproduces them), and the calls
    per sample."""
    out: dict[str, Any] = {}
    for metric in WHAT_IF_METRICS:
        values = pool.values(metric)
        if len(values) < thresholds.min_calls:
            out[metric] = {"n": len(values), "too_few": True, "needed": thresholds.min_calls}
            continue
        cdf = SmoothCdf(values)
        out[metric] = {
            "n": len(values),
            "fan_out": [r.to_dict() for r in fan_out(cdf)],
            "hedge": [hedge(cdf, p).to_dict() for p in HEDGE_PERCENTILES],
        }
    out["calls_per_sample"] = step_counts(pool)
    return out


def test_figures(pool: Pool, thresholds: Thresholds = DEFAULTS) -> dict[str, Any]:
    """A test's derived numbers as plain data, computed once where the test ran: its what-ifs,
    its time split (`prefill_share`, `leaning`, `n`), its prefill fit and how its samples'
    calls overlap, and the load its samples ran under (`load`: in flight, an open loop's
    lateness). The result file copies them; nothing recomputes them."""
    split = phase_split(pool.ok, thresholds)
    shape = overlap(pool, thresholds)
    load = load_figures(pool, thresholds)
    return {
        "what_ifs": what_ifs(pool, thresholds),
        "phase": None
        if split is None
        else {"prefill_share": split.share, "leaning": split.leaning, "n": split.n},
        "prefill_fit": (split.fit if split is not None else fit_prefill(pool.ok)).to_dict(),
        "concurrency": None if shape is None else shape.to_dict(),
        "load": None if load is None else load.to_dict(),
    }


def summary_lines(findings: Iterable[Finding]) -> list[str]:
    """One line per finding for the terminal summary: `kind: message`."""
    lines = []
    for finding in findings:
        scope = f"[{finding.scope}] " if finding.scope else ""
        lines.append(f"{scope}{finding.kind}: {finding.message}")
    return lines
