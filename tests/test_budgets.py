from __future__ import annotations

import dataclasses
import math
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_latency import units
from pytest_latency.budgets import (
    GOOD,
    OPS,
    TIME_UNITS,
    BudgetError,
    BudgetErrors,
    BudgetFile,
    Condition,
    Expectation,
    Op,
    load_budget_file,
    parse_budget_file,
    parse_expectation,
    parse_tolerance,
)
from pytest_latency.catalogue import METRICS, Dimension, Scope

SRC = "test_x.py::test_a marker"


def parse(text: str) -> Expectation:
    return parse_expectation(text, source=SRC)


def error_of(text: object) -> BudgetError:
    with pytest.raises(BudgetError) as info:
        parse_expectation(text, source=SRC)  # type: ignore[arg-type]
    return info.value


# -- valid expressions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "metric", "stat", "percentile", "op", "threshold", "unit"),
    [
        ("ttft.p95 < 400ms", "ttft", "p95", 95.0, "<", 400_000.0, "ms"),
        ("ttft.p50<=1s", "ttft", "p50", 50.0, "<=", 1_000_000.0, "s"),
        ("  e2e.p99.9   >=  2.5 s ", "e2e", "p99.9", 99.9, ">=", 2_500_000.0, "s"),
        ("itl.p99 < 30000us", "itl", "p99", 99.0, "<", 30_000.0, "us"),
        ("itl.p99 < 250µs", "itl", "p99", 99.0, "<", 250.0, "µs"),
        ("itl.p99 < 250μs", "itl", "p99", 99.0, "<", 250.0, "µs"),  # Greek mu, NFKC of µ
        ("tpot.mean < 1500ns", "tpot", "mean", None, "<", 1.5, "ns"),
        ("ttfb.min > 1e2ms", "ttfb", "min", None, ">", 100_000.0, "ms"),
        ("ttfo.p0.5 > .5ms", "ttfo", "p0.5", 0.5, ">", 500.0, "ms"),
        ("ttft.p99.99 < 3s", "ttft", "p99.99", 99.99, "<", 3_000_000.0, "s"),
        ("cache_read_ratio > 0.5", "cache_read_ratio", None, None, ">", 0.5, ""),
        ("cache_read_ratio > 50%", "cache_read_ratio", None, None, ">", 0.5, "%"),
        ("error_rate < 1%", "error_rate", None, None, "<", 0.01, "%"),
        ("error_rate <= 0", "error_rate", None, None, "<=", 0.0, ""),
        ("error_rate >= 100%", "error_rate", None, None, ">=", 1.0, "%"),
        ("retries <= 2", "retries", None, None, "<=", 2.0, ""),
        ("output_tokens.max < 1000 tok", "output_tokens", "max", None, "<", 1000.0, "tok"),
        ("input_tokens.p50 >= 1024", "input_tokens", "p50", 50.0, ">=", 1024.0, ""),
        ("calls.max <= 5", "calls", "max", None, "<=", 5.0, ""),
        ("ttft.p95\t<\n400 ms", "ttft", "p95", 95.0, "<", 400_000.0, "ms"),
        ("ttft.p95 <\u00a0400ms", "ttft", "p95", 95.0, "<", 400_000.0, "ms"),  # NBSP is space
    ],
)
def test_parses(
    text: str,
    metric: str,
    stat: str | None,
    percentile: float | None,
    op: str,
    threshold: float,
    unit: str,
) -> None:
    e = parse(text)
    assert (e.metric, e.stat, e.percentile, e.op, e.unit) == (metric, stat, percentile, op, unit)
    assert e.threshold == pytest.approx(threshold, rel=1e-12)
    assert e.text == text.strip()
    assert e.source == SRC
    assert e.filters == () and e.conditions == ()


def test_percent_and_fraction_are_the_same_budget() -> None:
    assert parse("cache_read_ratio > 0.5").threshold == parse("cache_read_ratio > 50%").threshold
    # Equality ignores the written unit only through the threshold: the unit is kept for display.
    assert parse("ttft.p95 < 0.4s").threshold == parse("ttft.p95 < 400ms").threshold


def test_filters_are_parsed_sorted_and_unquoted() -> None:
    e = parse('ttft{model=claude-haiku-4-5, endpoint="/v1/messages"}.p95 < 300ms')
    assert e.filters == (("endpoint", "/v1/messages"), ("model", "claude-haiku-4-5"))
    assert e.threshold == 300_000
    e = parse("ttft{endpoint=/v1/messages,model=x,}.p95 < 1s")
    assert e.filters == (("endpoint", "/v1/messages"), ("model", "x"))
    e = parse("error_rate{api='openai chat'} < 1%")
    assert e.filters == (("api", "openai chat"),)
    e = parse(r'ttft{model="a\"b"}.p95 < 1s')
    assert e.filters == (("model", 'a"b'),)


@pytest.mark.parametrize(
    "text",
    [
        "ttft{model=x, endpoint=/v1/messages}.p99.9 < 1s",
        'ttft{model="with space"}.p95 <= 250us',
        "good{model=m}(ttft < 400ms, tpot <= 50ms) >= 95%",
        "cache_read_ratio > 50%",
        "output_tokens.mean >= 12 tok",
    ],
)
def test_label_and_formatted_threshold_parse_back_to_the_same_budget(text: str) -> None:
    e = parse(text)
    assert parse(f"{e.label} {e.op} {e.format_value(e.threshold)}") == e


def test_expectations_compare_by_meaning_not_source() -> None:
    a = parse_expectation("ttft.p95 < 400ms", source="a")
    b = parse_expectation("ttft.p95 < 400ms", source="b")
    assert a == b and hash(a) == hash(b)
    assert a == parse("ttft.p95<400 ms")  # the text is kept for messages, not compared
    assert a != parse("ttft.p95 < 401ms")
    assert a != parse("ttft.p95 <= 400ms")
    assert a != parse("ttft{model=m}.p95 < 400ms")


