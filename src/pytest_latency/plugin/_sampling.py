"""Sampling and verdicts: what each test is held to, how often its body runs, and the judgement.

Owns the per-test sampling plan (the `latency` marker overlaid on the budgets file), its
validation at collection time (a bad marker is a collection error naming the test), the sample
loop (warmup, samples, and more samples while a verdict is inconclusive, up to max_samples), the
attribution of calls to the running test, and the call-phase verdict that fails a test on a
missed budget. Its measurements ride on the call report as plain data.
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_latency.attribution import Sink, routing_to  # by full name: see plugin/__init__.py
from pytest_latency.plugin._state import (
    PLAN_KEY,
    PLUGIN_NAME,
    RECORDING_KEY,
    REPORT_ATTRIBUTE,
    RUN_KEY,
    SETTINGS_KEY,
    SamplingPlan,
    Settings,
)
from pytest_latency.policies import effective_policy
from pytest_latency.recording import Recording
from pytest_latency.wire import WireRecord

if TYPE_CHECKING:
    from pytest_latency.aggregate import Judgement
    from pytest_latency.budgets import Expectation

# The statistics, the budget grammar and the diagnosis are imported where a test needs them, not
# at plugin load: pytest loads the plugin in every session of the environment.

_MARKER_KWARGS = ("samples", "warmup", "max_samples")

NO_CALLS_HINT = (
    "pytest-latency: this test has latency budgets but made no captured LLM call.\n"
    "Is the client instrumented? Use the anthropic_client/openai_client fixtures, "
    "wrap your own client with pytest_latency.instrument(client), or run with "
    "--latency-capture=auto."
)


# ---- the plan ------------------------------------------------------------------------------------


def plan_for(item: pytest.Item, settings: Settings) -> SamplingPlan | None:
    markers = list(item.iter_markers("latency"))
    budget_file = settings.budget_file
    marker_names = [m.name for m in item.iter_markers()]
    rules = budget_file.rules_for(item.nodeid, marker_names) if budget_file else ()
    if not markers and not rules:
        return None
    from pytest_latency.budgets import BudgetError, parse_expectation

    source = f"{item.nodeid} @pytest.mark.latency"
    own: list[Expectation] = []
    sampling: dict[str, int] = {}
    # Closest marker first: its sampling wins; expectations from every level add up.
    for marker in markers:
        unknown = set(marker.kwargs) - set(_MARKER_KWARGS)
        if unknown:
            raise BudgetError(
                f"{source}: unknown keyword argument(s) {', '.join(sorted(unknown))}; "
                f"valid: {', '.join(_MARKER_KWARGS)}"
            )
        own.extend(parse_expectation(arg, source=source) for arg in marker.args)
        for name in _MARKER_KWARGS:
            if name in marker.kwargs and name not in sampling:
                minimum = 0 if name == "warmup" else 1
                sampling[name] = _count(marker.kwargs[name], name, minimum, source)
    # A marker beats the file for its test: a file budget on the same statistic gives way.
    own_labels = {e.label for e in own}
    from_file = [e for rule in rules for e in rule.expectations if e.label not in own_labels]
    defaults = budget_file.defaults if budget_file else None
    samples = sampling.get("samples") or (defaults.samples if defaults else None) or 1
    warmup = sampling.get("warmup", defaults.warmup if defaults and defaults.warmup else 0)
    max_samples = sampling.get("max_samples") or (defaults.max_samples if defaults else None)
    if max_samples is not None and max_samples < samples:
        raise BudgetError(f"{source}: max_samples={max_samples} is below samples={samples}")
    return SamplingPlan(tuple(own + from_file), samples, warmup or 0, max_samples or samples)


def _count(value: object, name: str, minimum: int, source: str) -> int:
    from pytest_latency.budgets import BudgetError

    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BudgetError(f"{source}: {name}={value!r} must be an integer >= {minimum}")
    return value


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    report = yield
    settings = collector.config.stash.get(SETTINGS_KEY, None)
    if not report.passed or settings is None:
        return report
    items = [node for node in report.result if isinstance(node, pytest.Item)]
    if settings.budget_file is None and not any(i.get_closest_marker("latency") for i in items):
        return report  # nothing to plan: no budgets file, no latency marker
    from pytest_latency.budgets import BudgetError

    problems: list[str] = []
    for node in report.result:
        if not isinstance(node, pytest.Item):
            continue
        try:
            plan = plan_for(node, settings)
        except BudgetError as exc:
            problems.append(str(exc))
            continue
        if plan is not None:
            node.stash[PLAN_KEY] = plan
    if problems:
        report.outcome = "failed"
        report.longrepr = "\n".join(["pytest-latency: invalid latency marker", *problems])
        report.result = []
    return report


# ---- running a test ------------------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    recording = Recording(item.nodeid)
    item.stash[RECORDING_KEY] = recording
    run = item.config.stash.get(RUN_KEY, None)
    if run is not None:
        run.current = recording
    settings = item.config.stash.get(SETTINGS_KEY, None)
    sink: Sink = recording.sink
    if settings is not None and settings.capture_text > 0:
        sink = _keeping_text(recording, settings.capture_text)
    with routing_to(sink):
        result = yield
    if run is not None:
        run.current = None
    return result


def _keeping_text(recording: Recording, limit: int) -> Sink:
    """`recording.sink`, allowing `metrics` to keep `limit` characters of each call's text."""

    def sink(record: WireRecord) -> None:
        record.text_limit = limit
        recording.sink(record)

    return sink


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    recording = pyfuncitem.stash.get(RECORDING_KEY, None)
    if recording is None:
        return None
    plan = pyfuncitem.stash.get(PLAN_KEY, None)
    if plan is None:
        # One plain run, by pytest's own implementation: its calls are sample 0 (not fixture
        # calls). The sample ends in the call phase's makereport, which follows the body.
        recording.begin_sample(warmup=False)
        return None
    # Every other implementation (pytest's own, pytest-asyncio's, anyio's) runs once per sample;
    # fixtures stay set up across samples, like pytest-benchmark's rounds.
    manager = pyfuncitem.config.pluginmanager
    this_plugin = manager.get_plugin(PLUGIN_NAME) or sys.modules["pytest_latency.plugin"]
    call_body = manager.subset_hook_caller("pytest_pyfunc_call", remove_plugins=[this_plugin])

    def run(count: int, *, warmup: bool) -> None:
        for _ in range(count):
            recording.begin_sample(warmup=warmup)
            try:
                call_body(pyfuncitem=pyfuncitem)
            finally:
                recording.end_sample()

    run(plan.warmup, warmup=True)
    run(plan.samples, warmup=False)
    # Sequential sampling: an interval that straddles the budget narrows with n; draw more
    # (doubling, so the number of re-judgements stays logarithmic) up to max_samples.
    if not plan.budgeted or plan.max_samples <= plan.samples:
        return True
    from pytest_latency.aggregate import confidence_for_looks, judge

    confidence = confidence_for_looks(plan.looks)
    flagged = pyfuncitem.config.stash[SETTINGS_KEY].flagged
    while recording.samples_run < plan.max_samples:
        verdicts = judge(
            plan.expectations, recording.to_data(), confidence=confidence, flagged=flagged
        )
        if not any(j.verdict == "inconclusive" for j in verdicts):
            break
        run(min(recording.samples_run, plan.max_samples - recording.samples_run), warmup=False)
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    recording = item.stash.get(RECORDING_KEY, None)
    if call.when != "call" or recording is None:
        return report
    plan = item.stash.get(PLAN_KEY, None)
    if plan is None:
        recording.end_sample()
    if plan is None and not recording.entries and not recording.manual:
        return report  # a test that measured nothing and is held to nothing
    data = recording.to_data()
    data["location"] = [report.location[0], report.location[1]]
    if plan is not None and plan.budgeted:
        from pytest_latency.aggregate import confidence_for_looks, judge

        policy = effective_policy(
            item.config.stash[SETTINGS_KEY].policy,
            sampled_sequentially=plan.max_samples > plan.samples,
        )
        confidence = confidence_for_looks(plan.looks)
        judgements = judge(
            plan.expectations,
            data,
            policy=policy,
            confidence=confidence,
            flagged=item.config.stash[SETTINGS_KEY].flagged,
        )
        data["confidence"] = confidence
        data["budgets"] = [j.to_dict() for j in judgements]
        data["policy"] = policy
        data["flagged_policy"] = item.config.stash[SETTINGS_KEY].flagged
        _record_properties(item, report, judgements)
        if report.passed:
            _fail_on_misses(report, judgements, data)
    if data["calls"]:
        from pytest_latency import diagnose

        # After the budgets: `too_few_samples` reads them.
        data["findings"] = diagnose.findings_for_test(data)
    if data["calls"] or data["manual"] or plan is not None:
        setattr(report, REPORT_ATTRIBUTE, data)
    return report


