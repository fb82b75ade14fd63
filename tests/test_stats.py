from __future__ import annotations

import math
import random
import statistics
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_latency.stats import (
    DEFAULT_CONFIDENCE,
    Estimate,
    estimate_stat,
    holm_adjusted,
    mann_whitney_u,
    mann_whitney_u_counts,
    mean_estimate,
    min_samples_for,
    percentile,
    percentile_estimate,
    proportion_estimate,
    quantile_ranks,
    student_t_quantile,
    verdict,
)

# -- percentile point estimate ---------------------------------------------------------------


def test_percentile_is_linear_interpolation_like_numpy() -> None:
    data = [4.0, 1.0, 3.0, 2.0]  # unsorted on purpose
    assert percentile(data, 50) == 2.5
    assert percentile(data, 25) == 1.75
    assert percentile(data, 90) == pytest.approx(3.7)
    assert percentile(data, 0) == 1.0
    assert percentile(data, 100) == 4.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([5.0] * 9, 95) == 5.0


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.floats(0, 1e9, allow_nan=False), min_size=2, max_size=60),
    st.integers(1, 99),
)
def test_percentile_matches_statistics_quantiles_inclusive(data: list[float], p: int) -> None:
    # statistics.quantiles(method="inclusive") is the same type-7 estimator as numpy's default.
    expected = statistics.quantiles(data, n=100, method="inclusive")[p - 1]
    assert percentile(data, p) == pytest.approx(expected, rel=1e-9, abs=1e-6)


def test_percentile_rejects_empty_nan_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="absent"):
        percentile([], 50)
    with pytest.raises(ValueError, match="NaN"):
        percentile([1.0, math.nan, 2.0], 50)
    with pytest.raises(ValueError, match="infinity"):
        percentile_estimate([1.0, math.inf], 50)
    with pytest.raises(ValueError, match="percentile"):
        percentile([1.0], 101)


# -- order-statistic bounds -------------------------------------------------------------------


def _exact_ranks(n: int, p: float, confidence: float) -> tuple[int | None, int | None]:
    """Brute force with exact rational arithmetic, as the definition reads."""
    prob = Fraction(str(p)) / 100
    pmf = [math.comb(n, k) * prob**k * (1 - prob) ** (n - k) for k in range(n + 1)]
    conf = Fraction(str(confidence))  # the decimal the user meant, not its binary neighbour
    lows = [ll for ll in range(1, n + 1) if sum(pmf[ll:]) >= conf]
    ups = [u for u in range(1, n + 1) if sum(pmf[:u]) >= conf]
    return (max(lows) if lows else None), (min(ups) if ups else None)


@pytest.mark.parametrize("p", [10, 50, 90, 95, 99])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_ranks_match_exact_binomial_for_small_n(p: float, confidence: float) -> None:
    for n in (1, 2, 3, 5, 10, 20, 29, 30, 58, 59, 60, 100):
        assert quantile_ranks(n, p, confidence) == _exact_ranks(n, p, confidence), n


def test_known_rank_cases() -> None:
    assert quantile_ranks(0, 50) == (None, None)
    assert quantile_ranks(1, 50) == (None, None)  # one value bounds nothing at 95%
    assert quantile_ranks(299, 99) == (293, 299)  # p99 first gets an upper bound at n=299
    assert quantile_ranks(298, 99)[1] is None
    assert quantile_ranks(59, 95)[1] == 59
    assert quantile_ranks(58, 95)[1] is None
    low, high = quantile_ranks(10**7, 99)  # large n stays fast and sane
    assert low is not None and high is not None
    assert low < 0.99 * 10**7 < high and high - low < 2000


def test_ranks_validate_arguments() -> None:
    for bad in ((-1, 50, 0.95), (10, 0, 0.95), (10, 100, 0.95), (10, 50, 0.4), (10, 50, 1.0)):
        with pytest.raises(ValueError):
            quantile_ranks(*bad)


