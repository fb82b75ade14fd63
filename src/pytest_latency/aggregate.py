"""Aggregation: one test's calls → metric pools → budget judgements and a summary row.

Owns the DESIGN rules of scope: per-call metrics pool every kept call of a test (warmup and
fixture-phase calls excluded), `itl` pools every gap, `calls` is one value per sample, and the
aggregates (`cache_read_ratio`, `error_rate`, `retries`) are computed over calls. It evaluates an
`Expectation` over a pool with `stats` and returns a `Judgement`, and applies the flagged-calls
policy (keep, exclude or fail on calls whose timing the client distorted: consumer-bound or
client-saturated). Input is the plain data a test
report carries, so the same code serves the worker (verdicts) and the controller (summaries).
May import `budgets`, `stats`, `recording`, `metrics`, `catalogue`; never pytest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_latency import stats
from pytest_latency.budgets import Expectation
from pytest_latency.catalogue import METRICS, Scope
from pytest_latency.metrics import SATURATED_LAG_MS, CallMetrics
from pytest_latency.policies import (
    DEFAULT_FLAGGED,
    DEFAULT_POLICY,
    FLAGGED_POLICIES,
    POLICIES,
    effective_policy,
)
from pytest_latency.recording import Call

CONFIDENCE = 0.95


def confidence_for_looks(looks: int, confidence: float = CONFIDENCE) -> float:
    """The per-look confidence when a test is judged up to `looks` times (sequential sampling):
    a Bonferroni split of the error rate, so that the chance of a confident wrong verdict over
    all looks stays within 1 − `confidence`. Without it, five looks at 95% are wrong up to ~5× as
    often (measured: docs/verdicts.md)."""
    return 1 - (1 - confidence) / max(1, looks)


# The expression of the judgement `fail` adds: not a budget expression, never parsed as one.
FLAGGED_EXPR = "no flagged calls"


@dataclass(frozen=True, slots=True)
class Judgement:
    expr: str
    verdict: str  # the statistics' word: "pass" | "fail" | "inconclusive"
    passed: bool  # what the gate does with it, after the inconclusive policy
    estimate: float | None  # in the metric's base unit (µs for time, 0..1 for ratios)
    interval: tuple[float, float] | None
    n: int
    message: str

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
        return cls(
            expr=data["expr"],
            verdict=data["verdict"],
            passed=bool(data.get("passed", data["verdict"] == "pass")),
            estimate=data.get("estimate"),
            interval=(float(interval[0]), float(interval[1])) if interval else None,
            n=int(data["n"]),
            message=data["message"],
        )


def kept_calls(data: dict[str, Any]) -> list[Call]:
    """The calls budgets are judged on: those of kept (non-warmup) samples."""
    calls = (Call.from_dict(c) for c in data.get("calls", []))
    return [c for c in calls if c.sample >= 0 and not c.warmup]


def _matches(call: CallMetrics, filters: Iterable[tuple[str, str]]) -> bool:
    for key, value in filters:
        actual = {"model": call.model, "endpoint": call.endpoint, "api": call.api}.get(key)
        if actual != value:
            return False
    return True


def error_counts(calls: Iterable[Call]) -> Counter[str]:
    """What went wrong, by error kind: each call counted once, by its final attempt."""
    return Counter(call.final.error for call in calls if call.final.error is not None)


def per_call_values(metric: str, calls: Sequence[CallMetrics]) -> list[float]:
    values: list[float] = []
    for call in calls:
        if metric == "itl":
            values.extend(call.itl)
            continue
        value = getattr(call, metric, None)
        if value is not None:
            values.append(float(value))
    return values


def _calls_per_sample(calls: Sequence[Call], samples: int) -> list[float]:
    counts = [0] * samples
    for call in calls:
        if 0 <= call.sample < samples:
            counts[call.sample] += 1
    return [float(c) for c in counts]


@dataclass(frozen=True, slots=True)
class _Ratio:
    numerator: float
    denominator: float
    n: int

    @property
    def value(self) -> float | None:
        return self.numerator / self.denominator if self.denominator else None


def cache_read_ratio(calls: Sequence[CallMetrics]) -> _Ratio | None:
    """Σ cache reads / Σ input over the calls that reported cache fields; None when none did."""
    reporting = [c for c in calls if c.cache_fields_reported and c.input_tokens is not None]
    if not reporting:
        return None
    read = sum(c.cache_read_tokens or 0 for c in reporting)
    total = sum(c.input_tokens or 0 for c in reporting)
    return _Ratio(read, total, len(reporting))


def _good(call: CallMetrics, expectation: Expectation) -> bool:
    if call.error is not None:
        return False
    values = {
        name: float(value)
        for name in METRICS
        if METRICS[name].scope is Scope.CALL and (value := getattr(call, name, None)) is not None
    }
    return expectation.good_call(values)


def judge(
    expectations: Iterable[Expectation],
    data: dict[str, Any],
    *,
    policy: str = DEFAULT_POLICY,
    confidence: float = CONFIDENCE,
    flagged: str = DEFAULT_FLAGGED,
) -> list[Judgement]:
    """Judge a test's expectations over its kept samples."""
    return judge_pooled(expectations, [data], policy=policy, confidence=confidence, flagged=flagged)