def _record_properties(
    item: pytest.Item, report: pytest.TestReport, judgements: Sequence[Judgement]
) -> None:
    """Budget results as junitxml <properties> (the report's copy is what junitxml reads)."""
    for j in judgements:
        outcome = ("pass" if j.passed else "fail") + (
            " (inconclusive)" if j.verdict == "inconclusive" else ""
        )
        prop = (f"latency: {j.expr}", f"{outcome}: {j.message}")
        item.user_properties.append(prop)
        if prop not in report.user_properties:
            report.user_properties.append(prop)


def _fail_on_misses(
    report: pytest.TestReport, judgements: Sequence[Judgement], data: dict[str, Any]
) -> None:
    if not data["calls"] and not data["manual"]:
        report.outcome = "failed"
        report.longrepr = NO_CALLS_HINT
        return
    from pytest_latency.aggregate import FLAGGED_EXPR

    misses = [j for j in judgements if not j.passed]
    if misses:
        report.outcome = "failed"
        budget_missed = any(j.expr != FLAGGED_EXPR for j in misses)
        header = "latency budget missed" if budget_missed else "flagged calls in a budgeted test"
        lines = [f"pytest-latency: {header}", *(f"  {j.message}" for j in misses)]
        from pytest_latency.aggregate import error_counts, kept_calls

        errors = error_counts(kept_calls(data))
        if errors:
            listed = ", ".join(f"{kind} ×{count}" for kind, count in errors.most_common())
            lines.append(f"  errors: {listed}")
        report.longrepr = "\n".join(lines)
