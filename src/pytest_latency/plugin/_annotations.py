"""GitHub Actions annotations: the `::error` workflow commands the run prints at its end.

Owns which lines are printed and their escaping: one per missed test budget (on the test's file
and line), one per missed `[session]` budget (on its line in budgets.toml), one per baseline
regression (on the regressed test, or run-wide for a group or the session) and one per output
that could not be written. Every message is one line: text a server sent is made printable
where it entered (`untrusted`), and the workflow-command escaping here keeps `%`, CR and LF from
ending the command. May import `results` for the regression sentence; never writes itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_latency.plugin._state import RunState
    from pytest_latency.testdata import TestData


def annotation_lines(run: RunState) -> Iterator[str]:
    for failure in run.write_failures:
        yield f"::error title=pytest-latency::{_escape_data(failure)}"
    for test in run.tests:
        for judgement in test.judgements:
            if not judgement.passed:
                message = _escape_data(f"{test.nodeid}: {judgement.message}")
                yield f"::error {_test_where(test)},title=latency budget::{message}"
    for judgement in run.session_judgements:
        if judgement.passed:
            continue
        path, line = judgement.expectation.place if judgement.expectation else ("", None)
        prefix = f"::error {_where(path, line)}," if line is not None else "::error "
        yield f"{prefix}title=latency session budget::{_escape_data(judgement.message)}"
    comparison = run.comparison
    if comparison is None or not comparison.regressions:
        return
    from pytest_latency.results import describe, describe_rollup

    # A test-scope change is of a test of this run's file: it has a record here.
    tests = {t.nodeid: t for t in run.tests}
    for change in comparison.regressions:
        if change.scope == "test":
            yield (
                f"::error {_test_where(tests[change.nodeid])},title=latency regression::"
                f"{_escape_data(describe(change))}"
            )
    for changes in comparison.rollup_regressions().values():  # one run-wide line each
        yield f"::error title=latency regression::{_escape_data(describe_rollup(changes))}"


def _test_where(test: TestData) -> str:
    """A test's file and (1-based) line, as pytest reported its location."""
    path, line = test.location or (test.nodeid.split("::")[0], None)
    return _where(str(path), None if line is None else int(line) + 1)


def _where(path: str, line: int | None) -> str:
    where = f"file={_escape_property(path)}"
    return where if line is None else f"{where},line={line}"


def _escape_data(text: str) -> str:
    # GitHub workflow-command escaping: data needs %, CR and LF encoded.
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