def test_goodput() -> None:
    e = parse("good(ttft < 400ms, tpot < 50ms) >= 95%")
    assert e.metric == GOOD and e.is_goodput
    assert e.stat is None and e.percentile is None
    assert e.op == ">=" and e.threshold == pytest.approx(0.95)
    assert e.dimension is Dimension.RATIO
    assert e.conditions == (
        Condition("ttft < 400ms", "ttft", "<", 400_000.0, "ms"),
        Condition("tpot < 50ms", "tpot", "<", 50_000.0, "ms"),
    )
    assert e.good_call({"ttft": 399_999.0, "tpot": 10_000.0})
    assert not e.good_call({"ttft": 400_000.0, "tpot": 10_000.0})
    assert not e.good_call({"ttft": 1.0, "tpot": 50_000.0})
    # A one-token answer has no tpot; that alone does not make the call bad.
    assert e.good_call({"ttft": 1.0})
    assert parse("good{model=m}(e2e <= 2s,) > 0.9").filters == (("model", "m"),)
    assert parse("good(output_tokens >= 10 tok) > 0.5").conditions[0].threshold == 10
    with pytest.raises(ValueError, match="not a good"):
        parse("ttft.p95 < 1s").good_call({})


def test_good_is_not_a_catalogue_metric() -> None:
    assert GOOD not in METRICS


def test_holds_respects_each_operator_at_the_boundary() -> None:
    assert parse("ttft.p95 < 400ms").holds(399_999) and not parse("ttft.p95 < 400ms").holds(400_000)
    assert parse("ttft.p95 <= 400ms").holds(400_000) and not parse("ttft.p95 <= 400ms").holds(
        400_001
    )
    assert parse("error_rate > 1%").holds(0.011) and not parse("error_rate > 1%").holds(0.01)
    assert parse("error_rate >= 1%").holds(0.01) and not parse("error_rate >= 1%").holds(0.0099)


def test_a_ratio_never_rounds_onto_or_past_a_threshold() -> None:
    assert units.ratio(0.456) == "46%" and units.ratio(1.0) == "100%" and units.ratio(0.0) == "0%"
    # 0 % and 100 % are thresholds of every ratio; budgets add theirs, at their own precision.
    assert units.ratio(0.9996) == "99.96%" and units.ratio(0.0004) == "0.04%"
    assert units.ratio(0.9856, [0.995]) == "98.6%"  # as the budget's message says it
    assert units.ratio(0.9896, [0.99]) == "98.96%"  # whole percents would read "99%": met
    assert units.ratio(0.4237, [0.5]) == "42%"
    assert units.decimals_apart(399.96, [400.0], 0) == 2
    assert units.decimals_apart(400.0, [400.0], 0) == 0