def judge_pooled(
    expectations: Iterable[Expectation],
    tests: Sequence[dict[str, Any]],
    *,
    policy: str = DEFAULT_POLICY,
    confidence: float = CONFIDENCE,
    flagged: str = DEFAULT_FLAGGED,
) -> list[Judgement]:
    """Judge expectations over the kept calls of several tests pooled (session and group
    budgets): per-call values pool across tests, `calls` pools every test's per-sample counts.
    `flagged` is the flagged-calls policy (`FLAGGED_POLICIES`)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown inconclusive policy {policy!r}; valid: {', '.join(POLICIES)}")
    if flagged not in FLAGGED_POLICIES:
        raise ValueError(
            f"unknown flagged-calls policy {flagged!r}; valid: {', '.join(FLAGGED_POLICIES)}"
        )
    expectations = list(expectations)
    pool = _Pool.of(tests)
    judgements = [
        _apply_policy(_judge_one(e, pool, confidence, exclude=flagged == "exclude"), e, policy)
        for e in expectations
    ]
    if flagged == "fail" and expectations:
        failure = flagged_failure([c.final for c in pool.calls])
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
    message = (
        f"{len(flagged)} of {len(calls)} calls flagged: {'; '.join(reasons)}; their timings "
        "measure the client, not the server (--latency-flagged=fail)"
    )
    return Judgement(FLAGGED_EXPR, "fail", False, None, None, len(calls), message)


@dataclass(frozen=True, slots=True)
class _Pool:
    per_test: list[tuple[list[Call], int]]  # each test's kept calls and its sample count
    manual: list[tuple[str, float]]

    @classmethod
    def of(cls, tests: Sequence[dict[str, Any]]) -> _Pool:
        per_test = [(kept_calls(data), int(data.get("samples", 0))) for data in tests]
        manual = [
            (str(m[2]), float(m[3]))
            for data in tests
            for m in data.get("manual", [])
            if m[0] >= 0 and not m[1]
        ]
        return cls(per_test, manual)

    @property
    def calls(self) -> list[Call]:
        return [call for calls, _ in self.per_test for call in calls]

    def calls_per_sample(self, filters: Sequence[tuple[str, str]]) -> list[float]:
        return [
            value
            for calls, samples in self.per_test
            for value in _calls_per_sample(
                [c for c in calls if _matches(c.final, filters)], samples
            )
        ]


def _judge_one(
    expectation: Expectation, pool: _Pool, confidence: float, *, exclude: bool = False
) -> Judgement:
    in_scope = [c for c in pool.calls if _matches(c.final, expectation.filters)]
    finals = [c.final for c in in_scope]
    # The timing pools: without the flagged calls when the policy excludes them.
    timed = [c for c in finals if not c.flagged] if exclude else finals
    excluded = len(finals) - len(timed)
    if expectation.is_goodput:  # good(...): the fraction of calls meeting every condition
        good = sum(_good(c, expectation) for c in timed)
        if not timed and excluded:
            return _no_data(expectation, excluded)
        return _judge_proportion(expectation, good, len(timed), confidence)
    if expectation.metric == "error_rate":
        failed = sum(c.failed for c in in_scope)
        return _judge_proportion(expectation, failed, len(in_scope), confidence)
    if expectation.metric == "retries":
        total = float(sum(c.retries for c in in_scope))
        return _judge_exact(expectation, total, len(in_scope))
    if expectation.metric == "cache_read_ratio":
        ratio = cache_read_ratio([c for c in finals if c.error is None])
        if ratio is None or ratio.value is None:
            return Judgement(
                expectation.text,
                "fail",
                False,
                None,
                None,
                0,
                f"{expectation.text}: absent — no call reported prompt-cache usage fields "
                "(self-hosted servers need e.g. vLLM --enable-prompt-tokens-details, "
                "SGLang --enable-cache-report)",
            )
        return _judge_exact(expectation, ratio.value, ratio.n)
    if METRICS[expectation.metric].scope is Scope.SAMPLE:
        values = pool.calls_per_sample(expectation.filters)
    else:
        values = per_call_values(expectation.metric, [c for c in timed if c.error is None])
    values.extend(v for metric, v in pool.manual if metric == expectation.metric)
    if not values and excluded:
        return _no_data(expectation, excluded)
    return _judge_distribution(expectation, values, confidence)


def _judge_exact(expectation: Expectation, value: float, n: int) -> Judgement:
    verdict = "pass" if expectation.holds(value) else "fail"
    message = _message(expectation, value, None, n, verdict)
    return Judgement(expectation.text, verdict, verdict == "pass", value, None, n, message)


def _judge_proportion(expectation: Expectation, hits: int, n: int, confidence: float) -> Judgement:
    if n == 0:
        return _no_data(expectation)
    return _judged(expectation, stats.proportion_estimate(hits, n, confidence))


def _judge_distribution(
    expectation: Expectation, values: list[float], confidence: float
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
    return Judgement(
        expectation.text, verdict, verdict == "pass", est.value, interval, est.n, message
    )


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
    )


def _no_data(expectation: Expectation, excluded: int = 0) -> Judgement:
    why = "failed calls and non-streaming calls have no token timings"
    if excluded:
        why = f"{excluded} flagged call(s) excluded by --latency-flagged=exclude; " + why
    return Judgement(
        expectation.text,
        "fail",
        False,
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


# ---- summary rows for the terminal and the reports ---------------------------------------------


@dataclass(frozen=True, slots=True)
class TestSummary:
    nodeid: str
    outcome: str
    samples: int
    calls: int
    errors: int
    ttft_p50: float | None
    ttft_p95: float | None
    tpot_p50: float | None
    e2e_p95: float | None
    cache_read_ratio: float | None
    judgements: tuple[Judgement, ...]

    @property
    def verdict(self) -> str:
        """One word for the test: fail if any budget failed the gate, inconclusive if any was
        not confident (whatever the policy made of it), else pass."""
        if not self.judgements:
            return "-"
        if not all(j.passed for j in self.judgements):
            return "fail"
        return (
            "inconclusive" if any(j.verdict == "inconclusive" for j in self.judgements) else "pass"
        )


def summarise(data: dict[str, Any], *, outcome: str) -> TestSummary:
    calls = kept_calls(data)
    finals = [c.final for c in calls if not c.failed]

    def pct(metric: str, p: float) -> float | None:
        values = per_call_values(metric, finals)
        return stats.percentile(values, p) if values else None

    ratio = cache_read_ratio(finals)
    return TestSummary(
        nodeid=data["nodeid"],
        outcome=outcome,
        samples=int(data.get("samples", 0)),
        calls=len(calls),
        errors=sum(c.failed for c in calls),
        ttft_p50=pct("ttft", 50),
        ttft_p95=pct("ttft", 95),
        tpot_p50=pct("tpot", 50),
        e2e_p95=pct("e2e", 95),
        cache_read_ratio=ratio.value if ratio else None,
        judgements=tuple(Judgement.from_dict(j) for j in data.get("budgets", [])),
    )


__all__ = [
    "DEFAULT_FLAGGED",
    "FLAGGED_EXPR",
    "FLAGGED_POLICIES",
    "Judgement",
    "TestSummary",
    "error_counts",
    "flagged_failure",
    "judge",
    "judge_pooled",
    "summarise",
]