@pytest.mark.parametrize(
    ("p", "confidence", "expected"),
    [(50, 0.95, 5), (90, 0.95, 29), (95, 0.95, 59), (99, 0.95, 299), (99.9, 0.95, 2995),
     (99, 0.99, 459), (90, 0.9, 22)],
)  # fmt: skip
def test_min_samples_for(p: float, confidence: float, expected: int) -> None:
    assert min_samples_for(p, confidence) == expected
    assert 1 - (p / 100) ** expected >= confidence - 1e-12
    assert 1 - (p / 100) ** (expected - 1) < confidence


@pytest.mark.parametrize("p", [50, 75, 90, 95, 99, 99.5])
def test_min_samples_is_where_the_bound_first_exists(p: float) -> None:
    n = min_samples_for(p)
    assert quantile_ranks(n, p)[1] == n  # the upper bound is the sample maximum
    assert quantile_ranks(n - 1, p)[1] is None
    n_low = min_samples_for(p, bound="lower")
    assert quantile_ranks(n_low, p)[0] == 1
    assert n_low == 1 or quantile_ranks(n_low - 1, p)[0] is None


def test_min_samples_rejects_bad_percentiles() -> None:
    with pytest.raises(ValueError):
        min_samples_for(100)
    with pytest.raises(ValueError):
        min_samples_for(0)


def test_quantile_bound_coverage_by_simulation() -> None:
    """2000 seeded trials of 50 lognormal draws: each one-sided bound on p90 holds >= 95% − 2%."""
    rng = random.Random(20240601)
    true_p90 = math.exp(statistics.NormalDist().inv_cdf(0.90))  # lognormal(0, 1)
    lower_ok = upper_ok = both_ok = two_sided_ok = 0
    trials = 2000
    two_sided = (1 + DEFAULT_CONFIDENCE) / 2
    for _ in range(trials):
        sample = [rng.lognormvariate(0, 1) for _ in range(50)]
        est = percentile_estimate(sample, 90)
        wide = percentile_estimate(sample, 90, two_sided)
        lower_ok += est.low <= true_p90
        upper_ok += true_p90 <= est.high
        both_ok += est.low <= true_p90 <= est.high
        two_sided_ok += wide.low <= true_p90 <= wide.high
    assert lower_ok / trials >= DEFAULT_CONFIDENCE - 0.02
    assert upper_ok / trials >= DEFAULT_CONFIDENCE - 0.02
    assert both_ok / trials >= 2 * DEFAULT_CONFIDENCE - 1 - 0.02
    assert two_sided_ok / trials >= DEFAULT_CONFIDENCE - 0.02
    # Not absurdly conservative either: the bounds are the tightest order statistics.
    assert upper_ok / trials <= 0.995


def test_percentile_estimate_edges() -> None:
    with pytest.raises(ValueError):
        percentile_estimate([], 95)
    one = percentile_estimate([3.0], 50)
    assert (one.value, one.low, one.high, one.n) == (3.0, -math.inf, math.inf, 1)
    flat = percentile_estimate([2.0] * 100, 90)
    assert (flat.value, flat.low, flat.high) == (2.0, 2.0, 2.0)
    small = percentile_estimate([float(i) for i in range(1, 21)], 95)
    assert small.high == math.inf  # p95 from 20 values has no upper bound
    assert small.low == 17.0  # P(Bin(20, .95) >= 17) = 0.984; >= 18 is only 0.925
    assert small.low <= small.value
    big = percentile_estimate([float(i) for i in range(1, 1001)], 50)
    assert big.low < big.value < big.high
    assert big.interval == (big.low, big.high)


# -- verdicts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "threshold", "interval", "expected"),
    [
        ("<", 400, (300, 399), "pass"),
        ("<", 400, (300, 400), "inconclusive"),
        ("<", 400, (400, 500), "fail"),
        ("<", 400, (401, 500), "fail"),
        ("<", 400, (300, math.inf), "inconclusive"),
        ("<=", 400, (300, 400), "pass"),
        ("<=", 400, (400, 500), "inconclusive"),
        ("<=", 400, (401, 500), "fail"),
        (">", 0.5, (0.51, 0.9), "pass"),
        (">", 0.5, (0.5, 0.9), "inconclusive"),
        (">", 0.5, (0.1, 0.5), "fail"),
        (">=", 0.5, (0.5, 0.9), "pass"),
        (">=", 0.5, (0.1, 0.5), "inconclusive"),
        (">=", 0.5, (0.1, 0.49), "fail"),
        (">=", 0.5, (-math.inf, math.inf), "inconclusive"),
    ],
)
def test_verdict(op: str, threshold: float, interval: tuple[float, float], expected: str) -> None:
    estimate = interval[0] if math.isfinite(interval[0]) else 0.0
    assert verdict(op, threshold, interval, estimate) == expected


