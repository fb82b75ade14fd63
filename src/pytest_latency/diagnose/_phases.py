"""Prefill-bound or decode-bound: where a call's time goes, and the lever that follows.

Owns the split of e2e at the first token (`PhaseSplit`: the median share of e2e spent before it, and
which side of the thresholds it leans to; `PhaseColumns`, what it reads from the calls), the least
squares fit of ttft on uncached prompt tokens (the cost of prefill per 1k tokens, or why it cannot
be fitted), the decode cost (median tpot) and the `prefill_bound` / `decode_bound` findings built on
them. They read each final attempt's own fields (`attempt_ttft`, `attempt_e2e`): what the server
did, which an SDK's back-off before that attempt is no part of. Imports only the stdlib,
`pytest_latency.stats`, `pytest_latency.metrics` and its sibling `_finding`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_latency import stats
from pytest_latency.diagnose._finding import (
    DECODE_BOUND,
    DEFAULTS,
    PREFILL_BOUND,
    Finding,
    Thresholds,
    ms,
    percent,
    too_few,
)
from pytest_latency.metrics import CallMetrics


@dataclass(frozen=True, slots=True)
class PrefillFit:
    """ttft ≈ intercept + slope · uncached_tokens over `n` calls (µs, µs per token).

    `slope` in µs per token is numerically the cost in ms per 1k tokens. None when the uncached
    sizes span too narrow a range to separate the per-token cost from the fixed one (`note`).
    """

    n: int
    range_tokens: int
    intercept: float | None
    slope: float | None
    r2: float | None
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "range_tokens": self.range_tokens,
            "intercept_us": self.intercept,
            "ms_per_1k_uncached_tokens": self.slope,
            "r2": self.r2,
            "note": self.note,
        }


def uncached_tokens(call: CallMetrics) -> int | None:
    """Prompt tokens the server had to prefill: input minus cache reads (all of input when the
    server reported no cache fields)."""
    if call.input_tokens is None:
        return None
    return max(call.input_tokens - (call.cache_read_tokens or 0), 0)


def fit_prefill(calls: Sequence[CallMetrics], thresholds: Thresholds = DEFAULTS) -> PrefillFit:
    points = [
        (float(u), c.ttft)
        for c in calls
        if c.ttft is not None and (u := uncached_tokens(c)) is not None
    ]
    return _fit(points, thresholds)


def _fit(points: Sequence[tuple[float, float]], thresholds: Thresholds) -> PrefillFit:
    n = len(points)
    if n < 3:
        return PrefillFit(n, 0, None, None, None, f"{n} calls with usage: too few to fit")
    xs = [x for x, _ in points]
    spread = int(max(xs) - min(xs))
    needed = max(thresholds.fit_min_range_tokens, thresholds.fit_min_range_fraction * max(xs))
    if spread < needed:
        return PrefillFit(
            n,
            spread,
            None,
            None,
            None,
            f"uncached prompt sizes span {spread} tokens (needs {needed:.0f}): vary the prompt "
            "length to fit the cost per token",
        )
    mean_x = sum(xs) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    syy = sum((y - mean_y) ** 2 for _, y in points)
    slope = sxy / sxx
    if slope <= 0:
        # TTFT that does not grow with the prompt has no prefill cost to quote: something else
        # (queueing, a cache the usage did not report) sets it.
        return PrefillFit(
            n,
            spread,
            None,
            None,
            None,
            f"ttft does not grow with the uncached prompt (slope {slope:.2g} µs per token over "
            f"{n} calls): the first token waits on something else",
        )
    intercept = mean_y - slope * mean_x
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 1.0
    return PrefillFit(n, spread, intercept, slope, r2, "")


def _median(values: Sequence[float]) -> float | None:
    # SortedValues checks finiteness with one C-speed sum; a group's columns hold every call.
    return stats.percentile(stats.SortedValues.of(values), 50) if values else None


@dataclass(slots=True)
class PhaseColumns:
    """What a phase split reads from the successful streamed calls, column by column: each
    call's share of e2e before its first token, its ttft, e2e, uncached prompt tokens, output
    tokens and tpot, and its (uncached tokens, ttft) point for the prefill fit. Built from calls
    once (`of`), added up across sets of calls (`extend`): a group's split is the split of its
    parts' columns, so a run's groups need not walk every call again."""

    shares: list[float]
    ttfts: list[float]
    e2es: list[float]
    uncached: list[float]
    outputs: list[float]
    tpots: list[float]
    points: list[tuple[float, float]]

    @classmethod
    def empty(cls) -> PhaseColumns:
        return cls([], [], [], [], [], [], [])

    @classmethod
    def of(cls, calls: Iterable[CallMetrics]) -> PhaseColumns:
        columns = cls.empty()
        columns.add(calls)
        return columns

    def add(self, calls: Iterable[CallMetrics]) -> None:
        shares, ttfts, e2es = self.shares, self.ttfts, self.e2es
        uncached, outputs, tpots, points = self.uncached, self.outputs, self.tpots, self.points
        for c in calls:
            ttft, e2e = c.ttft, c.e2e
            if c.error is not None or ttft is None or e2e is None or e2e <= 0:
                continue
            shares.append(ttft / e2e)
            ttfts.append(ttft)
            e2es.append(e2e)
            if c.input_tokens is not None:
                tokens = float(max(c.input_tokens - (c.cache_read_tokens or 0), 0))
                uncached.append(tokens)
                points.append((tokens, ttft))
            if c.output_tokens is not None:
                outputs.append(float(c.output_tokens))
            if c.tpot is not None:
                tpots.append(c.tpot)

    def extend(self, other: PhaseColumns) -> None:
        self.shares.extend(other.shares)
        self.ttfts.extend(other.ttfts)
        self.e2es.extend(other.e2es)
        self.uncached.extend(other.uncached)
        self.outputs.extend(other.outputs)
        self.tpots.extend(other.tpots)
        self.points.extend(other.points)

    def sort(self) -> None:
        """Sort each median column in place (the split is the same; columns sorted first make
        a group's concatenation of them cheap to sort again). The points keep their order."""
        for column in (self.shares, self.ttfts, self.e2es, self.uncached, self.outputs, self.tpots):
            column.sort()


@dataclass(frozen=True, slots=True)
class PhaseSplit:
    """Where the streamed calls' time goes: `share` is the median over calls of the share of e2e
    before the first token (queueing, network, prefill); `leaning` says which side the
    thresholds put it on ("prefill", "decode" or "balanced"). The one definition the findings,
    the result file and the report all use."""

    n: int
    share: float
    leaning: str
    median_ttft_us: float | None
    median_e2e_us: float | None
    median_uncached_tokens: float | None
    median_output_tokens: float | None
    decode_us_per_token: float | None
    fit: PrefillFit

    def evidence(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "share_before_first_token": self.share,
            "median_ttft_us": self.median_ttft_us,
            "median_e2e_us": self.median_e2e_us,
            "median_uncached_input_tokens": self.median_uncached_tokens,
            "median_output_tokens": self.median_output_tokens,
            "decode_us_per_token": self.decode_us_per_token,
            "prefill_fit": self.fit.to_dict(),
        }


def leaning(share: float, thresholds: Thresholds = DEFAULTS) -> str:
    """Which side of the thresholds a share of e2e before the first token puts a test on."""
    if share >= thresholds.prefill_share:
        return "prefill"
    if 1 - share >= thresholds.decode_share:
        return "decode"
    return "balanced"


def phase_split(
    calls: Sequence[CallMetrics] | PhaseColumns, thresholds: Thresholds = DEFAULTS
) -> PhaseSplit | None:
    """The split of the successful streamed calls among `calls` (or of the columns already
    taken from them); None when there are none (a non-streamed call has no first token to
    split at)."""
    columns = calls if isinstance(calls, PhaseColumns) else PhaseColumns.of(calls)
    if not columns.shares:
        return None
    share = _median(columns.shares)
    assert share is not None  # the shares are not empty
    return PhaseSplit(
        n=len(columns.shares),
        share=share,
        leaning=leaning(share, thresholds),
        median_ttft_us=_median(columns.ttfts),
        median_e2e_us=_median(columns.e2es),
        median_uncached_tokens=_median(columns.uncached),
        median_output_tokens=_median(columns.outputs),
        decode_us_per_token=_median(columns.tpots),
        fit=_fit(columns.points, thresholds),
    )


def phase_findings(
    calls: Sequence[CallMetrics] | PhaseColumns, thresholds: Thresholds = DEFAULTS
) -> list[Finding]:
    """prefill_bound / decode_bound over successful calls (a test's, or a group's pooled)."""
    split = phase_split(calls, thresholds)
    if split is None:
        return []
    if split.n < thresholds.min_calls:
        return [too_few("prefill/decode split", split.n, thresholds.min_calls)]
    share, fit, evidence = split.share, split.fit, split.evidence()
    median_uncached = split.median_uncached_tokens
    median_output = split.median_output_tokens
    decode_us = split.decode_us_per_token
    found: list[Finding] = []
    if split.leaning == "prefill" and (
        median_uncached is not None and median_uncached >= thresholds.prefill_min_uncached_tokens
    ):
        if fit.slope is not None:
            cost = f"fitted {fit.slope:.2g} ms per 1k uncached tokens, n={fit.n}"
        else:
            cost = f"cost per token not fitted: {fit.note}"
        found.append(
            Finding(
                PREFILL_BOUND,
                f"prefill-bound: {percent(share)} of e2e is before the first token (median of "
                f"{split.n} streamed calls, median {median_uncached:.0f} uncached prompt "
                f"tokens); shorten or cache the prompt ({cost})",
                evidence,
            )
        )
    if split.leaning == "decode" and (
        median_output is not None and median_output >= thresholds.decode_min_output_tokens
    ):
        rate = f" at {ms(decode_us)} per token" if decode_us is not None else ""
        found.append(
            Finding(
                DECODE_BOUND,
                f"decode-bound: {percent(1 - share)} of e2e is after the first token (median of "
                f"{split.n} streamed calls, median {median_output:.0f} output tokens"
                f"{rate}); ask for fewer output tokens or use a smaller/faster model",
                evidence,
            )
        )
    return found