def test_describe_renders_in_the_written_unit() -> None:
    e = parse("ttft.p95 < 400ms")
    assert e.describe(612_000, n=20) == "ttft.p95 = 612 ms > 400 ms (n=20)"
    assert e.describe(312_400) == "ttft.p95 = 312 ms < 400 ms"
    # At equality the relation shown is the one that holds and matters (issue #16: "calls.max
    # = 3 = 3" read as nonsense): the budget's own operator when met, its negation when missed.
    assert e.describe(400_000) == "ttft.p95 = 400 ms >= 400 ms"
    assert parse("calls.max <= 3").describe(3.0, n=5) == "calls.max = 3 <= 3 (n=5)"
    assert parse("calls.min >= 1").describe(1.0) == "calls.min = 1 >= 1"
    assert parse("calls.min > 1").describe(1.0) == "calls.min = 1 <= 1"
    # No rounding crosses the threshold: a value just under it is shown with the digits that say
    # so, and the threshold in full.
    assert e.describe(399_700) == "ttft.p95 = 399.7 ms < 400 ms"
    assert e.describe(400_040) == "ttft.p95 = 400.04 ms > 400 ms"
    assert parse("cache_read_ratio > 99.5%").describe(0.99499) == (
        "cache_read_ratio = 99.499% < 99.5%"
    )
    assert parse("cache_read_ratio >= 99%").describe(0.9896) == "cache_read_ratio = 98.96% < 99%"
    assert parse("ttft.p95 < 1234.5ms").describe(1_234_200) == "ttft.p95 = 1234.2 ms < 1234.5 ms"
    assert (
        e.describe(500_000, n=20, interval=(450_000, math.inf))
        == "ttft.p95 = 500 ms > 400 ms (n=20, interval 450 ms .. ∞)"
    )
    assert parse("e2e.p50 < 2s").describe(1_234_567) == "e2e.p50 = 1.23 s < 2 s"
    assert parse("itl.p99 < 30ms").describe(41_530) == "itl.p99 = 41.5 ms > 30 ms"
    assert parse("cache_read_ratio > 50%").describe(0.42) == "cache_read_ratio = 42% < 50%"
    assert parse("cache_read_ratio > 0.5").describe(0.42) == "cache_read_ratio = 0.42 < 0.5"
    assert parse("output_tokens.max < 100 tok").describe(120) == (
        "output_tokens.max = 120 tok > 100 tok"
    )
    assert parse("ttft{model=m}.p95 < 1s").describe(1e6).startswith("ttft{model=m}.p95 = 1 s")
    assert parse("good(ttft < 400ms) >= 95%").describe(0.9, n=20) == (
        "good(ttft < 400 ms) = 90% < 95% (n=20)"
    )
    assert parse("ttft.p95 < 400ms").describe(math.nan) == "ttft.p95 = nan ? 400 ms"


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragments", "column"),
    [
        ("", ["empty expression", "ttft", "cache_read_ratio"], None),
        ("   ", ["empty expression"], None),
        ("ttf.p95 < 400ms", ["unknown metric 'ttf'", "did you mean 'ttft'", "error_rate"], 1),
        ("TTFT.p95 < 400ms", ["lower case", "'ttft'"], 1),
        ("e2el.p95 < 1s", ["did you mean e2e"], 1),
        ("inter_token_latency.p50 < 1s", ["tpot (per call) or itl (per chunk)"], 1),
        ("ttft < 400ms", ["needs a statistic", "'ttft.p95'", "p99.9", "mean"], 6),
        ("ttft.p96x < 1s", ["unknown statistic 'p96x'", "p50, p90"], 6),
        ("ttft.median < 1s", ["did you mean 'p50'"], 6),
        ("ttft.avg < 1s", ["did you mean 'mean'"], 6),
        ("ttft.P95 < 1s", ["did you mean 'p95'"], 6),
        ("ttft.p(95) < 1s", ["not p(95)"], 6),
        ("ttft.p100 < 1s", ["write 'max'"], 6),
        ("ttft.p0 < 1s", ["write 'min'"], 6),
        ("ttft.p05 < 1s", ["leading zeros"], 6),
        ("ttft.p100.5 < 1s", ["out of range"], 6),
        ("ttft. < 1s", ["statistic"], 7),
        ("error_rate.p95 < 1%", ["aggregate", "takes no statistic", "'error_rate < 1%'"], 11),
        ("ttft.p95 400ms", ["missing comparison operator", "<, <=, >, >="], 10),
        ("ttft.p95", ["comparison operator", "ends here"], 9),
        ("ttft.p95 == 400ms", ["equality budgets are not supported"], 10),
        ("ttft.p95 = 400ms", ["equality"], 10),
        ("ttft.p95 != 400ms", ["inequality"], 10),
        ("ttft.p95 =< 400ms", ["write <= instead"], 10),
        ("ttft.p95 => 400ms", ["write >= instead"], 10),
        ("ttft.p95 <> 400ms", ["not an operator"], 10),
        ("ttft.p95 <", ["expected a number", "ends here"], 11),
        ("ttft.p95 < ms", ["expected a number, found 'ms'"], 12),
        ("ttft.p95 < 400", ["is a time", "unit", "ns, us, µs, ms, s", "'400ms'"], 15),
        ("ttft.p95 < 400 mz", ["unknown unit 'mz'", "did you mean 'ms'", "ns, us, µs, ms, s"], 16),
        ("ttft.p95 < 40%", ["'%' does not fit ttft", "time"], 14),
        ("ttft.p95 < 40 tok", ["'tok' does not fit ttft"], 15),
        ("cache_read_ratio > 0.5ms", ["'ms' does not fit cache_read_ratio", "0..1"], 23),
        ("cache_read_ratio > 50", ["ratio 0..1", "did you mean 50%"], 20),
        ("error_rate < 150%", ["150% is over 100%"], 14),
        ("calls.max < 3 tok", ["'tok' does not fit calls", "bare number"], 15),
        ("output_tokens.max < 3 ms", ["'ms' does not fit output_tokens", "tok"], 23),
        ("ttft.p95 < nan ms", ["finite number", "'nan'"], 12),
        ("ttft.p95 < inf", ["finite number"], 12),
        ("ttft.p95 < 1e999s", ["too large"], 12),
        ("ttft.p95 < 1e20s", ["absurdly large", "1e12"], 12),
        ("input_tokens.max < 1e13", ["absurdly large"], 20),
        ("ttft.p95 < -4ms", ["cannot be negative"], 12),
        ("ttft.p95 < +4ms", ["without a sign"], 12),
        ("ttft.p95 < 4.ms", ["digits after the decimal point"], 12),
        ("ttft.p95 < 4ems", ["malformed exponent"], 13),
        ("ttft.p95 < 1_000ms", ["digit separators"], 13),
        ("ttft.p95 < 1,5ms", ["decimal point, not a comma"], 13),
        ("ttft.p95 < 0ms", ["can never hold"], 12),
        ("cache_read_ratio > 100%", ["can never hold"], 20),
        ("ttft.p95 < 400ms, tpot.p50 < 40ms", ["one expression per string"], 17),
        ("ttft.p95 < 400ms junk", ["unexpected text after the expression"], 18),
        ("ttft.p95 < 400ms )", ["unexpected text after the expression"], 18),
        ("ttft{}.p95 < 1s", ["empty filter", "api, concurrency, endpoint, model, rate"], 5),
        (
            "ttft{foo=x}.p95 < 1s",
            ["unknown filter key 'foo'", "api, concurrency, endpoint, model, rate"],
            6,
        ),
        ("ttft{modle=x}.p95 < 1s", ["did you mean 'model'"], 6),
        ("ttft{model=x,model=y}.p95 < 1s", ["given twice"], 14),
        ("ttft{model:x}.p95 < 1s", ["write model=value"], 11),
        ("ttft{model}.p95 < 1s", ["'='"], 11),
        ("ttft{model=}.p95 < 1s", ["a value for filter 'model'"], 12),
        ("ttft{model=''}.p95 < 1s", ["empty value"], 12),
        ('ttft{model="x}.p95 < 1s', ["unterminated"], 12),
        ("ttft{model=x.p95 < 1s", ["',' or '}'"], 18),
        ("ttft.p95{model=x} < 1s", ["filters go before the statistic"], 9),
        ("good(ttft < 400ms) >= 95", ["did you mean 95%"], 23),
        ("good(ttft < 400ms) >= 95ms", ["'ms' does not fit good(...)"], 25),
        ("good() > 0.9", ["at least one condition"], 5),
        ("good(itl < 3ms) > 0.9", ["per call", "itl is per chunk", "tpot"], 6),
        ("good(calls < 3) > 0.9", ["calls is per sample"], 6),
        ("good(error_rate < 1%) > 0.9", ["error_rate is per aggregate"], 6),
        ("good(ttft.p95 < 3ms) > 0.9", ["take no statistic"], 10),
        ("good(ttft{model=x} < 3ms) > 0.9", ["put filters on good itself"], 10),
        ("good(good(ttft < 1s) > 0.5) > 0.5", ["cannot be nested"], 6),
        ("good(ttft < 3ms).p95 > 0.9", ["takes no statistic"], 17),
        ("good(ttft < 3ms", ["',' or ')'", "ends here"], 16),
        ("good ttft < 3ms", ["'(' after good"], 6),
        ("ttft.p95 ≤ 400ms", ["U+2264", "did you mean '<='", "ASCII"], 10),
        ("ttft.p95 ＜ 400ms", ["FULLWIDTH LESS-THAN SIGN", "did you mean '<'"], 10),
        ("ttft.р95 < 400ms", ["CYRILLIC SMALL LETTER ER", "did you mean 'p'"], 6),
        ("ttfт.p95 < 400ms", ["CYRILLIC SMALL LETTER TE"], 4),
        ("ttft.p95 < ４00ms", ["FULLWIDTH DIGIT FOUR", "did you mean '4'"], 12),
        ("ttft.p95 < ٤00ms", ["ARABIC-INDIC DIGIT FOUR", "did you mean '4'"], 12),
        ("ttft.p95 < 400ms\u200b", ["ZERO WIDTH SPACE"], 17),
        ("ttft.p95 < 400\x00ms", ["control character", "U+0000"], 15),
        ("ttft.p95 < 400 ms\x07", ["U+0007"], 18),
        ("ttft.p95 < \u2212400ms", ["MINUS SIGN", "did you mean '-'"], 12),
        ("ttft{model=c\u2013x}.p95 < 1s", ["EN DASH"], 13),
        ("4ttft.p95 < 1s", ["expected a metric name, found '4ttft.p95'"], 1),
    ],
)
def test_errors_say_what_and_where(text: str, fragments: list[str], column: int | None) -> None:
    err = error_of(text)
    message = str(err)
    first = message.splitlines()[0]
    assert first.startswith(f"{SRC}: bad latency budget ")
    if text.isprintable():
        assert f"'{text}'" in first  # the expression is quoted as written
    for fragment in fragments:
        assert fragment in first, (fragment, first)
    assert err.column == column
    assert err.source == SRC and err.text == text
    if column is not None:
        # The expression is echoed with a caret under the bad column.
        echo, caret = message.splitlines()[1:3]
        assert caret.index("^") == echo.index(echo.strip()[0]) + column - 1


