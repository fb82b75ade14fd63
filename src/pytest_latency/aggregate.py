"""Aggregation: one test's calls → metric pools → budget judgements and a summary row.

Owns the DESIGN rules of scope: per-call metrics pool every kept call of a test (warmup and
fixture-phase calls excluded), `itl` pools every gap, `calls` is one value per sample, and the
aggregates (`cache_read_ratio`, `error_rate`, `retries`) are computed over calls. It evaluates an
`Expectation` over a pool with `stats` and returns a `Judgement`. Input is the plain data a test
report carries, so the same code serves the worker (verdicts) and the controller (summaries).
May import `budgets`, `stats`, `recording`, `metrics`, `catalogue`; never pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_latency import stats
from pytest_latency.budgets import Expectation
from pytest_latency.catalogue import METRICS, Scope
from pytest_latency.metrics import CallMetrics
from pytest_latency.recording import Call

CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class Judgement:
    expr: str
    verdict: str  # "pass" | "fail" | "inconclusive"
    estimate: float | None  # in the metric's base unit (µs for time, 0..1 for ratios)
    interval: tuple[float, float] | None
    n: int
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "expr": self.expr,
            "verdict": self.verdict,
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


def judge(expectations: Iterable[Expectation], data: dict[str, Any]) -> list[Judgement]:
    calls = kept_calls(data)
    manual = [m for m in data.get("manual", []) if m[0] >= 0 and not m[1]]
    return [_judge_one(e, calls, manual, int(data.get("samples", 0))) for e in expectations]


def _judge_one(
    expectation: Expectation, calls: list[Call], manual: list[list[Any]], samples: int
) -> Judgement:
    in_scope = [c for c in calls if _matches(c.final, expectation.filters)]
    finals = [c.final for c in in_scope]
    if expectation.is_goodput:  # good(...): the fraction of calls meeting every condition
        good = sum(_good(c, expectation) for c in finals)
        return _judge_proportion(expectation, good, len(finals))
    if expectation.metric == "error_rate":
        return _judge_proportion(expectation, sum(c.failed for c in in_scope), len(in_scope))
    if expectation.metric == "retries":
        total = float(sum(c.retries for c in in_scope))
        return _judge_exact(expectation, total, len(in_scope))
    if expectation.metric == "cache_read_ratio":
        ratio = cache_read_ratio([c for c in finals if c.error is None])
        if ratio is None or ratio.value is None:
            return Judgement(
                expectation.text,
                "fail",
                None,
                None,
                0,
                f"{expectation.text}: absent — no call reported prompt-cache usage fields "
                "(self-hosted servers need e.g. vLLM --enable-prompt-tokens-details, "
                "SGLang --enable-cache-report)",
            )
        return _judge_exact(expectation, ratio.value, ratio.n)
    if METRICS[expectation.metric].scope is Scope.SAMPLE:
        values = _calls_per_sample(in_scope, samples)
    else:
        values = per_call_values(expectation.metric, [c for c in finals if c.error is None])
    values.extend(float(m[3]) for m in manual if m[2] == expectation.metric)
    return _judge_distribution(expectation, values)


def _judge_exact(expectation: Expectation, value: float, n: int) -> Judgement:
    verdict = "pass" if expectation.holds(value) else "fail"
    return Judgement(
        expectation.text, verdict, value, None, n, _message(expectation, value, None, n, verdict)
    )


def _judge_proportion(expectation: Expectation, hits: int, n: int) -> Judgement:
    if n == 0:
        return _no_data(expectation)
    est = stats.proportion_estimate(hits, n, CONFIDENCE)
    return _decided(expectation, est)


def _judge_distribution(expectation: Expectation, values: list[float]) -> Judgement:
    if not values:
        return _no_data(expectation)
    assert expectation.stat is not None  # distribution metrics always carry a stat
    return _decided(expectation, stats.estimate_stat(values, expectation.stat, CONFIDENCE))


def _decided(expectation: Expectation, est: stats.Estimate) -> Judgement:
    exact = est.low == est.high == est.value
    interval = None if exact else est.interval
    verdict = stats.verdict(expectation.op, expectation.threshold, interval, est.value)
    # Until sequential sampling lands, an inconclusive interval is decided by the point estimate
    # so that a budget always gates; the message says the verdict is not confident.
    decided = verdict
    if verdict == "inconclusive":
        decided = "pass" if expectation.holds(est.value) else "fail"
    message = _message(expectation, est.value, interval, est.n, verdict)
    return Judgement(expectation.text, decided, est.value, interval, est.n, message)


def _no_data(expectation: Expectation) -> Judgement:
    return Judgement(
        expectation.text,
        "fail",
        None,
        None,
        0,
        f"{expectation.text}: no values — no captured call produced "
        f"{expectation.metric!r} (failed calls and non-streaming calls have no token timings)",
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
        text += "; not confident at this n: more samples would decide it"
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
        if not self.judgements:
            return "-"
        verdicts = {j.verdict for j in self.judgements}
        return "fail" if "fail" in verdicts else "pass"


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


__all__ = ["Judgement", "TestSummary", "judge", "summarise"]
