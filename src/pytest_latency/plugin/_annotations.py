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
    from pytest_latency.results import MetricChange


def annotation_lines(run: RunState) -> Iterator[str]:
    for failure in run.write_failures:
        yield f"::error title=pytest-latency::{_escape_data(failure)}"
    for test in run.tests:
        location = test.location or (test.nodeid.split("::")[0], None)
        where = _where(str(location[0]), None if location[1] is None else int(location[1]) + 1)
        for judgement in test.judgements:
            if not judgement.passed:
                message = _escape_data(f"{test.nodeid}: {judgement.message}")
                yield f"::error {where},title=latency budget::{message}"
    for judgement in run.session_judgements:
        if judgement.passed:
            continue
        source = judgement.expectation.source if judgement.expectation else ""
        path, _, number = source.rpartition(":")
        where = _where(path, int(number)) if path and number.isdigit() else ""
        prefix = f"::error {where}," if where else "::error "
        yield f"{prefix}title=latency session budget::{_escape_data(judgement.message)}"
    comparison = run.comparison
    if comparison is None or not comparison.regressions:
        return
    from pytest_latency.results import describe, describe_rollup

    places = {t.nodeid: t.location or (t.nodeid.split("::")[0], None) for t in run.tests}
    rollups: dict[str, list[MetricChange]] = {}
    for change in comparison.regressions:
        place = places.get(change.nodeid) if change.scope == "test" else None
        if place is None:  # a group or the session: one run-wide line each
            rollups.setdefault(change.nodeid, []).append(change)
            continue
        at = None if place[1] is None else int(place[1]) + 1
        yield (
            f"::error {_where(str(place[0]), at)},title=latency regression::"
            f"{_escape_data(describe(change))}"
        )
    for changes in rollups.values():
        yield f"::error title=latency regression::{_escape_data(describe_rollup(changes))}"


def _where(path: str, line: int | None) -> str:
    where = f"file={_escape_property(path)}"
    return where if line is None else f"{where},line={line}"


def _escape_data(text: str) -> str:
    # GitHub workflow-command escaping: data needs %, CR and LF encoded.
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