@pytest.mark.parametrize("value", [None, 400, 4.0, b"ttft.p95 < 1s", ["ttft.p95 < 1s"]])
def test_non_strings_are_budget_errors(value: object) -> None:
    err = error_of(value)
    assert isinstance(err, ValueError)
    assert str(err).startswith(f"{SRC}: a budget expression must be a string")
    assert type(value).__name__ in str(err)


def test_overlong_expression_is_rejected() -> None:
    assert "limit is 1000" in str(error_of("ttft.p95 < 1s" + " " * 2000))


def test_error_echo_is_cut_around_the_column_for_long_text() -> None:
    text = "ttft{model=" + "x" * 300 + "}.p95 < 400 mz"
    echo, caret = str(error_of(text)).splitlines()[1:3]
    assert len(echo) < 120
    assert echo[caret.index("^") :].startswith("mz")


def test_budget_error_pickles() -> None:
    err = error_of("ttft.p95 < 400 mz")
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, BudgetError)
    assert str(again) == str(err) and again.column == err.column


def test_every_catalogue_metric_is_accepted() -> None:
    for spec in METRICS.values():
        stat = ".p95" if spec.takes_stat else ""
        number = {
            Dimension.TIME: "1s",
            Dimension.RATIO: "50%",
            Dimension.TOKENS: "10 tok",
            Dimension.COUNT: "3",
            Dimension.MONEY: "$0.01",
        }[spec.dimension]
        e = parse(f"{spec.name}{stat} < {number}")
        assert e.metric == spec.name
        assert (e.stat is None) is (spec.scope is Scope.AGGREGATE)


# -- fuzzing ----------------------------------------------------------------------------------

SOUP = [
    *METRICS,
    "good",
    "ttft",
    ".",
    "p95",
    "p99.9",
    "p0",
    "p100",
    "min",
    "max",
    "mean",
    "{",
    "}",
    "model",
    "endpoint",
    "api",
    "=",
    ",",
    "(",
    ")",
    "<",
    "<=",
    ">",
    ">=",
    "==",
    "400",
    "0.5",
    ".5",
    "1e3",
    "1e999",
    "-",
    "+",
    "ms",
    "µs",
    "μs",
    "s",
    "%",
    "tok",
    "nan",
    "inf",
    '"',
    "'",
    "\\",
    " ",
    "\t",
    "≤",
    "р",
    "\x00",
    "\u200b",
    "_",
]


def _parse_or_budget_error(text: str) -> None:
    try:
        e = parse(text)
    except BudgetError as err:
        assert str(err).startswith(SRC)
        assert err.text == text
        return
    # Whatever parses is internally consistent.
    assert math.isfinite(e.threshold) and e.threshold >= 0
    assert e.op in ("<", "<=", ">", ">=")
    assert e.describe(e.threshold)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_text_only_raises_budget_error(text: str) -> None:
    _parse_or_budget_error(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(SOUP), max_size=14), st.booleans())
def test_token_soup_only_raises_budget_error(tokens: list[str], spaced: bool) -> None:
    _parse_or_budget_error((" " if spaced else "").join(tokens))


_DISTRIBUTIONS = sorted(name for name, spec in METRICS.items() if spec.takes_stat)
_AGGREGATES = sorted(name for name, spec in METRICS.items() if not spec.takes_stat)


