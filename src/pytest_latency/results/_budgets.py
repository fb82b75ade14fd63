"""Budget entries of the result file: a judgement as readers need it, and how they count it.

Owns `budget_entry` (a `Judgement` with its parsed expectation's terms: metric, stat, op,
threshold, the values rendered in the budget's own unit, the relative excess, whether the
interval was decisive, and `status`, the judgement's own word for how to count it),
`budget_status` (that word, read back from an entry, older files included), `test_status` (a
test row's one word, a baseline regression included) and `verdict_counts`.
May import `verdicts` (the `Judgement` type) and `stats`; never pytest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_latency import stats
from pytest_latency.results._blocks import finite
from pytest_latency.results._schema import BudgetEntry

if TYPE_CHECKING:
    from pytest_latency.budgets import Expectation
    from pytest_latency.verdicts import Judgement


def budget_entry(judgement: Judgement) -> BudgetEntry:
    """A judgement as the plugin made it, plus what a reader needs to show the miss."""
    entry: dict[str, Any] = {
        "expr": judgement.expr,
        "verdict": judgement.verdict,
        # The gate's decision after the inconclusive policy.
        "passed": judgement.passed,
        "status": judgement.status,
        "estimate": finite(judgement.estimate),
        "interval": None,
        "n": judgement.n,
        "message": judgement.message,
    }
    if judgement.interval:
        entry["interval"] = [finite(judgement.interval[0]), finite(judgement.interval[1])]
    if judgement.expectation is not None:
        entry.update(_budget_terms(judgement.expectation, judgement))
    return entry  # type: ignore[return-value]


def session_budget_entry(
    judgement: Judgement, policy: str, blocks: Mapping[str, Mapping[str, Any]]
) -> BudgetEntry:
    """A `[session]` budget's entry, with the `evidence` it was judged on and the inconclusive
    `policy` applied, so `merge` can add several shards' evidence and judge the budget again.
    A percentile over every call in the session (no filters, nothing excluded, no values
    recorded by hand: the same count) shares the session block's histogram instead of
    recording ~10⁶ values again (0.5 s at the bench's scale)."""
    entry: dict[str, Any] = dict(budget_entry(judgement))
    evidence = judgement.evidence
    expectation = judgement.expectation
    if evidence is None or expectation is None:
        return entry  # type: ignore[return-value]
    from pytest_latency.evidence import QUANTILE

    block = blocks.get(expectation.metric)
    if (
        block is not None
        and evidence.kind == QUANTILE
        and not expectation.filters
        and not evidence.excluded
        and block.get("count") == evidence.n
    ):
        data = {"kind": QUANTILE, "n": evidence.n, "hdr": block["hdr"]}
    else:
        data = evidence.to_dict()
    entry["evidence"] = {**data, "policy": policy}
    return entry  # type: ignore[return-value]


def session_label(budget: Mapping[str, Any]) -> str:
    """Where a `[session]` budget's row says it comes from: "(session)", or, kept per shard
    after a merge that could not judge it again, "(session, shard N)" (1-based)."""
    shard = budget.get("shard")
    return "(session)" if shard is None else f"(session, shard {int(shard) + 1})"


def _budget_terms(expectation: Expectation, judgement: Judgement) -> dict[str, Any]:
    estimate, interval = judgement.estimate, judgement.interval
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
    terms["confident"] = decided != "inconclusive" and judgement.verdict != "inconclusive"
    return terms


def budget_status(budget: Mapping[str, Any]) -> str:
    """How a reader should count a budget entry: its `status` (the judgement's own word); in a
    file written before entries carried it, "fail" when the gate failed it, "inconclusive" when
    the gate let it through without a confident interval, otherwise "pass"."""
    status = budget.get("status")
    if isinstance(status, str):
        return status
    verdict = budget.get("verdict")
    if not budget.get("passed", verdict == "pass"):
        return "fail"
    if verdict == "inconclusive" or not budget.get("confident", True):
        return "inconclusive"
    return "pass"


def test_status(test: Mapping[str, Any]) -> str | None:
    """A test entry's one word (`verdicts.worst_status` of its budgets, "regressed" when the
    baseline comparison named it in `regressions`); None without either. The pytest outcome
    stays as it was: the comparison runs after the last test."""
    from pytest_latency.verdicts import worst_status

    return worst_status(
        (budget_status(b) for b in test.get("budgets", [])),
        regressed=bool(test.get("regressions")),
    )


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