def test_verdict_without_interval_compares_the_exact_value() -> None:
    assert verdict("<", 400, None, 399) == "pass"
    assert verdict("<", 400, None, 400) == "fail"
    assert verdict(">=", 0.9, None, 0.9) == "pass"


def test_verdict_nan_is_inconclusive_and_unknown_op_raises() -> None:
    assert verdict("<", 400, None, math.nan) == "inconclusive"
    assert verdict("<", 400, (math.nan, 1.0), 1.0) == "inconclusive"
    with pytest.raises(ValueError, match="operator"):
        verdict("==", 400, None, 1)


def test_too_few_samples_is_inconclusive_however_good_the_data() -> None:
    fast = [100.0] * 20
    est = percentile_estimate(fast, 99)
    assert verdict("<", 400, est.interval, est.value) == "inconclusive"
    est = percentile_estimate([100.0] * min_samples_for(99), 99)
    assert verdict("<", 400, est.interval, est.value) == "pass"
    slow = percentile_estimate([500.0] * 20, 99)
    assert verdict("<", 400, slow.interval, slow.value) == "fail"  # lower bound exists early


# -- mean -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("q", "df", "expected"),
    [(0.975, 1, 12.706205), (0.975, 5, 2.570582), (0.95, 10, 1.812461), (0.975, 30, 2.042272),
     (0.995, 2, 9.924843), (0.95, 4, 2.131847), (0.5, 3, 0.0)],
)  # fmt: skip
def test_student_t_quantile_matches_tables(q: float, df: float, expected: float) -> None:
    assert student_t_quantile(q, df) == pytest.approx(expected, abs=2e-6)


def test_student_t_tends_to_normal() -> None:
    z = statistics.NormalDist().inv_cdf(0.95)
    assert student_t_quantile(0.95, 1e7) == pytest.approx(z, abs=1e-5)
    with pytest.raises(ValueError):
        student_t_quantile(0.3, 5)
    with pytest.raises(ValueError):
        student_t_quantile(0.95, 0)


