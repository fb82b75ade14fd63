"""Statistics behind every verdict: point estimates, confidence bounds, significance tests.

Owns the percentile estimator, the distribution-free bounds for a quantile, the bounds for a mean
and for a proportion, the rule that turns a bound and a threshold into pass / fail /
inconclusive, the minimum sample size a percentile budget needs, the Mann-Whitney U test
for baseline comparisons and the Holm adjustment that keeps a run of many comparisons sound.
Stdlib only (no numpy, no scipy); it must not import pytest, hdrh, or any other part of the
package, so the numbers can be checked in isolation.

Decisions (also in docs/budgets.md):

* Percentile estimate: linear interpolation between order statistics, numpy's default
  ("linear", Hyndman & Fan type 7), the estimator vLLM and AIPerf report, so a `ttft.p95` here
  matches theirs on the same data. Nearest-rank (HdrHistogram) differs at small n.
* Every interval is a pair of **one-sided** bounds, each holding with probability at least
  `confidence` (default 0.95). "pass" then means "at 95% confidence the statistic is on the good
  side of the threshold", "fail" means the same for the bad side, and anything else is
  "inconclusive". Together the two bounds form a two-sided interval at `2·confidence − 1` (90%
  for the default); pass `(1 + c) / 2` for a two-sided interval at `c`.
* Quantile bounds are order statistics chosen with the exact binomial distribution
  (distribution-free: valid for any continuous latency distribution, conservative with ties).
* The mean uses Student's t on the sample standard deviation. Latencies are skewed, so for
  small n this is an approximation; prefer percentile budgets.
* Proportions (error rate, goodput) use the Wilson score bound.
* A baseline comparison tests every metric of every test, group and the session: hundreds of
  tests at once, so p < 0.05 each would flag about one in twenty unchanged metrics. Holm's
  step-down adjustment holds the chance of *any* false regression in the run at 0.05, under
  any dependence between the tests (ttft and e2e of one test are correlated), and is never less
  powerful than Bonferroni.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Final, Literal

__all__ = [
    "DEFAULT_CONFIDENCE",
    "CountedValues",
    "Estimate",
    "MannWhitney",
    "SortedValues",
    "Verdict",
    "estimate_stat",
    "holm_adjusted",
    "mann_whitney_u",
    "mann_whitney_u_counts",
    "mean_estimate",
    "mean_estimate_of",
    "min_samples_for",
    "percentile",
    "percentile_estimate",
    "proportion_estimate",
    "quantile_ranks",
    "student_t_quantile",
    "verdict",
]

Verdict = Literal["pass", "fail", "inconclusive"]
DEFAULT_CONFIDENCE: Final = 0.95
# Above this the exact binomial tail can no longer be told apart from 1 in double precision.
_MAX_CONFIDENCE: Final = 0.999999
_NORMAL: Final = NormalDist()
# Confidence levels are decimals (0.9) that binary floats cannot hold exactly; without this slack
# an exact tie such as P(B <= 0) = 1 − 0.1 = 0.9 would fall either side of 0.9 by rounding.
_TIE: Final = 1e-12


@dataclass(frozen=True, slots=True)
class Estimate:
    """A point estimate with its lower and upper confidence bounds.

    A bound that the data cannot support (an upper bound on p99 from 20 values) is infinite.
    `low == high == value` means the value is exact (an observed `max`).
    """

    value: float
    low: float
    high: float
    n: int
    confidence: float

    @property
    def interval(self) -> tuple[float, float]:
        return (self.low, self.high)


def _check_confidence(confidence: float) -> None:
    if not 0.5 <= confidence <= _MAX_CONFIDENCE:
        raise ValueError(f"confidence must be in [0.5, {_MAX_CONFIDENCE}], got {confidence!r}")


class SortedValues(tuple[float, ...]):
    """Finite values in ascending order, checked once: every estimator here takes them as they
    are instead of sorting again (a test's pool is sorted once and judged, summarised and
    reported many times). Build it with `SortedValues.of(values)`."""

    __slots__ = ()

    @classmethod
    def of(cls, values: Iterable[float]) -> SortedValues:
        data = sorted(values)
        # One C-speed sum finds a NaN or an infinity anywhere (either makes the sum non-finite);
        # only then is each value looked at (a huge finite sum could overflow on its own).
        if not math.isfinite(sum(data)) and not all(math.isfinite(x) for x in data):
            raise ValueError("values must be finite numbers (no NaN or infinity)")
        return cls(data)


class CountedValues(Sequence[float]):
    """Sorted values given as (value, count) pairs in ascending value order, e.g. a histogram's
    buckets: a sequence of `len` = Σ counts whose i-th item is found by bisecting the running
    counts, so an order statistic of 10⁹ values costs what one of 10 does and nothing is
    expanded. The estimators take it as they take `SortedValues`."""

    __slots__ = ("_ends", "_values")

    def __init__(self, pairs: Iterable[tuple[float, int]]) -> None:
        self._values: list[float] = []
        self._ends: list[int] = []  # the 1-based rank of each value's last copy
        total = 0
        previous = -math.inf
        for value, count in pairs:
            if not math.isfinite(value) or value < previous or count < 0:
                raise ValueError("counted values must be finite, ascending, with counts >= 0")
            if count:
                total += count
                self._values.append(float(value))
                self._ends.append(total)
                previous = value

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __getitem__(self, index: int) -> float:  # type: ignore[override]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("rank out of range")
        return self._values[bisect.bisect_right(self._ends, index)]

    def pairs(self) -> list[tuple[float, int]]:
        starts = [0, *self._ends[:-1]]
        return [(v, e - s) for v, e, s in zip(self._values, self._ends, starts, strict=True)]


def _sorted_finite(values: Iterable[float]) -> Sequence[float]:
    if type(values) is CountedValues:
        if not values:
            raise ValueError("no values: the metric is absent, not zero")
        return values
    if type(values) is SortedValues:
        if not values:
            raise ValueError("no values: the metric is absent, not zero")
        return values
    data = sorted(values)
    if not data:
        raise ValueError("no values: the metric is absent, not zero")
    if not all(math.isfinite(x) for x in data):
        raise ValueError("values must be finite numbers (no NaN or infinity)")
    return data


def percentile(values: Iterable[float], p: float) -> float:
    """The `p`-th percentile (0 <= p <= 100) by linear interpolation (numpy's default).

    With the values sorted as x[0..n-1], the rank is h = (n − 1)·p/100 and the result is
    x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]).
    """
    return _linear(_sorted_finite(values), p)


def _linear(data: Sequence[float], p: float) -> float:
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {p!r}")
    h = (len(data) - 1) * p / 100
    lo = math.floor(h)
    if lo + 1 >= len(data):
        return data[-1]
    frac = h - lo
    # x + f·(y − x) is exact at f = 0 and keeps monotonicity, unlike (1 − f)·x + f·y.
    return data[lo] + frac * (data[lo + 1] - data[lo])


def _log_binom_pmf(n: int, k: int, log_p: float, log_q: float) -> float:
    return (
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * log_p
        + (n - k) * log_q
    )


def quantile_ranks(
    n: int, p: float, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) of the order statistics that bound the `p`-th percentile.

    X(l) <= q_p with probability >= confidence (l the largest such rank), and q_p <= X(u) with
    probability >= confidence (u the smallest). The number of values at or below q_p is
    Binomial(n, p/100), so P(X(l) <= q_p) = P(B >= l) and P(q_p <= X(u)) = P(B <= u − 1).
    None means no order statistic is far enough out: that bound is infinite.

    The binomial probabilities are exact (log-space pmf via lgamma), summed over the window
    mean ± (10·sd + 40), outside which the mass is below e^-50 (Chernoff), so the cost is
    O(√n) for any n rather than O(n); no normal approximation is needed.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0 < p < 100:
        raise ValueError(f"percentile must be in (0, 100), got {p!r}")
    _check_confidence(confidence)
    if n == 0:
        return None, None
    prob = p / 100
    log_p, log_q = math.log(prob), math.log1p(-prob)
    mean, sd = n * prob, math.sqrt(n * prob * (1 - prob))
    first = max(0, math.floor(mean - 10 * sd - 40))
    last = min(n, math.ceil(mean + 10 * sd + 40))
    pmf = [math.exp(_log_binom_pmf(n, k, log_p, log_q)) for k in range(first, last + 1)]

    lower: int | None = None
    tail = 0.0  # P(B >= k), accumulated from the top so small tails keep their precision
    for k in range(last, first - 1, -1):
        tail += pmf[k - first]
        if tail >= confidence - _TIE:
            lower = k if k >= 1 else None
            break

    upper: int | None = None
    cdf = 0.0  # P(B <= k)
    for k in range(first, last + 1):
        cdf += pmf[k - first]
        if cdf >= confidence - _TIE:
            upper = k + 1 if k + 1 <= n else None
            break
    return lower, upper


def percentile_estimate(
    values: Iterable[float], p: float, confidence: float = DEFAULT_CONFIDENCE
) -> Estimate:
    """The `p`-th percentile (0 < p < 100) with distribution-free order-statistic bounds."""
    data = _sorted_finite(values)
    lower, upper = quantile_ranks(len(data), p, confidence)
    return Estimate(
        value=_linear(data, p),
        low=-math.inf if lower is None else data[lower - 1],
        high=math.inf if upper is None else data[upper - 1],
        n=len(data),
        confidence=confidence,
    )


def min_samples_for(
    percentile: float,
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    bound: Literal["upper", "lower"] = "upper",
) -> int:
    """The smallest n at which the `percentile`'s upper (or lower) bound exists at all.

    The widest upper bound is the sample maximum, which exceeds q_p unless all n values fall
    below it: P = 1 − p^n. So a `< t` budget on pN can only ever pass once 1 − p^n >= confidence:
    p95 needs 59 values, p99 needs 299, p99.9 needs 2995 (at 95%). Symmetrically, the lower bound
    (needed to pass a `>` budget or to fail a `<` one) needs 1 − (1 − p)^n >= confidence. Below
    these sizes the verdict can only be "inconclusive" on that side, whatever the data.
    """
    if not 0 < percentile < 100:
        raise ValueError(f"percentile must be in (0, 100), got {percentile!r}")
    _check_confidence(confidence)
    prob = percentile / 100 if bound == "upper" else 1 - percentile / 100
    n = max(1, math.ceil(math.log1p(-confidence) / math.log(prob)))
    # The closed form can land one off when log(1 − c)/log(p) is (nearly) an integer.
    while 1 - prob**n < confidence - _TIE:
        n += 1
    while n > 1 and 1 - prob ** (n - 1) >= confidence - _TIE:
        n -= 1
    return n


def student_t_quantile(q: float, df: float) -> float:
    """The q-quantile (0.5 <= q < 1) of Student's t with `df` degrees of freedom.

    Inverts the CDF, written with the regularised incomplete beta function (continued fraction,
    Numerical Recipes §6.4), by bisection; accurate to ~1e-10.
    """
    if not 0.5 <= q < 1:
        raise ValueError(f"q must be in [0.5, 1), got {q!r}")
    if df <= 0:
        raise ValueError(f"df must be > 0, got {df!r}")
    if q == 0.5:
        return 0.0
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < q:
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2


def _t_cdf(t: float, df: float) -> float:
    """P(T <= t) for t >= 0."""
    return 1 - 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    # The continued fraction converges fast only on this side; use the symmetry otherwise.
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c = 1.0
    d = 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1 + aa * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-16:
            break
    return h


def mean_estimate(values: Iterable[float], confidence: float = DEFAULT_CONFIDENCE) -> Estimate:
    """The mean with one-sided Student-t bounds: mean ± t(confidence, n − 1)·s/√n.

    n = 1 has no spread to go on: both bounds are infinite. Identical values give a zero-width
    interval (s = 0), which is the honest answer for a metric that never varies.
    """
    data = _sorted_finite(values)
    n = len(data)
    total = math.fsum(data)
    mean = total / n
    return mean_estimate_of(n, total, math.fsum((x - mean) ** 2 for x in data), confidence)


def mean_estimate_of(
    n: int, total: float, squares: float, confidence: float = DEFAULT_CONFIDENCE
) -> Estimate:
    """`mean_estimate` from n, Σx and Σ(x − mean)² (what shards add up: `evidence`), the same
    Student-t bounds."""
    if n <= 0:
        raise ValueError("no values: the metric is absent, not zero")
    _check_confidence(confidence)
    mean = total / n
    if n == 1:
        return Estimate(mean, -math.inf, math.inf, 1, confidence)
    sd = math.sqrt(max(0.0, squares) / (n - 1))
    half = student_t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return Estimate(mean, mean - half, mean + half, n, confidence)


def proportion_estimate(successes: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> Estimate:
    """A proportion (errors/calls, good/calls) with one-sided Wilson score bounds.

    Wilson rather than the normal (Wald) interval because budgets live at the edges, 0 errors in
    20 calls, where Wald collapses to [0, 0] and Wilson still says "up to ~12%".
    """
    if n <= 0:
        raise ValueError("no observations: the proportion is absent, not zero")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    _check_confidence(confidence)
    z = _NORMAL.inv_cdf(confidence)
    phat = successes / n
    denom = 1 + z * z / n
    center = (phat + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return Estimate(phat, low, high, n, confidence)


def estimate_stat(
    values: Iterable[float], stat: str, confidence: float = DEFAULT_CONFIDENCE
) -> Estimate:
    """Estimate a budget statistic (`p95`, `p99.9`, `mean`, `min`, `max`) of raw values.

    `min` and `max` are judged on the observed values, exactly (a zero-width interval):
    `e2e.max < 30s` means "no call of this run took 30 s", which is what readers of that budget
    expect; a population maximum cannot be bounded from a sample anyway.
    """
    if stat == "mean":
        return mean_estimate(values, confidence)
    if stat in ("min", "max"):
        data = _sorted_finite(values)
        value = data[0] if stat == "min" else data[-1]
        return Estimate(value, value, value, len(data), confidence)
    if stat[:1] == "p":
        try:
            p = float(stat[1:])
        except ValueError:
            pass
        else:
            return percentile_estimate(values, p, confidence)
    raise ValueError(f"unknown statistic {stat!r}")


def verdict(
    op: str, threshold: float, interval: tuple[float, float] | None, estimate: float
) -> Verdict:
    """Judge `statistic op threshold` from its confidence bounds.

    For `< t`: "pass" when the upper bound is below t (the statistic is below t with the
    interval's confidence), "fail" when the lower bound is at or above t, otherwise
    "inconclusive": the data are compatible with both sides, usually because n is below
    `min_samples_for`. `<=`, `>` and `>=` mirror it. `interval=None` means the estimate is exact
    and is compared directly. A NaN estimate (nothing observed) is always inconclusive.
    """
    if math.isnan(estimate) or math.isnan(threshold):
        return "inconclusive"
    low, high = (estimate, estimate) if interval is None else interval
    if math.isnan(low) or math.isnan(high):
        return "inconclusive"
    if op == "<":
        passed, failed = high < threshold, low >= threshold
    elif op == "<=":
        passed, failed = high <= threshold, low > threshold
    elif op == ">":
        passed, failed = low > threshold, high <= threshold
    elif op == ">=":
        passed, failed = low >= threshold, high < threshold
    else:
        raise ValueError(f"unknown operator {op!r}; expected <, <=, > or >=")
    if passed:
        return "pass"
    return "fail" if failed else "inconclusive"


@dataclass(frozen=True, slots=True)
class MannWhitney:
    """Result of a Mann-Whitney U test of sample `a` against sample `b`.

    `u` counts the pairs with a > b (ties count ½); `effect = u / (n_a·n_b)` is
    P(A > B) + ½·P(A = B), 0.5 meaning "no tendency". `z` is (u − mean)/sd without continuity
    correction, signed so that z > 0 means `a` tends to be larger.
    """

    u: float
    z: float
    p_value: float
    effect: float
    n_a: int
    n_b: int


def mann_whitney_u(
    a: Sequence[float],
    b: Sequence[float],
    *,
    alternative: Literal["two-sided", "greater", "less"] = "two-sided",
) -> MannWhitney:
    """Mann-Whitney U (Wilcoxon rank-sum) test, normal approximation with tie correction.

    Answers "do `a`'s values tend to be larger than `b`'s?" without assuming a distribution:
    the natural test for "did this change make TTFT slower than the baseline run?"
    (`alternative="greater"` with `a` = new, `b` = baseline). The p-value uses the normal
    approximation with continuity correction and the tie-corrected variance (as scipy's
    `method="asymptotic"`); it is good from about 8 values per side. Identical samples give
    p = 1.
    """
    return mann_whitney_u_counts([(x, 1) for x in a], [(x, 1) for x in b], alternative=alternative)


def mann_whitney_u_counts(
    a: Iterable[tuple[float, int]],
    b: Iterable[tuple[float, int]],
    *,
    alternative: Literal["two-sided", "greater", "less"] = "two-sided",
) -> MannWhitney:
    """`mann_whitney_u` of samples given as (value, count) pairs, e.g. a histogram's buckets,
    without expanding them: the same statistic and p-value (bit for bit: the same arithmetic,
    one tie group per distinct value), in time linear in the distinct values, so a count of
    10^12 costs what a count of 1 does."""
    counts: dict[float, list[int]] = {}
    for side, pairs in ((0, a), (1, b)):
        for value, count in pairs:
            if count < 0:
                raise ValueError(f"negative count {count}")
            if count:
                counts.setdefault(float(value), [0, 0])[side] += count
    n_a = sum(c[0] for c in counts.values())
    n_b = sum(c[1] for c in counts.values())
    if n_a == 0 or n_b == 0:
        raise ValueError("both samples need at least one value")
    if any(math.isnan(v) for v in counts):
        raise ValueError("values contain NaN")
    n = n_a + n_b
    rank_sum_a = 0.0
    tie_term = 0.0
    before = 0  # values below the current one, both samples
    for value in sorted(counts):
        in_a, in_b = counts[value]
        t = in_a + in_b
        average_rank = (2 * before + t + 1) / 2  # ranks before+1 .. before+t (1-based)
        rank_sum_a += average_rank * in_a
        tie_term += t**3 - t
        before += t
    u_a = rank_sum_a - n_a * (n_a + 1) / 2
    mean = n_a * n_b / 2
    var = n_a * n_b / 12 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return MannWhitney(u_a, 0.0, 1.0, u_a / (n_a * n_b), n_a, n_b)
    sd = math.sqrt(var)
    if alternative == "greater":
        p_value = 1 - _NORMAL.cdf((u_a - mean - 0.5) / sd)
    elif alternative == "less":
        p_value = _NORMAL.cdf((u_a - mean + 0.5) / sd)
    elif alternative == "two-sided":
        extreme = max(u_a, n_a * n_b - u_a)
        p_value = min(1.0, 2 * (1 - _NORMAL.cdf((extreme - mean - 0.5) / sd)))
    else:
        raise ValueError(f"unknown alternative {alternative!r}")
    return MannWhitney(u_a, (u_a - mean) / sd, p_value, u_a / (n_a * n_b), n_a, n_b)


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input's order: the i-th smallest p of m is
    multiplied by m − i + 1 (i from 1), made non-decreasing in that order, and capped at 1.
    Rejecting where the adjusted p < alpha keeps the family-wise error rate at alpha (Holm 1979;
    statsmodels' `multipletests(method="holm")` gives the same numbers)."""
    m = len(p_values)
    if any(math.isnan(p) or not 0.0 <= p <= 1.0 for p in p_values):
        raise ValueError("p-values must lie in [0, 1]")
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
