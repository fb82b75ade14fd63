"""Verdicts: a test's expectations held against its pool of values.

Owns how each kind of budget is judged from what `evidence.gather` found in its scope (the DESIGN
rules of scope live there: per-call metrics over the kept successful calls and the values
recorded by hand, `itl` over every gap, `calls`, `turn` one value per sample, the aggregates
`cache_read_ratio`, `error_rate` and `retries` over calls, `good(...)` as the share of calls
meeting every condition), `judge_evidence` (the same verdict from several shards' evidence
added up), the `Judgement` it returns (holding its parsed `Expectation`, so nothing downstream
parses a budget string again, and its evidence), the inconclusive policy and the flagged-calls
policy (keep, exclude or fail on calls whose timings do not measure the server:
`catalogue.DISTORTING_FLAGS`, consumer-bound, client-saturated, capped or CPU-starved), the per-look
confidence of sequential sampling, and how many values a percentile budget needs before it can
pass with confidence (`values_needed`, `samples_needed`: read by the diagnosis and the plugin's
collection warning). The values come from `pools.Pool`, built once per test. May import
`evidence`, `budgets`, `stats`, `units` (models named with their calls), `pools`, `calls`,
`metrics`, `catalogue`, `policies`; never pytest.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_latency import stats, units
from pytest_latency.budgets import BudgetError, Expectation, parse_expectation
from pytest_latency.catalogue import DISTORTING_FLAGS, FLAGS, METRICS, Scope
from pytest_latency.evidence import (
    EXTREME,
    MEAN,
    NOTHING,
    PROPORTION,
    RATIO,
    SUM,
    Evidence,
    gather,
    merge_all,
)
from pytest_latency.metrics import CallMetrics
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


def looks_for(samples: int, max_samples: int) -> int:
    """How many times sequential sampling may judge a test: after `samples`, then after each
    doubling up to `max_samples` (20 → 40 → 80 → 160 → 200 is five looks)."""
    looks, n = 1, samples
    while n < max_samples:
        n = min(2 * n, max_samples)
        looks += 1
    return looks


def values_needed(expectation: Expectation, confidence: float = CONFIDENCE) -> int | None:
    """The fewest values on which a percentile budget can pass with `confidence`: below it the
    bound it passes on (the upper one for `<`/`<=`, the lower one for `>`/`>=`) does not exist,
    so whatever the data it can only fail or stay inconclusive. None for other budgets (a mean,
    a min or max, an aggregate: any n can decide them)."""
    p = expectation.percentile
    if p is None or not 0 < p < 100:
        return None
    return stats.min_samples_for(p, confidence, bound=pass_bound(expectation))


def pass_bound(expectation: Expectation) -> Literal["upper", "lower"]:
    """The confidence bound a budget passes on: the upper one for `<`/`<=`, else the lower."""
    return "upper" if expectation.op.startswith("<") else "lower"


def samples_needed(expectation: Expectation, samples: int, max_samples: int) -> int | None:
    """For a test sampled `samples` up to `max_samples` times, one value per sample: the
    max_samples at which its last look could pass `expectation` with confidence, when the plan's
    own cannot (None when it can, or when the budget is not a percentile). The per-look
    confidence rises with the looks, so the answer is the fixed point, not `values_needed` at
    one look's 95%: a p99 budget sampled 10 → 80 needs 299 values at 95%, 436 at the 98.75% of
    its four looks, and 492 at the 99.3% of the seven looks that sampling 10 → 492 takes."""
    need = values_needed(expectation, confidence_for_looks(looks_for(samples, max_samples)))
    if need is None or need <= max_samples:
        return None
    while True:
        more = values_needed(expectation, confidence_for_looks(looks_for(samples, need)))
        assert more is not None
        if more <= need:
            return need
        need = more


def worst_status(statuses: Iterable[str], *, regressed: bool = False) -> str | None:
    """One word for a test from its budgets' statuses: "fail" if any failed the gate,
    "regressed" if none failed but the baseline comparison found it slower (`regressed`),
    "inconclusive" if any passed without confidence, "pass", or None for no budget. Every
    summary's test row reads it (terminal, result file readers, Markdown, HTML)."""
    seen = set(statuses)
    if regressed:
        seen.add("regressed")
    return next((s for s in ("fail", "regressed", "inconclusive", "pass") if s in seen), None)


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
    # What it was judged on (`evidence.gather`); not compared, not sent between processes.
    evidence: Evidence | None = field(default=None, compare=False, repr=False)

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
    for name in DISTORTING_FLAGS:
        if not counts[name]:
            continue
        why = FLAGS[name].why
        if name == "client_saturated":  # with how bad it got
            worst = max(c.stamps_late_ms or 0.0 for c in flagged if c.client_saturated)
            why = f"stamps up to {worst:.0f} ms late: the event loop was busy with its own work "
            why += "while in flight"
        reasons.append(f"{counts[name]} {name} ({why})")
    message = (
        f"{len(flagged)} of {len(calls)} calls flagged: {'; '.join(reasons)}; their timings "
        "do not measure the server's response (--latency-flagged=fail)"
    )
    return Judgement(FLAGGED_EXPR, "fail", False, None, None, len(calls), message)