def test_mean_estimate() -> None:
    est = mean_estimate([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.131847 * statistics.stdev([1, 2, 3, 4, 5]) / math.sqrt(5)
    assert est.value == 3.0
    assert est.low == pytest.approx(3 - half, abs=1e-5)
    assert est.high == pytest.approx(3 + half, abs=1e-5)
    one = mean_estimate([4.0])
    assert (one.value, one.low, one.high) == (4.0, -math.inf, math.inf)
    flat = mean_estimate([2.5] * 10)
    assert (flat.low, flat.high) == (2.5, 2.5)
    with pytest.raises(ValueError):
        mean_estimate([])


def test_mean_bound_coverage_on_normal_data() -> None:
    rng = random.Random(7)
    trials, ok = 1000, 0
    for _ in range(trials):
        est = mean_estimate([rng.gauss(10, 2) for _ in range(10)])
        ok += est.high >= 10
    assert ok / trials >= DEFAULT_CONFIDENCE - 0.02


# -- proportions ------------------------------------------------------------------------------


def test_wilson_bounds() -> None:
    zero = proportion_estimate(0, 20)
    z2 = statistics.NormalDist().inv_cdf(0.95) ** 2
    assert zero.value == 0 and zero.low == 0
    assert zero.high == pytest.approx(z2 / (20 + z2))  # ~12%: 0 errors in 20 proves little
    full = proportion_estimate(20, 20)
    assert full.high == 1 and full.low == pytest.approx(1 - zero.high)
    half = proportion_estimate(50, 100)
    assert half.low < 0.5 < half.high
    assert half.high - 0.5 == pytest.approx(0.5 - half.low)
    # 19 good of 20 against ">= 95%": the point estimate meets it, the bound cannot.
    est = proportion_estimate(19, 20)
    assert verdict(">=", 0.95, est.interval, est.value) == "inconclusive"
    est = proportion_estimate(990, 1000)
    assert verdict(">=", 0.95, est.interval, est.value) == "pass"


def test_wilson_coverage_by_simulation() -> None:
    rng = random.Random(11)
    trials, ok = 2000, 0
    for _ in range(trials):
        hits = sum(rng.random() < 0.1 for _ in range(40))
        ok += proportion_estimate(hits, 40).high >= 0.1
    assert ok / trials >= DEFAULT_CONFIDENCE - 0.02


def test_proportion_rejects_bad_counts() -> None:
    for successes, n in ((0, 0), (3, 2), (-1, 5)):
        with pytest.raises(ValueError):
            proportion_estimate(successes, n)


# -- estimate_stat ----------------------------------------------------------------------------


def test_estimate_stat_dispatches() -> None:
    data = [float(i) for i in range(1, 101)]
    assert estimate_stat(data, "p95") == percentile_estimate(data, 95)
    assert estimate_stat(data, "p99.9") == percentile_estimate(data, 99.9)
    assert estimate_stat(data, "mean") == mean_estimate(data)
    assert estimate_stat(data, "max") == Estimate(100.0, 100.0, 100.0, 100, 0.95)
    assert estimate_stat(data, "min").interval == (1.0, 1.0)
    for bad in ("median", "pxx", ""):
        with pytest.raises(ValueError, match="unknown statistic"):
            estimate_stat(data, bad)


# -- Mann-Whitney -----------------------------------------------------------------------------


def test_mann_whitney_known_values() -> None:
    r = mann_whitney_u([1, 2, 3], [4, 5, 6])
    assert r.u == 0 and r.effect == 0
    assert r.p_value == pytest.approx(0.0808556, abs=1e-6)  # scipy asymptotic, continuity
    assert r.z < 0
    assert mann_whitney_u([1, 2, 3], [4, 5, 6], alternative="less").p_value == pytest.approx(
        0.0404278, abs=1e-6
    )
    assert mann_whitney_u([4, 5, 6], [1, 2, 3], alternative="greater").p_value < 0.05
    assert mann_whitney_u([4, 5, 6], [1, 2, 3], alternative="less").p_value > 0.9


def test_mann_whitney_ties_and_degenerate_cases() -> None:
    same = mann_whitney_u([5.0] * 10, [5.0] * 12)
    assert (same.p_value, same.effect, same.z) == (1.0, 0.5, 0.0)
    tied = mann_whitney_u([1, 2, 2, 3], [2, 2, 3, 4])
    assert tied.u == pytest.approx(4.5)  # pairs a > b, ties counted as half
    assert 0 < tied.p_value <= 1
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0])
    with pytest.raises(ValueError):
        mann_whitney_u([math.nan], [1.0])
    with pytest.raises(ValueError):
        mann_whitney_u([1.0], [2.0], alternative="sideways")  # type: ignore[arg-type]


def test_mann_whitney_detects_a_slowdown_and_keeps_its_false_positive_rate() -> None:
    rng = random.Random(3)
    base = [rng.lognormvariate(12, 0.5) for _ in range(80)]
    slower = [rng.lognormvariate(12.5, 0.5) for _ in range(80)]
    assert mann_whitney_u(slower, base, alternative="greater").p_value < 0.01
    trials = 400
    false_alarms = sum(
        mann_whitney_u(
            [rng.lognormvariate(12, 0.5) for _ in range(30)],
            [rng.lognormvariate(12, 0.5) for _ in range(30)],
        ).p_value
        < 0.05
        for _ in range(trials)
    )
    assert false_alarms / trials <= 0.08