@st.composite
def valid_expressions(draw: st.DrawFn) -> tuple[str, Expectation]:
    """A random valid expression and the Expectation it must parse to."""
    metric = draw(st.sampled_from(_DISTRIBUTIONS + _AGGREGATES))
    spec = METRICS[metric]
    op: Op = draw(st.sampled_from(OPS))
    ws = st.sampled_from(["", " ", "  "])
    stat_text, stat, percentile = "", None, None
    if spec.takes_stat:
        choice = draw(st.sampled_from(["p", "min", "max", "mean"]))
        if choice == "p":
            whole = draw(st.integers(1, 99))
            frac = draw(st.sampled_from(["", ".5", ".9", ".99", ".25"]))
            stat = f"p{whole}{frac}"
            percentile = float(f"{whole}{frac}")
        else:
            stat = choice
        stat_text = f".{stat}"
    filters: dict[str, str] = draw(
        st.dictionaries(
            st.sampled_from(["model", "endpoint", "api"]),
            st.text(alphabet="abcxyz0123-/._:", min_size=1, max_size=8),
            max_size=3 if spec.filterable else 0,
        )
    )
    filter_text = ""
    if filters:
        filter_text = "{" + ",".join(f"{k}={v}" for k, v in filters.items()) + "}"
    if spec.dimension is Dimension.TIME:
        unit = draw(st.sampled_from(sorted(TIME_UNITS)))
        number = draw(st.integers(1, 10**6))
        base = number * TIME_UNITS[unit]
        shown = "µs" if unit in ("\u00b5s", "\u03bcs") else unit
    elif spec.dimension is Dimension.RATIO:
        unit = shown = draw(st.sampled_from(["", "%"]))
        number = draw(st.integers(1, 99))
        if not unit:
            number_text = f"0.{number:02d}"
            base = number / 100
        else:
            base = number / 100
    elif spec.dimension is Dimension.MONEY:
        unit = shown = "usd"
        number = draw(st.integers(1, 10**5))
        base = number * 1e6
    else:
        unit = shown = "tok" if spec.dimension is Dimension.TOKENS and draw(st.booleans()) else ""
        number = draw(st.integers(1, 10**9))
        base = float(number)
    if not (spec.dimension is Dimension.RATIO and not unit):
        number_text = str(number)
    text = (
        f"{draw(ws)}{metric}{filter_text}{stat_text}{draw(ws)}{op}{draw(ws)}"
        f"{number_text}{draw(ws)}{unit}{draw(ws)}"
    )
    expected = Expectation(
        text=text.strip(),
        metric=metric,
        stat=stat,
        percentile=percentile,
        op=op,
        threshold=base,
        filters=tuple(sorted(filters.items())),
        unit=shown,
    )
    return text, expected


@settings(max_examples=300, deadline=None)
@given(valid_expressions())
def test_valid_expressions_parse_to_the_right_threshold(case: tuple[str, Expectation]) -> None:
    text, expected = case
    got = parse(text)
    assert got.threshold == pytest.approx(expected.threshold, rel=1e-12)
    assert got == dataclasses.replace(expected, threshold=got.threshold)
    assert got.text == text.strip()


# -- budgets.toml -----------------------------------------------------------------------------

GOOD_TOML = """\
# budgets for the chat suite
[defaults]
samples = 20
warmup = 1
max_samples = 100

[[budget]]
select = "tests/chat/*"
expect = ["ttft.p95 < 400ms", "tpot.p50 < 40ms"]

[[budget]]
marker = "agent"
expect = [
    "calls.max <= 8",
    "good(ttft < 1s) >= 90%",
]

[session]
expect = ["error_rate < 1%", "ttft.p99 < 2s"]
"""


def test_loads_a_budget_file(tmp_path: Path) -> None:
    path = tmp_path / "budgets.toml"
    path.write_text(GOOD_TOML, encoding="utf-8")
    f = load_budget_file(path)
    assert isinstance(f, BudgetFile)
    assert (f.defaults.samples, f.defaults.warmup, f.defaults.max_samples) == (20, 1, 100)
    assert [r.select for r in f.rules] == ["tests/chat/*", None]
    assert [r.marker for r in f.rules] == [None, "agent"]
    assert [e.text for e in f.rules[0].expectations] == ["ttft.p95 < 400ms", "tpot.p50 < 40ms"]
    assert f.rules[0].expectations[0].source == f"{path}:9"
    assert f.rules[1].expectations[1].source == f"{path}:15"
    assert f.rules[1].source == f"{path}:11"
    assert [e.metric for e in f.session] == ["error_rate", "ttft"]
    assert f.session[0].source == f"{path}:19"


def test_rule_selection_by_glob_and_marker() -> None:
    f = parse_budget_file(GOOD_TOML, path="budgets.toml")
    chat, agent = f.rules
    assert chat.selects("tests/chat/test_a.py::test_x")
    assert chat.selects("tests/chat/test_a.py::TestA::test_x[param]")
    assert not chat.selects("tests/other/test_a.py::test_x")
    assert not chat.selects("Tests/chat/test_a.py::test_x")  # node ids are case-sensitive
    assert agent.selects("tests/any.py::test_y", ["agent", "slow"])
    assert not agent.selects("tests/any.py::test_y", ["slow"])
    assert f.rules_for("tests/chat/t.py::test", ["agent"]) == (chat, agent)
    both = parse_budget_file(
        '[[budget]]\nselect = "tests/chat/t.py"\nmarker = "m"\nexpect = "ttft.p95 < 1s"\n',
        path="b.toml",
    ).rules[0]
    assert both.selects("tests/chat/t.py::test_a", ["m"])  # a file path selects its tests
    assert not both.selects("tests/chat/t.py::test_a", [])


def test_split_is_read_from_defaults_and_from_each_rule() -> None:
    loaded = parse_budget_file(
        "[defaults]\nsplit = true\n[[budget]]\nselect = 'a'\nexpect = 'ttft.p95 < 1s'\n"
        "split = false\n[[budget]]\nselect = 'b'\nexpect = 'ttft.p95 < 1s'\n",
        path="b.toml",
    )
    assert loaded.defaults.split is True
    assert [r.split for r in loaded.rules] == [False, None]  # None: the rule does not say
    assert loaded.splits
    assert not parse_budget_file("[defaults]\nsplit = false\n", path="b.toml").splits
    assert not parse_budget_file(GOOD_TOML, path="b.toml").splits


def test_empty_file_is_valid() -> None:
    f = parse_budget_file("", path="b.toml")
    assert f.rules == () and f.session == () and f.defaults.samples is None


