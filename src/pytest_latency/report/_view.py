"""The report's view model: a result file turned into typed rows, sentences and charts.

Owns what the reader is told and in which order: the verdict, the failing budgets with how far
off they are, the diagnosis (findings by kind, run-wide findings) and the errors by kind, per-test
statements (time split, cache, fan-out or serial), findings, what-ifs and errors, which
tests get full charts (failing budgets first; the number is capped so the report's size does not
grow with the run), the rollups and the environment. Everything here is plain text and numbers:
the template escapes it all, and no HTML is built in Python. May import `results` (the schema's
helpers), `histogram` (to read a block's buckets), `catalogue` (how each call flag reads),
`by_hand` (the "by hand" cell), `budgets` (the goodput metric's name), `spend` (the cost and
cache-savings cells, the spend line and the price stamp's text), `load` (how a load shape is
named), `pools` (the type) and its siblings; never jinja2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_latency import units as fmt
from pytest_latency.budgets import GOOD
from pytest_latency.by_hand import by_hand_of_entry
from pytest_latency.catalogue import FLAG_SPECS
from pytest_latency.diagnose import Thresholds, knee, leaning, overlap_of, title
from pytest_latency.histogram import LatencyHistogram
from pytest_latency.report import _charts as charts
from pytest_latency.report import _diagnosis as diag
from pytest_latency.results import (
    budget_status,
    cost_of_block,
    session_label,
    test_status,
    verdict_counts,
)
from pytest_latency.spend import PRICES, cost_cell, price_text, saved_cell, spend_line

if TYPE_CHECKING:
    from pytest_latency.pools import CostTotals

# Full per-test details (statements, tables, what-ifs, four charts: ~25 kB each) for at most this
# many tests, failing budgets first, then inconclusive ones, then the slowest by e2e p95, so a
# 1,000-test run stays under 2 MB; the tables still list every test and every budget.
DETAIL_LIMIT = 25


@dataclass(frozen=True, slots=True)
class BudgetRow:
    test: str
    anchor: str | None
    expr: str
    estimate: str
    threshold: str
    interval: str
    n: int
    status: str  # pass | fail | inconclusive
    excess: str  # "+53%" (over budget) or "-12%" (headroom)
    headline: str
    confident: bool
    message: str
    hints: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Statement:
    kind: str  # css class: prefill | decode | balanced | cache | warn | info
    label: str
    text: str


@dataclass(frozen=True, slots=True)
class MetricRow:
    metric: str
    n: int
    p50: str
    p90: str
    p95: str
    p99: str
    max: str
    mean: str


@dataclass(frozen=True, slots=True)
class TestRow:
    anchor: str
    nodeid: str
    outcome: str
    samples: int
    calls: int
    errors: int
    ttft_p50: str
    ttft_p95: str
    tpot_p50: str
    e2e_p95: str
    turn_p95: str
    by_hand: str  # values the test recorded itself (`by_hand`), "" when none
    cost: str  # Σ cost of its calls (`spend.cost_cell`), "" in files from before costs
    saved: str  # what prompt caching saved them, net (`spend.saved_cell`), "" likewise
    prefill_share: str
    cache: str
    verdict: str  # pass | fail | inconclusive | none
    has_detail: bool
    flagged: int
    findings: str  # the finding titles, short


@dataclass(frozen=True, slots=True)
class TestDetail:
    anchor: str
    nodeid: str
    location: str
    outcome: str
    verdict: str
    open: bool
    budgets: tuple[BudgetRow, ...]
    statements: tuple[Statement, ...]
    metrics: tuple[MetricRow, ...]
    charts: tuple[charts.Chart, ...]
    findings: tuple[diag.FindingView, ...]
    what_ifs: diag.WhatIfView | None
    errors: tuple[diag.ErrorRow, ...]
    error_text: str


@dataclass(frozen=True, slots=True)
class GroupRow:
    model: str
    endpoint: str
    tests: int
    calls: int
    errors: int
    ttft_p50: str
    ttft_p95: str
    tpot_p50: str
    e2e_p95: str
    cache: str
    cost: str
    saved: str


@dataclass(frozen=True, slots=True)
class SweepRow:
    level: str
    anchor: str | None
    samples: int
    ttft_p50: str
    ttft_p95: str
    tpot_p50: str
    e2e_p95: str
    queue_p95: str
    ttft_intended_p95: str
    in_flight: str
    verdict: str
    knee: bool
    goodput: tuple[str, ...]  # each of the sweep's `goodput` budgets' share at this level


@dataclass(frozen=True, slots=True)
class SweepView:
    name: str
    knee: str
    goodput: tuple[str, ...]  # the sweep's good(...) budgets, as written
    rows: tuple[SweepRow, ...]
    charts: tuple[charts.Chart, ...]


@dataclass(frozen=True, slots=True)
class ReportView:
    title: str
    subtitle: str
    partial: bool
    verdict: str  # fail | pass | inconclusive | none
    verdict_text: str
    counts: Mapping[str, int]
    failing: tuple[BudgetRow, ...]
    regressions: tuple[str, ...]  # `results.describe` of each, as the file carries it
    diagnosis: tuple[diag.KindGroup, ...]
    run_findings: tuple[diag.FindingView, ...]
    errors: tuple[diag.ErrorRow, ...]
    error_text: str
    flags: tuple[diag.FlagRow, ...]
    budgets: tuple[BudgetRow, ...]
    tests: tuple[TestRow, ...]
    details: tuple[TestDetail, ...]
    details_omitted: int
    session_statements: tuple[Statement, ...]
    session_charts: tuple[charts.Chart, ...]
    groups: tuple[GroupRow, ...]
    group_charts: tuple[charts.Chart, ...]
    environment: tuple[tuple[str, str], ...]
    sweeps: tuple[SweepView, ...] = ()

    @property
    def by_hand_column(self) -> bool:
        """The tests table has a "by hand" column when any test recorded values itself."""
        return any(t.by_hand for t in self.tests)

    @property
    def cost_column(self) -> bool:
        """The tests and groups tables have a cost column when any call reported usage."""
        return any(t.cost not in ("", fmt.ABSENT) for t in self.tests)


def _stat(block: Mapping[str, Any] | None, key: str) -> str:
    if not block:
        return fmt.ABSENT
    return fmt.value(block.get("unit", "us"), block.get(key))


def _metric(test: Mapping[str, Any], metric: str) -> Mapping[str, Any] | None:
    block: Mapping[str, Any] | None = test.get("metrics", {}).get(metric)
    return block


def cache_thresholds(scope: Mapping[str, Any]) -> tuple[float, ...]:
    """The thresholds of a test's (or the session's) budgets on its whole cache read ratio
    (none with `{model=...}` filters): what the ratio shown beside them must not round across."""
    return tuple(
        float(b["threshold"])
        for b in scope.get("budgets", ())
        if b.get("metric") == "cache_read_ratio"
        and "{" not in str(b.get("expr", ""))
        and isinstance(b.get("threshold"), int | float)
    )


def run_cache_thresholds(result: Mapping[str, Any]) -> tuple[float, ...]:
    """Every cache read ratio budget of the run (each test's and the session's): what a rollup's
    ratio, which has no budget of its own, is read against."""
    scopes = [*result.get("tests", ()), result.get("session", {})]
    return tuple(sorted({t for scope in scopes for t in cache_thresholds(scope)}))


def cache_text(scope: Mapping[str, Any], thresholds: Sequence[float] | None = None) -> str:
    """The cache read ratio of a test, group or the session as every table shows it: "absent"
    when no call reported cache fields, else a percentage on the right side of its budgets
    (`thresholds`, or the scope's own)."""
    ratio = scope.get("cache_read_ratio", {})
    if ratio.get("cache_fields") != "reported":
        return "absent"
    limits = cache_thresholds(scope) if thresholds is None else thresholds
    return fmt.ratio(ratio.get("value"), limits)


def _budget_row(
    budget: Mapping[str, Any], test: str, anchor: str | None, hints: tuple[str, ...]
) -> BudgetRow:
    status = budget_status(budget)
    estimate = budget.get("estimate_text") or fmt.ABSENT
    threshold = budget.get("threshold_text") or fmt.ABSENT
    excess = fmt.change(budget.get("excess"))
    label = str(budget["expr"]).split(" ")[0] if budget.get("metric") else str(budget["expr"])
    if budget.get("estimate") is None:
        headline = f"{budget['expr']}: no value — {budget.get('message', '')}"
    elif status == "fail":
        headline = f"{label} = {estimate} vs {threshold} budget: {excess}"
    else:
        headline = f"{label} = {estimate} within {threshold} budget"
    interval = budget.get("interval_text") or ("exact" if budget.get("estimate") else fmt.ABSENT)
    return BudgetRow(
        test=test,
        anchor=anchor,
        expr=str(budget["expr"]),
        estimate=estimate,
        threshold=threshold,
        interval=interval,
        n=int(budget.get("n", 0)),
        status=status,
        excess=excess,
        headline=headline,
        confident=bool(budget.get("confident", True)),
        message=str(budget.get("message", "")),
        hints=hints if status == "fail" else (),
    )


def _phase_statement(test: Mapping[str, Any]) -> Statement | None:
    """The time split as `diagnose` made it: its share, its leaning, its prefill fit (or why
    there is none); nothing here decides which side a share is on."""
    phase = test.get("phase") or {}
    share = phase.get("prefill_share")
    if share is None:
        return None
    prefill = test.get("prefill") or {}
    slope, intercept = prefill.get("slope_us_per_token"), prefill.get("intercept_us")
    if slope is not None and intercept is not None:
        fit = (
            f" Fitted prefill cost: {fmt.duration(slope * 1000)} per 1,000 uncached input "
            f"tokens, plus {fmt.duration(max(intercept, 0.0))} fixed."
        )
    elif prefill.get("note"):
        fit = f" Prefill cost not fitted: {prefill['note']}."
    else:
        fit = ""
    n = phase.get("n", 0)
    over = f"median of {n} streamed calls" if phase.get("leaning") else f"over {n} calls"
    # A file written before the split carried its leaning: diagnose's thresholds decide it.
    side = phase.get("leaning") or leaning(float(share))
    if side == "prefill":
        return Statement(
            "prefill",
            "Mostly before the first token",
            f"{fmt.ratio(share)} of the time is before the first token (queueing, network, "
            f"prompt processing), {fmt.ratio(1 - share)} streaming ({over}).{fit}",
        )
    tpot = _stat(_metric(test, "tpot"), "p50")
    if side == "decode":
        return Statement(
            "decode",
            "Mostly streaming",
            f"{fmt.ratio(1 - share)} of the time is streaming after the first token "
            f"(tpot p50 {tpot}), {fmt.ratio(share)} before it ({over}).{fit}",
        )
    return Statement(
        "balanced",
        "Prefill ≈ decode",
        f"{fmt.ratio(share)} before the first token, {fmt.ratio(1 - share)} streaming "
        f"(tpot p50 {tpot}; {over}).{fit}",
    )


def _cache_statement(
    scope: Mapping[str, Any],
    usage: Mapping[str, Any] | None,
    thresholds: Sequence[float] | None = None,
) -> Statement:
    ratio = scope.get("cache_read_ratio", {})
    limits = cache_thresholds(scope) if thresholds is None else thresholds
    seen = ""
    if usage:
        fields = [
            name
            for name in ("input_tokens", "output_tokens", "cache_fields", "reasoning_tokens")
            if usage.get(name)
        ]
        calls = usage.get("calls", 0)
        seen = (
            " Usage fields seen: "
            + (", ".join(f"{f} ({usage[f]}/{calls})" for f in fields) or "none")
            + "."
        )
    if ratio.get("cache_fields") != "reported":
        return Statement(
            "warn",
            "Cache: unknown",
            "No call reported prompt-cache usage fields, so the cache read ratio is absent, "
            "not 0 (self-hosted servers need e.g. vLLM --enable-prompt-tokens-details)." + seen,
        )
    value = ratio.get("value") or 0.0
    text = (
        f"{fmt.ratio(value, limits)} of input tokens were read from the prompt "
        "cache "
        f"({ratio.get('read_tokens', 0):,} of {ratio.get('input_tokens', 0):,} over "
        f"{ratio.get('calls_reporting', 0)} calls)." + seen
    )
    return Statement("cache" if value > 0 else "warn", "Cache", text)


def _calls_statement(test: Mapping[str, Any]) -> Statement | None:
    """How the samples' calls ran, as `diagnose` measured it; "could run concurrently" only
    when its dependency test found independent serial calls (the finding)."""
    shape = test.get("concurrency")
    if "concurrency" not in test:  # a file written before the overlap was: its timelines
        found = overlap_of(
            [(float(r[0]), float(r[2])) for r in sample["calls"]]
            for sample in (test.get("timeline") or {}).get("samples", [])
        )
        shape = found.to_dict() if found is not None else None
    if not isinstance(shape, Mapping):
        return None
    calls, level = shape.get("median_calls", 0), shape.get("concurrency", 1.0)
    if shape.get("parallel"):
        return Statement(
            "info",
            "Fan-out",
            f"{calls:g} calls per sample (median) overlap: ×{level:.1f} concurrency.",
        )
    kinds = {f.get("kind") for f in test.get("findings", []) if isinstance(f, Mapping)}
    if "serial_independent_calls" in kinds:
        return Statement(
            "info",
            "Serial calls",
            f"{calls:g} calls per sample (median) run one after another "
            f"(×{level:.1f} concurrency); independent ones could run concurrently.",
        )
    return Statement(
        "info",
        "Chained calls",
        f"{calls:g} calls per sample (median) run one after another (×{level:.1f} "
        "concurrency), each carrying an earlier call's output or not told apart.",
    )


def load_text(test: Mapping[str, Any]) -> str | None:
    """The test's load shape and what was measured of it (its `load` entry), in one sentence;
    None for a test run one sample at a time. The HTML statement and the Markdown both read it."""
    entry = test.get("load")
    if not isinstance(entry, Mapping):
        return None
    from pytest_latency.load import Load

    rate = entry.get("rate_per_s")
    shape = Load(
        entry.get("concurrency"),
        rate,
        entry.get("arrival") or "poisson",
        entry.get("burstiness") or 1.0,
    ).describe()
    text = f"{'Open' if rate is not None else 'Closed'} loop, {shape}"
    split = entry.get("split")
    if isinstance(split, Mapping):
        text += f", split across {split.get('shards')} pytest-xdist workers" + (
            "" if split.get("together") else " that did not run together"
        )
    in_flight = entry.get("in_flight_max")
    if in_flight is not None:
        text += f": at most {in_flight} sample{'s' if in_flight != 1 else ''} in flight"
    schedule = entry.get("schedule")
    if isinstance(schedule, Mapping):
        text += (
            f"; samples started {fmt.duration(schedule.get('late_p50_us'))} after their intended "
            f"start at the median, {fmt.duration(schedule.get('late_max_us'))} at worst "
            f"({schedule.get('slipped', 0)} of {schedule.get('samples', 0)} more than "
            f"{fmt.duration(schedule.get('threshold_us'))} late)"
        )
    return text + "."


def level_id(test: Mapping[str, Any]) -> str:
    """The level a test of a sweep ran at, as its node id names it (`concurrency=16`): the part
    its sweep's name writes as `*`."""
    name = (test.get("load") or {}).get("sweep") or ""
    head, star, tail = name.partition("=*")
    nodeid = str(test.get("nodeid", ""))
    if not star or not nodeid.startswith(head + "=") or not nodeid.endswith(tail):
        return nodeid
    key = head.rsplit("[", 1)[-1].rsplit("-", 1)[-1]
    return f"{key}={nodeid[len(head) + 1 : len(nodeid) - len(tail)]}"


def _level_of(test: Mapping[str, Any]) -> tuple[str, float]:
    """Which key a test of a sweep varies, and its value there as a number (rate per second)."""
    load = test.get("load") or {}
    key = level_id(test).split("=", 1)[0]
    value = load.get("rate_per_s") if key == "rate" else load.get("concurrency")
    return key, float(value or 0)


def sweeps(tests: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The run's sweeps by name, each one's levels by increasing load."""
    found: dict[str, list[Mapping[str, Any]]] = {}
    for test in tests:
        name = (test.get("load") or {}).get("sweep")
        if isinstance(name, str):
            found.setdefault(name, []).append(test)
    return {name: sorted(levels, key=lambda t: _level_of(t)[1]) for name, levels in found.items()}


def _p95(test: Mapping[str, Any], metric: str) -> float | None:
    block = (test.get("metrics") or {}).get(metric)
    return float(block["p95"]) if isinstance(block, Mapping) and "p95" in block else None


def sweep_knee(levels: Sequence[Mapping[str, Any]]) -> tuple[int | None, str]:
    """The knee of a sweep's levels (`diagnose.knee` on their ttft p95, by increasing load) and
    the sentence that says it: the HTML report and the Markdown both read it."""
    index = knee([_p95(t, "ttft") for t in levels])
    ratio = f"{Thresholds().knee_ratio:g}×"
    if index is None:
        return None, (
            f"No knee among the levels run: no level's ttft p95 is past {ratio} the lowest load's."
        )
    nxt = level_id(levels[index + 1])
    return index, (
        f"Knee at {level_id(levels[index])}: the last level whose ttft p95 is within {ratio} the "
        f"lowest load's; at {nxt} it is {fmt.duration(_p95(levels[index + 1], 'ttft'))}."
    )


def sweep_goodput(levels: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The `good(...)` budgets judged at any of a sweep's levels (as written, in the order first
    seen): goodput against load is the figure that says where the service stops being good."""
    found: dict[str, None] = {}
    for test in levels:
        for entry in test.get("budgets") or ():
            if isinstance(entry, Mapping) and entry.get("metric") == GOOD:
                found.setdefault(str(entry.get("expr", "")), None)
    return tuple(found)


def _goodput_entry(test: Mapping[str, Any], expr: str) -> Mapping[str, Any] | None:
    for entry in test.get("budgets") or ():
        if isinstance(entry, Mapping) and entry.get("metric") == GOOD and entry.get("expr") == expr:
            return entry
    return None


def goodput_cell(test: Mapping[str, Any], expr: str) -> str:
    """A level's share of good calls under one good(...) budget, as the judgement wrote it
    (`estimate_text`: never rounded onto its threshold); the Markdown reads it too."""
    entry = _goodput_entry(test, expr)
    text = entry.get("estimate_text") if entry is not None else None
    return str(text) if text else fmt.ABSENT


def _goodput_share(test: Mapping[str, Any], expr: str) -> float | None:
    entry = _goodput_entry(test, expr)
    estimate = entry.get("estimate") if entry is not None else None
    return float(estimate) if isinstance(estimate, (int, float)) else None


def _sweep_view(
    name: str, levels: Sequence[Mapping[str, Any]], anchors: Mapping[str, str]
) -> SweepView:
    index, sentence = sweep_knee(levels)
    key = _level_of(levels[0])[0]
    xs = [_level_of(t)[1] for t in levels]
    x_label = "samples per second" if key == "rate" else "concurrency"

    def series(metric: str, stat: str, css: str) -> charts.LoadSeries:
        values = []
        for t in levels:
            block = (t.get("metrics") or {}).get(metric)
            values.append(
                float(block[stat]) if isinstance(block, Mapping) and stat in block else None
            )
        return charts.LoadSeries(css, f"{metric} {stat}", tuple(values))

    ttft = [series("ttft", "p50", "ttft"), series("ttft", "p95", "e2e")]
    if any(_p95(t, "ttft_intended") is not None for t in levels):
        ttft.append(series("ttft_intended", "p95", "tpot"))
    drawn: tuple[charts.Chart, ...] = (
        charts.load_chart("TTFT against load", x_label, xs, ttft, index),
        charts.load_chart(
            "TPOT against load",
            x_label,
            xs,
            [series("tpot", "p50", "tpot"), series("tpot", "p95", "e2e")],
            index,
        ),
    )
    goodput = sweep_goodput(levels)
    if goodput:
        colours = charts.SERIES_COLOURS
        drawn += (
            charts.load_chart(
                "Goodput against load",
                x_label,
                xs,
                [
                    charts.LoadSeries(
                        colours[i % len(colours)],
                        expr,
                        tuple(_goodput_share(t, expr) for t in levels),
                    )
                    for i, expr in enumerate(goodput)
                ],
                index,
                share=True,
            ),
        )
    rows = tuple(
        SweepRow(
            level=level_id(t),
            anchor=anchors.get(str(t.get("nodeid"))),
            samples=int(t.get("samples", 0)),
            ttft_p50=_stat(_metric(t, "ttft"), "p50"),
            ttft_p95=_stat(_metric(t, "ttft"), "p95"),
            tpot_p50=_stat(_metric(t, "tpot"), "p50"),
            e2e_p95=_stat(_metric(t, "e2e"), "p95"),
            queue_p95=_stat(_metric(t, "queue"), "p95"),
            ttft_intended_p95=_stat(_metric(t, "ttft_intended"), "p95"),
            in_flight=str((t.get("load") or {}).get("in_flight_max") or fmt.ABSENT),
            verdict=_test_verdict(t),
            knee=i == index,
            goodput=tuple(goodput_cell(t, expr) for expr in goodput),
        )
        for i, t in enumerate(levels)
    )
    return SweepView(name, sentence, goodput, rows, drawn)


def _load_statement(test: Mapping[str, Any]) -> Statement | None:
    text = load_text(test)
    if text is None:
        return None
    schedule = (test.get("load") or {}).get("schedule") or {}
    return Statement("warn" if schedule.get("slipped") else "info", "Load", text)


def _error_text(errors: Mapping[str, int], calls: int, retries: int) -> str:
    """One sentence over a test's (or the run's) failures; "" when nothing failed or retried."""
    total = sum(int(v) for v in errors.values())
    if not total and not retries:
        return ""
    kinds = f" ({len(errors)} kind{'s' if len(errors) != 1 else ''})" if total else ""
    return (
        f"{total} of {calls} calls failed{kinds}; {retries} SDK "
        f"retr{'ies' if retries != 1 else 'y'}. Failed calls are left out of the latency "
        "metrics; a retried call counts once, with the latency the application saw (from its "
        "first attempt: the back-off included); attempt_* metrics give its final attempt's own."
    )


def _flags_statement(flags: Mapping[str, int], *, distorting: bool) -> Statement | None:
    """The test's flags of one kind: distorting ones (its flagged calls) as a warning, the
    others (what a call is: read in part, undecodable) as information."""
    parts = [
        f"{int(flags[spec.name])} call(s) {spec.label}: {spec.why}"
        for spec in FLAG_SPECS
        if spec.distorting is distorting and flags.get(spec.name)
    ]
    if not parts:
        return None
    if distorting:
        return Statement("warn", "Measurement", "; ".join(parts) + ".")
    return Statement("info", "Calls", "; ".join(parts) + f" ({diag.NOT_FLAGGED}).")


def _curve(metric: str, block: Mapping[str, Any] | None) -> charts.Curve:
    if not block:
        return charts.Curve(metric, ())
    points = [(0.0, float(block["min"]))]
    points += [(p, float(block[f"p{p:g}"])) for p in (50.0, 90.0, 95.0, 99.0)]
    points.append((100.0, float(block["max"])))
    return charts.Curve(metric, tuple(points))


def _buckets(block: Mapping[str, Any] | None) -> list[tuple[float, int]]:
    if not block or not block.get("hdr"):
        return []
    return LatencyHistogram.decode(block["hdr"]).buckets()


def _metric_rows(metrics: Mapping[str, Mapping[str, Any]]) -> tuple[MetricRow, ...]:
    return tuple(
        MetricRow(
            name,
            int(block["count"]),
            _stat(block, "p50"),
            _stat(block, "p90"),
            _stat(block, "p95"),
            _stat(block, "p99"),
            _stat(block, "max"),
            _stat(block, "mean"),
        )
        for name, block in metrics.items()
    )


def _test_verdict(test: Mapping[str, Any]) -> str:
    return test_status(test) or "none"


def _hints(test: Mapping[str, Any]) -> tuple[str, ...]:
    hints = []
    phase = _phase_statement(test)
    if phase is not None:
        hints.append(f"{phase.label}: {phase.text}")
    hints.append(_cache_statement(test, None).text)
    titles = _finding_titles(test)
    if titles:
        hints.append(f"Diagnosis: {titles} (see the test's details).")
    errors: Mapping[str, int] = test.get("errors", {})
    if errors:
        listed = ", ".join(f"{k} ×{v}" for k, v in errors.items())
        hints.append(f"{sum(errors.values())} calls failed: {listed}.")
    return tuple(hints)


def _detail(test: Mapping[str, Any], anchor: str, budgets: tuple[BudgetRow, ...]) -> TestDetail:
    metrics = test.get("metrics", {})
    statements = [
        s
        for s in (
            _phase_statement(test),
            _cache_statement(test, test.get("usage_fields")),
            _load_statement(test),
            _calls_statement(test),
            _spend_statement(test),
            _flags_statement(test.get("flags", {}), distorting=True),
            _flags_statement(test.get("flags", {}), distorting=False),
        )
        if s is not None
    ]
    timeline = [
        (
            int(s["sample"]),
            [
                charts.TimelineCall(float(r[0]), r[1], float(r[2]), str(r[3]), r[4])
                for r in s["calls"]
            ],
        )
        for s in test.get("timeline", {}).get("samples", [])
    ]
    prefill = test.get("prefill") or {}
    drawn = (
        charts.percentile_chart(
            "Latency by percentile",
            [_curve(m, metrics.get(m)) for m in ("ttft", "tpot", "e2e")],
        ),
        charts.histogram_chart("Inter-chunk gaps (ITL)", _buckets(metrics.get("itl"))),
        charts.prefill_chart(
            "TTFT vs uncached input tokens",
            prefill.get("points", []),
            prefill.get("slope_us_per_token"),
            prefill.get("intercept_us"),
        ),
        charts.timeline_chart("Calls per sample", timeline),
    )
    location = test.get("location")
    verdict = _test_verdict(test)
    return TestDetail(
        anchor=anchor,
        nodeid=test["nodeid"],
        location=f"{location[0]}:{location[1]}" if location else "",
        outcome=str(test.get("outcome", "")),
        verdict=verdict,
        open=verdict == "fail",
        budgets=budgets,
        statements=tuple(statements),
        metrics=_metric_rows(metrics),
        charts=drawn,
        findings=diag.findings_of_test(test, anchor),
        what_ifs=diag.what_ifs(test),
        errors=diag.errors_of_test(test),
        error_text=_error_text(
            test.get("errors", {}), int(test.get("call_count", 0)), int(test.get("retries", 0))
        ),
    )


def _finding_titles(test: Mapping[str, Any]) -> str:
    kinds = [str(f.get("kind")) for f in test.get("findings", []) if isinstance(f, Mapping)]
    return ", ".join(title(k) for k in dict.fromkeys(kinds) if k != "too_few_samples")


def _priority(index: int, test: Mapping[str, Any]) -> tuple[int, float, int]:
    verdict = _test_verdict(test)
    rank = {"fail": 0, "regressed": 1, "inconclusive": 2, "pass": 3}.get(verdict, 4)
    e2e = (_metric(test, "e2e") or {}).get("p95") or 0.0
    return (rank, -float(e2e), index)


def _group_row(group: Mapping[str, Any], thresholds: Sequence[float]) -> GroupRow:
    metrics = group.get("metrics", {})
    return GroupRow(
        model=str(group.get("model", "*")),
        endpoint=str(group.get("endpoint", "*")),
        tests=int(group.get("tests", 0)),
        calls=int(group.get("call_count", 0)),
        errors=int(group.get("error_count", 0)),
        ttft_p50=_stat(metrics.get("ttft"), "p50"),
        ttft_p95=_stat(metrics.get("ttft"), "p95"),
        tpot_p50=_stat(metrics.get("tpot"), "p50"),
        e2e_p95=_stat(metrics.get("e2e"), "p95"),
        cache=cache_text(group, thresholds),
        cost=_cost(group, cost_cell),
        saved=_cost(group, saved_cell),
    )


def _spend_statement(scope: Mapping[str, Any]) -> Statement | None:
    spent = spend_line(cost_of_block(scope.get("cost")), label=False)
    if spent is None:
        return None
    return Statement("info", "Cost", spent[0].upper() + spent[1:] + ".")


def _cost(scope: Mapping[str, Any], cell: Callable[[CostTotals], str]) -> str:
    """A test's or group's cost (or savings) cell; "" for a file written before costs existed."""
    block = scope.get("cost")
    return cell(cost_of_block(block)) if block else ""


def _environment(run: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    rows = [(str(k), str(v)) for k, v in sorted(run.get("versions", {}).items())]
    git = run.get("git") or {}
    if git:
        commit = str(git.get("commit", ""))
        state = " (dirty)" if git.get("dirty") else ""
        rows.append(("git commit", f"{commit}{state}"))
        if git.get("branch"):
            rows.append(("git branch", str(git["branch"])))
    else:
        rows.append(("git", "not a git checkout"))
    rows.append(("started", str(run.get("started") or fmt.ABSENT)))
    duration = run.get("duration_s")
    rows.append(("duration", f"{duration:.1f} s" if isinstance(duration, float | int) else "–"))
    rows.append(("shards", str(run.get("shards", 1))))
    prices = price_text(run.get("prices"))
    if prices is not None:
        rows.append((PRICES, prices))
    return tuple(rows)


def build_view(result: Mapping[str, Any]) -> ReportView:
    tests: Sequence[Mapping[str, Any]] = result["tests"]
    anchors = [f"t{i}" for i in range(len(tests))]
    priority = sorted(range(len(tests)), key=lambda i: _priority(i, tests[i]))
    detailed = set(priority[:DETAIL_LIMIT])
    linked: list[str | None] = [a if i in detailed else None for i, a in enumerate(anchors)]

    budget_rows: list[BudgetRow] = []
    per_test_budgets: list[tuple[BudgetRow, ...]] = []
    for i, test in enumerate(tests):
        anchor = anchors[i] if i in detailed else None
        has_fail = any(budget_status(b) == "fail" for b in test.get("budgets", []))
        hints = _hints(test) if has_fail else ()
        rows = tuple(_budget_row(b, test["nodeid"], anchor, hints) for b in test.get("budgets", []))
        per_test_budgets.append(rows)
        budget_rows.extend(rows)
    session = result.get("session", {})
    run_thresholds = run_cache_thresholds(result)
    for budget in session.get("budgets", []):
        budget_rows.append(_budget_row(budget, session_label(budget), None, ()))

    counts = verdict_counts(result)
    failing = tuple(b for b in budget_rows if b.status == "fail")
    total = sum(counts.values())
    if counts["fail"]:
        verdict = "fail"
        verdict_text = f"{counts['fail']} of {total} latency budgets failed"
    elif counts["inconclusive"]:
        verdict = "inconclusive"
        verdict_text = (
            f"No budget failed, but {counts['inconclusive']} of {total} passed only on the point "
            "estimate (not confident at this n)"
        )
    elif total:
        verdict, verdict_text = "pass", f"All {total} latency budgets passed"
    else:
        verdict, verdict_text = "none", "No latency budgets in this run"
    regressions = tuple(
        str(e.get("message", "")) for e in (result.get("baseline") or {}).get("regressions", [])
    )
    if regressions:  # a regression fails the gate as a missed budget does
        slower = f"{len(regressions)} latency regression(s) against the baseline"
        quiet = verdict in ("pass", "none")
        verdict, verdict_text = "fail", slower if quiet else f"{slower}; {verdict_text}"

    test_rows = tuple(
        TestRow(
            anchor=anchors[i],
            nodeid=test["nodeid"],
            outcome=str(test.get("outcome", "")),
            samples=int(test.get("samples", 0)),
            calls=int(test.get("call_count", 0)),
            errors=int(test.get("error_count", 0)),
            ttft_p50=_stat(_metric(test, "ttft"), "p50"),
            ttft_p95=_stat(_metric(test, "ttft"), "p95"),
            tpot_p50=_stat(_metric(test, "tpot"), "p50"),
            e2e_p95=_stat(_metric(test, "e2e"), "p95"),
            turn_p95=_stat(_metric(test, "turn"), "p95"),
            by_hand=by_hand_of_entry(test),
            cost=_cost(test, cost_cell),
            saved=_cost(test, saved_cell),
            prefill_share=fmt.ratio((test.get("phase") or {}).get("prefill_share")),
            cache=cache_text(test),
            verdict=_test_verdict(test),
            has_detail=i in detailed,
            flagged=diag.flagged_calls(test),
            findings=_finding_titles(test),
        )
        for i, test in enumerate(tests)
    )
    details = tuple(_detail(tests[i], anchors[i], per_test_budgets[i]) for i in sorted(detailed))

    session_metrics = session.get("metrics", {})
    session_charts = (
        charts.percentile_chart(
            "All calls: latency by percentile (HDR)",
            [
                charts.curve_from_buckets(m, _buckets(session_metrics.get(m)))
                for m in ("ttft", "tpot", "e2e")
            ],
        ),
        charts.histogram_chart("All calls: inter-chunk gaps", _buckets(session_metrics.get("itl"))),
    )
    session_statements = tuple(
        s for s in (_cache_statement(session, None), _spend_statement(session)) if s is not None
    )
    groups = result.get("groups", {})
    combined = [g for g in groups.values() if "model" in g and "endpoint" in g]
    group_charts = tuple(
        charts.percentile_chart(
            f"{g['model']} · {g['endpoint']}",
            [
                charts.curve_from_buckets(m, _buckets(g.get("metrics", {}).get(m)))
                for m in ("ttft", "e2e")
            ],
        )
        for g in combined[:6]
    )
    run = result.get("run", {})
    started = run.get("started") or ""
    subtitle = f"{len(tests)} tests · {session.get('call_count', 0)} calls"
    if started:
        subtitle += f" · started {started}"
    return ReportView(
        title="pytest-latency report",
        subtitle=subtitle,
        partial=bool(run.get("partial")),
        verdict=verdict,
        verdict_text=verdict_text,
        counts=counts,
        failing=failing,
        regressions=regressions,
        diagnosis=diag.by_kind(tests, linked, priority),
        run_findings=diag.rollup_findings(session, groups),
        errors=diag.run_errors(session, tests, linked),
        error_text=_error_text(
            session.get("errors", {}),
            int(session.get("call_count", 0)),
            int(session.get("retries", 0)),
        ),
        flags=diag.run_flags(session, tests),
        budgets=tuple(budget_rows),
        tests=test_rows,
        details=details,
        details_omitted=len(tests) - len(details),
        session_statements=session_statements,
        session_charts=session_charts,
        groups=tuple(_group_row(g, run_thresholds) for g in combined),
        group_charts=group_charts,
        environment=_environment(run),
        sweeps=tuple(
            _sweep_view(
                name,
                levels,
                {str(tests[i].get("nodeid")): anchors[i] for i in detailed},
            )
            for name, levels in sweeps(tests).items()
        ),
    )
