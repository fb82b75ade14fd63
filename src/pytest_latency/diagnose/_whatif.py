"""What-ifs over a measured distribution: fan-out (the slowest of K parallel calls) and hedging.

Owns the smoothed empirical distribution every what-if is computed on and the exact answers for
it: the quantiles of the maximum of K independent draws, and of min(X1, d + X2) (a duplicate sent
after a delay d). Exact means computed from the distribution function, not simulated. Imports only
the stdlib and `pytest_latency.stats`.

The distribution is the piecewise-linear CDF through the sorted values x(1..n) at levels
0, 1/(n−1), …, 1: the inverse of the plugin's percentile estimator (linear interpolation, numpy's
default), so K = 1 and "no hedge" reproduce the percentiles the report shows.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_latency import stats

FAN_OUT_KS: tuple[int, ...] = (1, 5, 10, 20, 50, 100)
HEDGE_PERCENTILES: tuple[float, ...] = (90.0, 95.0)


class SmoothCdf:
    """The piecewise-linear empirical CDF whose inverse is `stats.percentile`."""

    def __init__(self, values: Iterable[float]) -> None:
        # A pool's values come sorted already (stats.SortedValues): not sorted again.
        self.xs = (
            values
            if type(values) is stats.SortedValues
            else stats.SortedValues.of(float(v) for v in values)
        )
        if not self.xs:
            raise ValueError("no values: nothing to compute a what-if on")

    @property
    def n(self) -> int:
        return len(self.xs)

    def cdf(self, x: float) -> float:
        xs = self.xs
        if x < xs[0]:
            return 0.0
        if x >= xs[-1]:
            return 1.0
        i = bisect.bisect_right(xs, x) - 1  # xs[i] <= x < xs[i + 1]
        return (i + (x - xs[i]) / (xs[i + 1] - xs[i])) / (len(xs) - 1)

    def survival(self, x: float) -> float:
        return 1.0 - self.cdf(x)

    def quantile(self, u: float) -> float:
        return stats.percentile(self.xs, 100 * min(max(u, 0.0), 1.0))


@dataclass(frozen=True, slots=True)
class FanOutRow:
    """The slowest of `k` independent parallel calls: its p50 and p99 (µs), and the chance that
    at least one of the k is slower than the single-call p99 (1 − 0.99^k)."""

    k: int
    p50: float
    p99: float
    p_any_over_p99: float
    # The p99 row needs the single-call quantile at 0.99^(1/k); with fewer than 1/(1 − that)
    # values it rests on the largest one or two values only.
    supported: bool

    def to_dict(self) -> dict[str, float | int | bool]:
        return {
            "k": self.k,
            "p50": self.p50,
            "p99": self.p99,
            "p_any_over_p99": self.p_any_over_p99,
            "supported": self.supported,
        }


def _cdf(values: SmoothCdf | Sequence[float]) -> SmoothCdf:
    return values if isinstance(values, SmoothCdf) else SmoothCdf(values)


def fan_out(values: SmoothCdf | Sequence[float], ks: Iterable[int] = FAN_OUT_KS) -> list[FanOutRow]:
    """p50/p99 of max(X1..Xk) for each k: P(max <= x) = F(x)^k, so its q-quantile is F's quantile
    at q^(1/k). Assumes the k calls are independent draws (no shared queue or rate limit)."""
    cdf = _cdf(values)
    rows = []
    for k in ks:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        u99 = 0.99 ** (1 / k)
        rows.append(
            FanOutRow(
                k=k,
                p50=cdf.quantile(0.5 ** (1 / k)),
                p99=cdf.quantile(u99),
                p_any_over_p99=1 - 0.99**k,
                supported=cdf.n * (1 - u99) >= 1 - 1e-9,
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class Hedge:
    """A duplicate request sent `delay` µs after the first unless it has finished; the caller
    takes whichever answers first. Quantiles in µs; `extra_load` is the fraction of requests that
    get a duplicate, P(X > delay)."""

    delay_percentile: float
    delay: float
    p50: float
    p95: float
    p99: float
    baseline_p50: float
    baseline_p95: float
    baseline_p99: float
    extra_load: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return {
            "delay_percentile": self.delay_percentile,
            "delay": self.delay,
            "p50": self.p50,
            "p95": self.p95,
            "p99": self.p99,
            "baseline_p50": self.baseline_p50,
            "baseline_p95": self.baseline_p95,
            "baseline_p99": self.baseline_p99,
            "extra_load": self.extra_load,
            "n": self.n,
        }


def hedged_quantile(cdf: SmoothCdf, delay: float, q: float) -> float:
    """The q-quantile of min(X1, delay + X2), X1, X2 iid ~ cdf.

    P(min > x) = P(X1 > x)·P(X2 > x − delay); the CDF 1 − that is continuous and non-decreasing,
    and the answer lies in [min x, max x] (the first request alone finishes by max x), so
    bisection finds it to well below a nanosecond.
    """
    lo, hi = cdf.xs[0], cdf.xs[-1]
    if lo == hi:
        return lo

    def dist(x: float) -> float:
        return 1.0 - cdf.survival(x) * cdf.survival(x - delay)

    for _ in range(200):
        mid = (lo + hi) / 2
        if dist(mid) >= q:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-9 * max(1.0, abs(hi)):
            break
    return hi


def hedge(values: SmoothCdf | Sequence[float], delay_percentile: float) -> Hedge:
    """The distribution if a duplicate were sent at the measured `delay_percentile` (e.g. 95)."""
    if not 0 < delay_percentile < 100:
        raise ValueError(f"delay percentile must be in (0, 100), got {delay_percentile!r}")
    cdf = _cdf(values)
    delay = cdf.quantile(delay_percentile / 100)
    return Hedge(
        delay_percentile=delay_percentile,
        delay=delay,
        p50=hedged_quantile(cdf, delay, 0.50),
        p95=hedged_quantile(cdf, delay, 0.95),
        p99=hedged_quantile(cdf, delay, 0.99),
        baseline_p50=cdf.quantile(0.50),
        baseline_p95=cdf.quantile(0.95),
        baseline_p99=cdf.quantile(0.99),
        extra_load=cdf.survival(delay),
        n=cdf.n,
    )
