"""The run-level test cases junitxml gets: one per `[session]` budget, one per baseline
regression.

Owns their names and bodies. A test's own budgets reach junitxml as `<properties>` of its test
case (`_sampling`); what is judged after the last test has no test case to hang on, so it gets
its own, built as pytest's reports are and handed to junitxml's logreport hook alone (the
terminal and the other plugins never see them): `pytest-latency` › `session: ttft.p99 < 2s`,
failed with the judgement's message on a miss, and `<test> (latency regression)` failed with
each regressed metric. CI systems that count junit failures then count these misses too.
Called on the controller before junitxml's sessionfinish writes the file; a no-op without
`--junitxml`. May import `results` for the regression sentence.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_latency.plugin._state import RunState

SUITE_CLASS = "pytest-latency"


def _junit(config: pytest.Config) -> Any | None:
    """junitxml's `LogXML` when `--junitxml` is on. It is registered without a name, and the
    stash key that holds it is private, so it is recognised by the hooks it implements."""
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "LogXML" and hasattr(plugin, "pytest_runtest_logreport"):
            return plugin
    return None


def _cases(run: RunState) -> Iterator[tuple[str, str, str | None, str]]:
    """(node id, file, failure text or None, location label) for each case."""
    for judgement in run.session_judgements:
        place = judgement.expectation.place if judgement.expectation else ("", None)
        path = place[0] if place[1] is not None else SUITE_CLASS
        failure = None if judgement.passed else judgement.message
        yield f"{SUITE_CLASS}::session: {judgement.expr}", path, failure, "session"
    comparison = run.comparison
    if comparison is None or not comparison.regressions:
        return
    from pytest_latency.results import describe

    for subject, changes in comparison.test_regressions().items():
        # A test's case sits beside the test's own.
        lines = "\n".join(describe(c) for c in changes)
        yield f"{subject} (latency regression)", subject.split("::")[0], lines, "baseline"
    for subject, changes in comparison.rollup_regressions().items():
        nodeid = f"{SUITE_CLASS}::regression: {subject}"
        yield nodeid, SUITE_CLASS, "\n".join(describe(c) for c in changes), "baseline"


def junit_cases(config: pytest.Config, run: RunState) -> None:
    xml = _junit(config)
    if xml is None:
        return
    for nodeid, path, failure, label in _cases(run):
        location = (path, None, label)
        call = pytest.TestReport(
            nodeid,
            location,
            {},
            "passed" if failure is None else "failed",
            failure,
            "call",
        )
        xml.pytest_runtest_logreport(call)
        xml.pytest_runtest_logreport(
            pytest.TestReport(nodeid, location, {}, "passed", None, "teardown")
        )