@pytest.mark.parametrize(
    ("toml", "line", "fragments"),
    [
        (
            "[defaults]\nsamples = 20\n\n[[budget]]\nselect = 'x'\nexpect = ['ttft.p95 < 400']\n",
            6,
            ["'ttft.p95 < 400'", "unit"],
        ),
        ("[defaults]\nsampels = 20\n", 2, ["unknown key in [defaults] 'sampels'", "'samples'"]),
        ("[defaults]\nsamples = 0\n", 2, ["samples must be an integer >= 1"]),
        ("[defaults]\nwarmup = -1\n", 2, ["warmup must be an integer >= 0"]),
        ("[defaults]\nsamples = true\n", 2, ["integer"]),
        ("[defaults]\nsamples = 2.5\n", 2, ["integer"]),
        ("[defaults]\nsamples = 1000000000\n", 2, ["over the limit"]),
        ("[defaults]\nsamples = 20\nmax_samples = 10\n", 3, ["below samples"]),
        ("\n[budgets]\nx = 1\n", 2, ["unknown top-level table 'budgets'", "did you mean 'budget'"]),
        ("[[budget]]\nexpect = ['ttft.p95 < 1s']\n", 1, ["needs 'select'", "'marker'"]),
        ("[[budget]]\nselect = 'a'\n", 1, ["needs 'expect"]),
        ("[[budget]]\nselect = 'a'\nexpect = []\n", 3, ["'expect' is empty"]),
        ("[[budget]]\nselect = 'a'\nexpect = 3\n", 3, ["list of strings"]),
        ("[[budget]]\nselect = 'a'\nexpect = [3]\n", 3, ["must be a string"]),
        ("[[budget]]\nselect = ''\nexpect = ['ttft.p95 < 1s']\n", 2, ["non-empty string"]),
        ("[[budget]]\nmarker = 'a b'\nexpect = ['ttft.p95 < 1s']\n", 2, ["marker name"]),
        (
            "[[budget]]\nselect = 'a'\nexpect = ['ttft.p95 < 1s']\nsamples = 3\n",
            4,
            ["unknown key in [[budget]] 'samples'"],
        ),
        (
            "[[budget]]\nselect = 'a'\nexpect = ['ttft.p95 < 1s']\n\n[[budget]]\nselect = 'b'\n"
            "expect = ['ttft.p95 < 1s', 'e2e < 1s']\n",
            7,
            ["needs a statistic"],
        ),
        ("[session]\nexpect = ['error_rate < 1%']\nfoo = 1\n", 3, ["unknown key in [session]"]),
        # A load key in [session] would judge nothing while looking like it did.
        (
            "[session]\nexpect = ['error_rate < 1%']\nconcurrency = 16\n",
            3,
            ["'concurrency' shapes how a test's samples run", "[defaults] or a [[budget]]"],
        ),
        # `split` is a bool, of [defaults] and [[budget]] as the load keys are.
        ("[session]\nexpect = ['error_rate < 1%']\nsplit = true\n", 3, ["'split' shapes how"]),
        ("[defaults]\nsamples = 4\nsplit = 'yes'\n", 3, ["split must be true or false"]),
        ("[[budget]]\nselect = 'a'\nexpect = ['ttft.p95 < 1s']\nsplit = 1\n", 4, ["got 1"]),
        ("split = true\n", 1, ["'split' is a key of [defaults] or of a [[budget]] rule"]),
        (
            '[session]\nexpect = [\n  "ttft.p95 < 400ms",\n  "ttft.p95 < 400",\n]\n',
            4,
            ["'ttft.p95 < 400'", "unit"],
        ),
        ("budget = 3\n", 1, ["array of tables"]),
        ("defaults = 3\n", 1, ["must be a table"]),
        ("session = 3\n", 1, ["must be a table"]),
        ("[defaults]\nsamples = 20\nsamples = 30\n", 3, ["invalid TOML"]),
        ("[[budget]\n", 1, ["invalid TOML"]),
        # Lines the old line scan could not find: inline tables, dotted keys, sub-tables,
        # comments that quote a key, arrays of tables after the first, values left open.
        ("\n\ndefaults = { warmup = 1, samples = 0 }\n", 3, ["samples must be an integer"]),
        ("[defaults]\nwarmup = 1\n\n[defaults.extra]\n", 4, ["unknown key in [defaults]"]),
        ("# header\nbudget.select = 'x'\n", 2, ["array of tables"]),
        ("\ndefaults.samples = 0\n", 2, ["samples must be an integer"]),
        (
            "[[budget]]\nselect = 'a'\nexpect = ['ttft.p95 < 1s']\n[[budget]]\n"
            "select = 'b' # expect = ['e2e.p95 < 1']\nexpect = ['e2e.p95 < 1']\n",
            6,
            ["give the threshold a unit"],
        ),
        (
            "[session]\nexpect = [\n  # 'ttft.p95 < 1'\n  'e2e.p95 < 1s',\n  'ttft.p95 < 1',\n]\n",
            5,
            ["give the threshold a unit"],
        ),
        ("[session]\nexpect = { a = 'ttft.p95 < 1s' }\n", 2, ["list of strings"]),
        (
            "[session]\nexpect = ['e2e.p95 < 1s',\n  'ttft.p95 < 1s',\n",
            2,
            ["array opened on line 2"],
        ),
        ('[session]\nexpect = ["""ttft.p95 < 1s\n\n', 2, ["string opened on line 2"]),
        # tomllib reads a one-line 'literal' up to the next ' in the text, so it fails at the end.
        ("[session]\nexpect = ['e2e.p95 < 1s]\n\n", 2, ["string opened on line 2"]),
        ("[session]\nexpect = [\n  'e2e.p95 < 1s',\n  'ttft.p95 < 1s,\n]\n", 4, ["string opened"]),
        ("[session]\nexpect = ['e2e.p95 < 1s']\nx = 1", 3, ["unknown key in [session]"]),
        # Keys above the first header are top-level: say where they belong.
        ("samples = 20\n", 1, ["'samples' is a key of [defaults]", "[defaults] header"]),
        ("\nmax_samples = 200\n[defaults]\n", 2, ["'max_samples' is a key of [defaults]"]),
        ("select = 'x'\n", 1, ["'select' is a key of a [[budget]] rule"]),
        # [session] and [[budget]] hold 'expect' to the same rules.
        ("[session]\nexpect = []\n", 2, ["'expect' is empty", "[session]"]),
        ("[session]\n", 1, ["a [session] needs 'expect"]),
        ("[session]\nexpect = 3\n", 2, ["list of strings"]),
        # The same budget twice in one rule (by meaning) names both lines.
        (
            "[[budget]]\nselect = 'a'\nexpect = [\n  'ttft.p95 < 400ms',\n  'ttft.p95<0.4s',\n]\n",
            5,
            ["same budget twice", "'ttft.p95 < 400ms' (line 4)", "'ttft.p95<0.4s' (line 5)"],
        ),
        ("[session]\nexpect = ['error_rate < 1%',\n'error_rate<1%']\n", 3, ["(line 2) and"]),
    ],
)
def test_budget_file_errors_name_file_and_line(toml: str, line: int, fragments: list[str]) -> None:
    with pytest.raises(BudgetError) as info:
        parse_budget_file(toml, path="budgets.toml")
    message = str(info.value)
    assert message.startswith(f"budgets.toml:{line}: "), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_unreadable_budget_file(tmp_path: Path) -> None:
    with pytest.raises(BudgetError, match="cannot read budget file"):
        load_budget_file(tmp_path / "missing.toml")
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"# caf\xe9\n")
    with pytest.raises(BudgetError, match="not UTF-8"):
        load_budget_file(bad)