def _judge_one(
    expectation: Expectation, pool: Pool, confidence: float, *, exclude: bool = False
) -> Judgement:
    return judge_evidence(expectation, gather(expectation, pool, exclude=exclude), confidence)


def judge_evidence(
    expectation: Expectation, evidence: Evidence, confidence: float = CONFIDENCE
) -> Judgement:
    """The verdict on what `evidence.gather` found in scope (a test's pool, or several
    shards' evidence added up by `pytest-latency merge`), before the inconclusive policy. The
    judgement keeps its evidence, so a result file can carry it."""
    judged = _judged_evidence(expectation, evidence, confidence)
    return dataclasses.replace(judged, evidence=evidence)


def _judged_evidence(expectation: Expectation, ev: Evidence, confidence: float) -> Judgement:
    if ev.unknown:
        return _unknown_values(expectation, ev, confidence)
    if ev.kind == NOTHING:
        if expectation.metric == "cache_read_ratio":
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
        spec = METRICS.get(expectation.metric)
        if spec is not None and spec.scope is Scope.SAMPLE:
            return _no_samples(expectation)
        return _no_data(expectation, ev.excluded)
    if ev.kind == PROPORTION:
        return _judged(expectation, stats.proportion_estimate(ev.hits, ev.n, confidence))
    if ev.kind == SUM:
        return _judge_exact(expectation, ev.total, ev.n)
    if ev.kind == RATIO:
        return _judge_exact(expectation, ev.hits / ev.total, ev.n)
    if ev.kind == EXTREME:
        return _judged(expectation, stats.Estimate(ev.total, ev.total, ev.total, ev.n, confidence))
    if ev.kind == MEAN:
        return _judged(expectation, stats.mean_estimate_of(ev.n, ev.total, ev.squares, confidence))
    assert expectation.stat is not None  # distribution metrics always carry a stat
    return _judged(expectation, stats.estimate_stat(ev.sample(), expectation.stat, confidence))


def _unknown_values(expectation: Expectation, ev: Evidence, confidence: float) -> Judgement:
    """Some calls in scope have no value (`cost` of a model with no price, or of a call that
    reported no usage). A sum or maximum over the rest is a floor of the truth: already over an
    upper bound, it fails; otherwise the budget cannot be judged, and says why, naming the
    models without a price."""
    known = dataclasses.replace(ev, unknown=0, unknown_models=())
    judged = None if ev.kind == NOTHING else _judged_evidence(expectation, known, confidence)
    floor = ev.kind == SUM or (ev.kind == EXTREME and expectation.stat == "max")
    if judged is not None and floor and expectation.op in ("<", "<=") and not judged.passed:
        return judged
    estimate = judged.estimate if judged is not None else None
    unpriced = dict(ev.unknown_models)
    reasons = []
    if unpriced:
        reasons.append(
            f"no price for {units.calls_by_model(unpriced)}: see the unpriced_model finding, "
            'or give one in budgets.toml under [prices."<model>"]'
        )
    without_usage = ev.unknown - sum(unpriced.values())
    if without_usage:
        reasons.append(f"{without_usage} reported no usage")
    message = (
        f"{expectation.text}: inconclusive — {ev.unknown} of {ev.n + ev.unknown} calls have no "
        f"{expectation.metric} ({'; '.join(reasons)})"
    )
    return _judgement(expectation, "inconclusive", estimate, None, ev.n, message)


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
    evidence = judgement.evidence
    partial = evidence is not None and evidence.unknown > 0
    if policy == "estimate":
        # Some calls in scope have no value (no price): what the others give is no estimate of
        # the scope (a sum over them is only a floor), so, like no estimate at all, it holds
        # nothing and fails. Only `pass`, chosen, passes it.
        estimate = None if partial else judgement.estimate
        passed = estimate is not None and expectation.holds(estimate)
    else:
        passed = policy == "pass"
    why = "; the priced calls alone are no estimate" if partial and policy == "estimate" else ""
    note = f" [inconclusive; policy {policy!r}: {'pass' if passed else 'fail'}{why}]"
    return dataclasses.replace(judgement, passed=passed, message=judgement.message + note)


def judge_shards(
    expectation: Expectation,
    parts: Sequence[Evidence],
    *,
    policy: str = DEFAULT_POLICY,
    confidence: float = CONFIDENCE,
) -> Judgement:
    """One budget judged again over several shards' evidence added up (`pytest-latency
    merge`), under the inconclusive policy the shards used, as `judge` would have judged it
    over all their calls at once."""
    return _apply_policy(
        judge_evidence(expectation, merge_all(expectation, parts), confidence), expectation, policy
    )


def _no_samples(expectation: Expectation) -> Judgement:
    return _judgement(
        expectation,
        "fail",
        None,
        None,
        0,
        f"{expectation.text}: no values — no kept sample ran (warmup samples and calls made "
        "outside a sample are not budgeted)",
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
    "judge_evidence",
    "judge_shards",
    "looks_for",
    "pass_bound",
    "samples_needed",
    "values_needed",
    "worst_status",
]
