"""Gate policies: what a verdict that stays inconclusive does, and what budgets do with calls
whose timing the client distorted.

Owns the policy names (public API: they are option values) and the `auto` rule. A leaf: stdlib
only, imports nothing from the package, so the plugin can offer the options without importing
the statistics that apply them. See docs/budgets.md.
"""

from __future__ import annotations

# What an inconclusive verdict (the interval straddles the budget) does to the test, after any
# extra samples up to max_samples were drawn. See docs/budgets.md, "Inconclusive verdicts".
POLICIES = ("auto", "estimate", "pass", "fail")
DEFAULT_POLICY = "auto"

# What budgets do with flagged calls (`catalogue.DISTORTING_FLAGS`: consumer_bound,
# client_saturated, capped, cpu_starved, gc_paused; their timings do not measure the server's
# response). `keep` judges them like any call; `exclude` leaves them out of the timing pools
# (per-call metrics, itl, good(...)) but not out of the counts (error_rate, retries, calls,
# cache_read_ratio) nor the reports; `fail` adds a failing judgement to a budgeted test (or the
# session) with flagged kept calls. See docs/budgets.md, "Flagged calls".
FLAGGED_POLICIES = ("keep", "exclude", "fail")
DEFAULT_FLAGGED = "keep"


def effective_policy(policy: str, *, sampled_sequentially: bool) -> str:
    """`auto` resolves to `pass` when sequential sampling had its chance (max_samples above
    samples: what stays inconclusive then sits within the interval's width of the budget, and
    failing it would flake) and to `estimate` when the sample size was fixed (a small n must
    still gate). Measured in docs/verdicts.md."""
    if policy != "auto":
        return policy
    return "pass" if sampled_sequentially else "estimate"