def test_budget_file_not_utf8_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"[session]\n# caf\xe9\nexpect = ['e2e.p95 < 1s']\n")
    with pytest.raises(BudgetError, match=r"latin1\.toml:2: budget file is not UTF-8"):
        load_budget_file(bad)
    utf16 = tmp_path / "utf16.toml"
    utf16.write_bytes("[session]\nexpect = ['e2e.p95 < 1s']\n".encode("utf-16"))
    with pytest.raises(BudgetError, match=r"utf16\.toml:1: .*UTF-16 byte-order mark"):
        load_budget_file(utf16)


def test_a_utf8_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(
        b"\xef\xbb\xbf[defaults]\nsamples = 5\n\n[session]\nexpect = ['e2e.p95 < 1s']\n"
    )
    loaded = load_budget_file(path)
    assert loaded.defaults.samples == 5 and len(loaded.session) == 1
    loaded = parse_budget_file("\ufeff[session]\nexpect = ['e2e.p95 < 1s']\n", path="b.toml")
    assert len(loaded.session) == 1


def test_the_same_budget_in_two_rules_is_fine() -> None:
    loaded = parse_budget_file(
        "[[budget]]\nselect = 'a'\nexpect = ['ttft.p95 < 1s']\n"
        "[[budget]]\nselect = 'b'\nexpect = ['ttft.p95 < 1s', 'ttft.p99 < 1s']\n"
        "[session]\nexpect = ['ttft.p95 < 1s']\n",
        path="b.toml",
    )
    assert [len(r.expectations) for r in loaded.rules] == [1, 2]
    assert loaded.rules[1].source == "b.toml:4"


def test_a_file_without_session_has_no_session_budgets() -> None:
    loaded = parse_budget_file("[[budget]]\nselect = 'a'\nexpect = ['ttft.p95 < 1s']\n", path="b")
    assert loaded.session == ()


# Issue #16: an unknown table on line 6 was the only error reported, though a typo on line 2
# came first; every mistake of the file is reported, in file order, each with its own line.
_MANY_ERRORS = """\
[defaults]
sampels = 20

[[budget]]
select = "tests/*"
expect = ["ttft.p95 < 400ms", "tft.p50 < 1s", "e2e.p95 < 2"]
[budgets]
x = 1

[session]
expect = ["error_rate < 1%", "error_rate<1%"]
selec = 3
"""


def test_every_error_of_a_budget_file_is_reported_in_file_order() -> None:
    with pytest.raises(BudgetErrors) as info:
        parse_budget_file(_MANY_ERRORS, path="budgets.toml")
    errors = info.value.errors
    assert [e.source for e in errors] == [
        "budgets.toml:2",
        "budgets.toml:6",
        "budgets.toml:6",
        "budgets.toml:7",
        "budgets.toml:11",
        "budgets.toml:12",
    ]
    assert [e.reason.split(";")[0] for e in errors] == [
        "unknown key in [defaults] 'sampels'",
        "unknown metric 'tft'",
        "e2e is a time",
        "unknown top-level table 'budgets'",
        "'expect' of this [session] gives the same budget twice: 'error_rate < 1%' (line 11) "
        "and 'error_rate<1%' (line 11)",
        "unknown key in [session] 'selec'",
    ]
    message = str(info.value)
    # Each error's message, one after another, each starting with its file:line.
    assert message == "\n".join(str(e) for e in errors)
    assert message.startswith("budgets.toml:2: unknown key in [defaults] 'sampels'")
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is BudgetErrors and str(back) == message


def test_a_misspelled_key_is_one_error_not_also_the_missing_one() -> None:
    # `markers` for `marker`, `expects` for `expect`: the missing key is that same mistake.
    with pytest.raises(BudgetError) as info:
        parse_budget_file("[[budget]]\nmarkers = 'a'\nexpects = ['ttft.p95 < 1s']\n", path="b")
    assert type(info.value) is BudgetErrors
    assert [e.source for e in info.value.errors] == ["b:2", "b:3"]
    assert "needs" not in str(info.value)


# ---- lines: every rule and expression names the line it is written on ---------------------------

_EXPRESSIONS = ["ttft.p95 < 400ms", "tpot.p50 < 40ms", "e2e.max <= 2s", "itl.p99 < 50ms"]
# Comments that quote TOML syntax: a line scan that reads them as keys would miscount.
_COMMENTS = ["", "  # expect = ['e2e.p95 < 1s']", ' # [[budget]] ] } "', "\t# 'quoted' \"\"\" '''"]
_QUOTES = ['"{}"', "'{}'", '"""{}"""', "'''{}'''"]


