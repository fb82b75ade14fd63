"""Verdicts: a test's expectations held against its pool of values.

Owns the DESIGN rules of what each kind of budget is judged on (per-call metrics over the kept
successful calls and the values recorded by hand, `itl` over every gap, `calls` one value per
sample, the aggregates `cache_read_ratio`, `error_rate` and `retries` over calls, `good(...)` as
the share of calls meeting every condition), the `Judgement` it returns (holding its parsed
`Expectation`, so nothing downstream parses a budget string again), the inconclusive policy and
the flagged-calls policy (keep, exclude or fail on calls whose timing the client distorted:
consumer-bound or client-saturated), and the per-look confidence of sequential sampling. The
values come from `pools.Pool`, built once per test. May import `budgets`, `stats`, `pools`,
`calls`, `metrics`, `catalogue`, `policies`; never pytest.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_latency import stats
from pytest_latency.budgets import BudgetError, Expectation, parse_expectation
from pytest_latency.catalogue import METRICS, Scope
from pytest_latency.metrics import SATURATED_LAG_MS, CallMetrics
from pytest_latency.policies import (
    DEFAULT_FLAGGED,
    DEFAULT_POLICY,
    FLAGGED_POLICIES,
    POLICIES,
    effective_policy,
)
from pytest_latency.pools import Pool

CONFIDENCE = 0.95


def confidence_for_looks(looks: int, confidence: float = CONFIDENCE) -> float:
    """The per-look confidence when a test is judged up to `looks` times (sequential sampling):
    a Bonferroni split of the error rate, so that the chance of a confident wrong verdict over
    all looks stays within 1 − `confidence`. Without it, five looks at 95% are wrong up to ~5× as
    often (measured: docs/verdicts.md)."""
    return 1 - (1 - confidence) / max(1, looks)


def worst_status(statuses: Iterable[str]) -> str | None:
    """One word for a test from its budgets' statuses: "fail" if any failed the gate,
    "inconclusive" if any passed without confidence, "pass", or None for no budget."""
    seen = set(statuses)
    return next((s for s in ("fail", "inconclusive", "pass") if s in seen), None)


# The expression of the judgement `fail` adds: not a budget expression, never parsed as one.
FLAGGED_EXPR = "no flagged calls"


@dataclass(frozen=True, slots=True)
class Judgement:
    """One expectation judged. `expectation` is the parsed budget (None only for the
    flagged-calls judgement, whose `expr` is FLAGGED_EXPR)."""

    expr: str
    verdict: str  # the statistics' word: "pass" | "fail" | "inconclusive"
    passed: bool  # what the gate does with it, after the inconclusive policy
    estimate: float | None  # in the metric's base unit (µs for time, 0..1 for ratios)
    interval: tuple[float, float] | None
    n: int
    message: str
    expectation: Expectation | None = None

    @property
    def status(self) -> str:
        """How a reader counts it: "fail" when the gate failed it, whatever the statistics
        said; "inconclusive" when the gate let it through without a confident interval;
        otherwise "pass"."""
        if not self.passed:
            return "fail"
        return "inconclusive" if self.verdict == "inconclusive" else "pass"

    def to_dict(self) -> dict[str, Any]:
        return {
            "expr": self.expr,
            "verdict": self.verdict,
            "passed": self.passed,
            "estimate": self.estimate,
            "interval": list(self.interval) if self.interval else None,
            "n": self.n,
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Judgement:
        interval = data.get("interval")
        expr = str(data["expr"])
        return cls(
            expr=expr,
            verdict=data["verdict"],
            passed=bool(data.get("passed", data["verdict"] == "pass")),
            estimate=data.get("estimate"),
            interval=(float(interval[0]), float(interval[1])) if interval else None,
            n=int(data["n"]),
            message=data["message"],
            expectation=_parsed(expr),
        )


@functools.lru_cache(maxsize=4096)
def _parsed(expr: str) -> Expectation | None:
    """A judgement's expression parsed again where it arrives as data (on the controller, once
    per distinct budget: a budget shared by many tests is parsed once)."""
    if expr == FLAGGED_EXPR:
        return None
    try:
        return parse_expectation(expr, source="test report")
    except BudgetError:
        return None


def judge(
    expectations: Iterable[Expectation],
    pool: Pool,
    *,
    policy: str = DEFAULT_POLICY,
    confidence: float = CONFIDENCE,
    flagged: str = DEFAULT_FLAGGED,
) -> list[Judgement]:
    """Judge expectations over a pool: one test's, or several tests' pooled (session and group
    budgets: per-call values pool across tests, `calls` pools every test's per-sample counts).
    `flagged` is the flagged-calls policy (`FLAGGED_POLICIES`)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown inconclusive policy {policy!r}; valid: {', '.join(POLICIES)}")
    if flagged not in FLAGGED_POLICIES:
        raise ValueError(
            f"unknown flagged-calls policy {flagged!r}; valid: {', '.join(FLAGGED_POLICIES)}"
        )
    expectations = list(expectations)
    judgements = [
        _apply_policy(_judge_one(e, pool, confidence, exclude=flagged == "exclude"), e, policy)
        for e in expectations
    ]
    if flagged == "fail" and expectations:
        failure = flagged_failure(pool.finals)
        if failure is not None:
            judgements.append(failure)
    return judgements


def flagged_failure(calls: Sequence[CallMetrics]) -> Judgement | None:
    """The failing judgement `--latency-flagged=fail` adds when any of `calls` is flagged: which
    flags, how many, and why their timings cannot be trusted. None when no call is flagged."""
    flagged = [c for c in calls if c.flagged]
    if not flagged:
        return None
    counts = Counter(name for c in flagged for name in c.flagged)
    reasons = []
    if counts["consumer_bound"]:
        reasons.append(
            f"{counts['consumer_bound']} consumer_bound (the test body read the stream slower "
            "than it arrived)"
        )
    if counts["client_saturated"]:
        worst = max(c.loop_lag_max_ms or 0.0 for c in flagged)
        reasons.append(
            f"{counts['client_saturated']} client_saturated (event-loop lag up to {worst:.0f} ms, "
            f"over {SATURATED_LAG_MS:g} ms, while in flight)"
        )
    if counts["cpu_starved"]:
        reasons.append(
            f"{counts['cpu_starved']} cpu_starved (the process waited for a CPU: a busy machine, "
            "not the test's code)"
        )
    message = (
        f"{len(flagged)} of {len(calls)} calls flagged: {'; '.join(reasons)}; their timings "
        "measure the client or the machine, not the server (--latency-flagged=fail)"
    )
    return Judgement(FLAGGED_EXPR, "fail", False, None, None, len(calls), message)


def _good(call: CallMetrics, expectation: Expectation) -> bool:
    if call.error is not None:
        return False
    values = {
        name: float(value)
        for name in METRICS
        if METRICS[name].scope is Scope.CALL and (value := getattr(call, name, None)) is not None
    }
    return expectation.good_call(values)


def _judge_one(
    expectation: Expectation, pool: Pool, confidence: float, *, exclude: bool = False
) -> Judgement:
    in_scope = pool.subset(expectation.filters)
    # The timing pools: without the flagged calls when the policy excludes them.
    timed = pool.subset(expectation.filters, unflagged=exclude)
    excluded = len(in_scope.finals) - len(timed.finals)
    if expectation.is_goodput:  # good(...): the fraction of calls meeting every condition
        good = sum(_good(c, expectation) for c in timed.finals)
        if not timed.finals and excluded:
            return _no_data(expectation, excluded)
        return _judge_proportion(expectation, good, len(timed.finals), confidence)
    if expectation.metric == "error_rate":
        return _judge_proportion(expectation, in_scope.errors, len(in_scope.finals), confidence)
    if expectation.metric == "retries":
        return _judge_exact(expectation, float(in_scope.retries), len(in_scope.calls))
    if expectation.metric == "cache_read_ratio":
        ratio = in_scope.cache_ratio()
        if ratio is None or ratio.value is None:
            return _judgement(
                expectation,
                "fail",
                None,
                None,
                0,
                f"{expectation.text}: absent — no call reported prompt-cache usage fields "
                "(self-hosted servers need e.g. vLLM --enable-prompt-tokens-details, "
                "SGLang --enable-cache-report)",
            )
        return _judge_exact(expectation, ratio.value, ratio.calls)
    if METRICS[expectation.metric].scope is Scope.SAMPLE:
        # Values recorded by hand join the pool, as they do for per-call metrics.
        values: Sequence[float] = [float(c) for c in in_scope.calls_per_sample()] + [
            m.value for m in in_scope.manual if m.metric == expectation.metric
        ]
    else:
        values = timed.values(expectation.metric)
    if not values and excluded:
        return _no_data(expectation, excluded)
    return _judge_distribution(expectation, values, confidence)


def _judgement(
    expectation: Expectation,
    verdict: str,
    estimate: float | None,
    interval: tuple[float, float] | None,
    n: int,
    message: str,
) -> Judgement:
    return Judgement(
        expectation.text,
        verdict,
        verdict == "pass",
        estimate,
        interval,
        n,
        message,
        expectation,
    )


def _judge_exact(expectation: Expectation, value: float, n: int) -> Judgement:
    verdict = "pass" if expectation.holds(value) else "fail"
    return _judgement(
        expectation, verdict, value, None, n, _message(expectation, value, None, n, verdict)
    )


def _judge_proportion(expectation: Expectation, hits: int, n: int, confidence: float) -> Judgement:
    if n == 0:
        return _no_data(expectation)
    return _judged(expectation, stats.proportion_estimate(hits, n, confidence))


def _judge_distribution(
    expectation: Expectation, values: Sequence[float], confidence: float
) -> Judgement:
    if not values:
        return _no_data(expectation)
    assert expectation.stat is not None  # distribution metrics always carry a stat
    return _judged(expectation, stats.estimate_stat(values, expectation.stat, confidence))


def _judged(expectation: Expectation, est: stats.Estimate) -> Judgement:
    exact = est.low == est.high == est.value
    interval = None if exact else est.interval
    verdict = stats.verdict(expectation.op, expectation.threshold, interval, est.value)
    message = _message(expectation, est.value, interval, est.n, verdict)
    return _judgement(expectation, verdict, est.value, interval, est.n, message)


def _apply_policy(judgement: Judgement, expectation: Expectation, policy: str) -> Judgement:
    if judgement.verdict != "inconclusive":
        return judgement
    policy = effective_policy(policy, sampled_sequentially=False)
    if policy == "estimate":
        assert judgement.estimate is not None
        passed = expectation.holds(judgement.estimate)
    else:
        passed = policy == "pass"
    note = f" [inconclusive; policy {policy!r}: {'pass' if passed else 'fail'}]"
    return Judgement(
        judgement.expr,
        judgement.verdict,
        passed,
        judgement.estimate,
        judgement.interval,
        judgement.n,
        judgement.message + note,
        expectation,
    )


def _no_data(expectation: Expectation, excluded: int = 0) -> Judgement:
    why = "failed calls and non-streaming calls have no token timings"
    if excluded:
        why = f"{excluded} flagged call(s) excluded by --latency-flagged=exclude; " + why
    return _judgement(
        expectation,
        "fail",
        None,
        None,
        0,
        f"{expectation.text}: no values — no captured call produced {expectation.metric!r} ({why})",
    )


def _message(
    expectation: Expectation,
    estimate: float,
    interval: tuple[float, float] | None,
    n: int,
    verdict: str,
) -> str:
    text = expectation.describe(estimate, n=n, interval=interval)
    if verdict == "inconclusive":
        text += "; not confident at this n"
    return text


__all__ = [
    "DEFAULT_FLAGGED",
    "FLAGGED_EXPR",
    "FLAGGED_POLICIES",
    "Judgement",
    "confidence_for_looks",
    "flagged_failure",
    "judge",
    "worst_status",
]