def _expanded_mann_whitney(a: list[float], b: list[float], alternative: str) -> tuple[float, float]:
    """The rank test over expanded values, ranked pair by pair (the form `compare` used before
    it read histograms: the reference the counts form must equal). Returns (u, p)."""
    from statistics import NormalDist

    pooled = sorted([(x, 0) for x in a] + [(x, 1) for x in b])
    n_a, n_b, n = len(a), len(b), len(a) + len(b)
    rank_sum_a, tie_term, i = 0.0, 0.0, 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank_sum_a += (i + j + 2) / 2 * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        tie_term += (j - i + 1) ** 3 - (j - i + 1)
        i = j + 1
    u = rank_sum_a - n_a * (n_a + 1) / 2
    var = n_a * n_b / 12 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return u, 1.0
    sd, mean = math.sqrt(var), n_a * n_b / 2
    cdf = NormalDist().cdf
    if alternative == "greater":
        return u, 1 - cdf((u - mean - 0.5) / sd)
    if alternative == "less":
        return u, cdf((u - mean + 0.5) / sd)
    return u, min(1.0, 2 * (1 - cdf((max(u, n_a * n_b - u) - mean - 0.5) / sd)))


_buckets = st.lists(
    st.tuples(st.sampled_from([1.0, 2.0, 3.0, 7.0, 1000.0, 1001.0, 2.5e6]), st.integers(0, 6)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(_buckets, _buckets, st.sampled_from(["greater", "less", "two-sided"]))
def test_mann_whitney_from_counts_equals_the_expanded_values(
    a: list[tuple[float, int]], b: list[tuple[float, int]], alternative: str
) -> None:
    """Few distinct values, so heavy ties; repeated values across pairs, zero counts: the
    counts form gives the expanded form's statistic and p-value, bit for bit."""
    xs = [v for v, c in a for _ in range(c)]
    ys = [v for v, c in b for _ in range(c)]
    if not xs or not ys:
        with pytest.raises(ValueError, match="at least one value"):
            mann_whitney_u_counts(a, b)
        return
    got = mann_whitney_u_counts(a, b, alternative=alternative)  # type: ignore[arg-type]
    u, p = _expanded_mann_whitney(xs, ys, alternative)
    assert (got.u, got.p_value) == (u, p)
    assert (got.n_a, got.n_b) == (len(xs), len(ys))
    assert mann_whitney_u(xs, ys, alternative=alternative) == got  # type: ignore[arg-type]


def test_mann_whitney_from_counts_takes_counts_no_list_could_hold() -> None:
    import time

    started = time.perf_counter()
    slower = mann_whitney_u_counts(
        [(900.0, 2**40)], [(300.0, 2**40), (950.0, 1)], alternative="greater"
    )
    # Expanding 2**40 values would never finish; a second is room for any busy machine.
    assert time.perf_counter() - started < 1.0
    assert slower.n_a == 2**40 and slower.p_value < 1e-12
    # Scaling every count keeps the effect size (P(A > B)) and only sharpens the p-value.
    small = mann_whitney_u_counts([(1.0, 3), (5.0, 1)], [(2.0, 2), (5.0, 2)])
    large = mann_whitney_u_counts(
        [(1.0, 3 * 10**9), (5.0, 10**9)], [(2.0, 2 * 10**9), (5.0, 2 * 10**9)]
    )
    assert large.effect == pytest.approx(small.effect, rel=1e-9)
    with pytest.raises(ValueError, match="negative count"):
        mann_whitney_u_counts([(1.0, -1)], [(2.0, 1)])


def test_holm_known_values() -> None:
    # By hand: sorted 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → kept at 0.06.
    assert holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_adjusted([0.5, 0.9]) == [1.0, 1.0]
    assert holm_adjusted([]) == []
    with pytest.raises(ValueError):
        holm_adjusted([0.1, float("nan")])


def test_holm_holds_the_family_wise_error_rate() -> None:
    # 40 unchanged metrics per run, 2,000 runs: a run with any adjusted p < 0.05 is a false
    # alarm. Unadjusted, 1 − 0.95^40 ≈ 87 % of runs would have one; Holm keeps it near 5 %.
    rng = random.Random(7)
    alarms = raw_alarms = 0
    for _ in range(2000):
        ps = [rng.random() for _ in range(40)]
        alarms += any(p < 0.05 for p in holm_adjusted(ps))
        raw_alarms += any(p < 0.05 for p in ps)
    assert alarms / 2000 <= 0.065
    assert raw_alarms / 2000 > 0.8