@st.composite
def _layout(draw: st.DrawFn) -> tuple[str, list[int], list[list[int]]]:
    """A valid budgets.toml with varied layout, the line of each [[budget]] header and the line
    of each expression of each rule (the last "rule" is [session])."""
    lines: list[str] = []
    headers: list[int] = []
    expressions: list[list[int]] = []

    def filler() -> None:
        for _ in range(draw(st.integers(0, 2))):
            lines.append(draw(st.sampled_from(["", "# a comment", "   ", "# expect = ['x'"])))

    def quoted(text: str) -> str:
        return draw(st.sampled_from(_QUOTES)).format(text)

    count, with_session = draw(st.integers(1, 3)), draw(st.booleans())
    for rule in range(count + with_session):
        session = rule == count
        filler()
        lines.append(("[session]" if session else "[[budget]]") + draw(st.sampled_from(_COMMENTS)))
        headers.append(len(lines))
        if not session:
            lines.append(f"select = {quoted('tests/*')}" + draw(st.sampled_from(_COMMENTS)))
        filler()
        chosen = draw(st.lists(st.sampled_from(_EXPRESSIONS), min_size=1, max_size=4, unique=True))
        at: list[int] = []
        if draw(st.booleans()):
            lines.append(f"expect = [{', '.join(quoted(e) for e in chosen)}]")
            at = [len(lines)] * len(chosen)
        else:
            lines.append("expect = [" + draw(st.sampled_from(_COMMENTS)))
            for text in chosen:
                filler()
                lines.append(f"    {quoted(text)}," + draw(st.sampled_from(_COMMENTS)))
                at.append(len(lines))
            lines.append("]")
        expressions.append(at)
    return "\n".join(lines) + "\n", headers, expressions


@settings(max_examples=300, deadline=None)
@given(layout=_layout())
def test_every_rule_and_expression_names_its_own_line(
    layout: tuple[str, list[int], list[list[int]]],
) -> None:
    text, headers, expressions = layout
    loaded = parse_budget_file(text, path="b.toml")
    rules = [(r.source, [e.source for e in r.expectations]) for r in loaded.rules]
    if loaded.session:
        rules.append(("b.toml:" + str(headers[-1]), [e.source for e in loaded.session]))
    assert rules == [
        (f"b.toml:{h}", [f"b.toml:{n}" for n in at])
        for h, at in zip(headers, expressions, strict=True)
    ], text


# ---- tolerance -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("10%", 0.10), ("0.1", 0.10), (" 25% ", 0.25), ("0", 0.0), ("0%", 0.0), ("999%", 9.99)],
)
def test_parse_tolerance(text: str, value: float) -> None:
    assert parse_tolerance(text) == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("lots", "expected a number or a percentage such as 10%"),
        ("%", "expected a number or a percentage such as 10%"),
        ("", "expected a number or a percentage such as 10%"),
        ("10 %%", "expected a number or a percentage such as 10%"),
        ("-1%", "must be between 0% and 1000%"),
        ("1000%", "must be between 0% and 1000%"),
        ("10", "must be between 0% and 1000%"),
        ("nan", "must be between 0% and 1000%"),
        ("inf%", "must be between 0% and 1000%"),
    ],
)
def test_parse_tolerance_rejects(text: str, reason: str) -> None:
    with pytest.raises(BudgetError) as info:
        parse_tolerance(text)
    assert info.value.reason == reason and str(info.value) == reason


# ---- turn: the wall time of one sample -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "stat", "threshold", "shown"),
    [
        ("turn.p90 < 2s", "p90", 2_000_000.0, "2 s"),
        ("turn.max <= 1500ms", "max", 1_500_000.0, "1500 ms"),
        ("turn.mean < 250 ms", "mean", 250_000.0, "250 ms"),
        ("turn.p99.9 < 3s", "p99.9", 3_000_000.0, "3 s"),
    ],
)
def test_turn_is_a_time_budget_with_a_stat(
    text: str, stat: str, threshold: float, shown: str
) -> None:
    got = parse(text)
    assert (got.metric, got.stat, got.threshold) == ("turn", stat, threshold)
    assert METRICS["turn"].scope is Scope.SAMPLE and METRICS["turn"].dimension is Dimension.TIME
    # Its verdicts speak its author's unit, like every time budget's.
    assert got.format_value(threshold) == shown


@pytest.mark.parametrize(
    ("text", "fragments", "column"),
    [
        # Filters select calls; a turn is a whole sample's.
        ("turn{model=x}.p90 < 2s", ["turn is the wall time of one sample", "no filter"], 5),
        # good(...) judges each call: a turn condition is a clear error that says what to write.
        (
            "good(turn < 2s) >= 90%",
            ["conditions are per call", "turn is per sample", "'turn.p90 ...'", "ttft"],
            6,
        ),
        ("good(ttft < 1s, turn < 2s) >= 90%", ["turn is per sample"], 17),
        ("turn < 2s", ["needs a statistic", "'turn.p95'"], 6),
        ("turn.p90 < 2", ["turn is a time", "unit"], 13),
        ("turn.p90 < 2 tok", ["'tok' does not fit turn"], 14),
        ("turn.p90 < 50%", ["'%' does not fit turn"], 14),
    ],
)
def test_turn_budget_errors(text: str, fragments: list[str], column: int) -> None:
    with pytest.raises(BudgetError) as info:
        parse(text)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert f"(column {column})" in message, message


def test_turn_budgets_in_a_budget_file_name_their_line() -> None:
    text = (
        "[[budget]]\nmarker = 'agent'\nexpect = ['calls.max <= 4', 'turn.p90 < 250ms']\n\n"
        "[session]\nexpect = ['turn.p99 < 2s']\n"
    )
    f = parse_budget_file(text, path="budgets.toml")
    assert [e.text for e in f.rules[0].expectations] == ["calls.max <= 4", "turn.p90 < 250ms"]
    assert [(e.metric, e.threshold) for e in f.session] == [("turn", 2_000_000.0)]
    with pytest.raises(BudgetError) as info:
        parse_budget_file(
            "[[budget]]\nselect = 'a'\nexpect = [\n  'turn.p90 < 2s',\n"
            "  'turn{api=x}.p90 < 2s',\n]\n",
            path="budgets.toml",
        )
    assert str(info.value).startswith("budgets.toml:5: "), info.value
    assert "takes no filter" in str(info.value)
