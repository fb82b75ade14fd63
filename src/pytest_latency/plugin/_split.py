"""Split: one test's load across pytest-xdist workers, run at the same time, judged joined.

Owns `split=True`: whether a test is split (`choice_of`: its marker's `split=`, else budgets.toml's
`split`, taken as the load keys are) and into what: under `pytest -n N` a test with a load shape is
collected as shards, one per worker (`shard=1/2`: as many as there are workers, no more than its
samples or concurrency; each level of a sweep as many as that level allows, and a level that allows
fewer than two runs whole), each running its part of the samples, the concurrency and the rate
(`load.Load.share`); the shards meet before their first kept sample (after each one's warmup, which
warms its own process) and start together; their budgets are judged on the controller, over the
joined record (`testdata.TestData.joined`: every call of every shard, so the figures are exact), and
a miss fails the last shard's report. A shard that waited `MEET_TIMEOUT_S` for the others in vain
runs alone and the joined test fails saying so: its figures are not those of the load asked for. The
meeting is a directory of files under the system's temporary directory, named by the run
(pytest-xdist's test run id) and the test: each shard writes when it arrived, all of them start a
little after the last arrival. Without pytest-xdist, or with one worker, `split=True` changes
nothing. `_shard_schedule` sends each shard to a worker of its own. May import `load`, `testdata`,
`verdicts`, `diagnose` (lazily) and its siblings; pytest for the hook's types; `budgets` for types
only (the loaded file is handed in).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from pytest_latency.plugin._sweep import MEETING_INPUT

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pytest

    from pytest_latency.budgets import BudgetFile, BudgetRule
    from pytest_latency.load import Shard
    from pytest_latency.plugin._state import SamplingPlan
    from pytest_latency.plugin._sweep import Level
    from pytest_latency.testdata import TestData

# How long a shard waits for the others: a worker busy with a long test before its shard (a
# scheduler other than the plugin's, `--dist loadscope`) makes the others wait this long at most.
MEET_TIMEOUT_S = 120.0
MEET_TIMEOUT_ENV = "PYTEST_LATENCY_MEET_TIMEOUT"  # seconds; the plugin's own tests shorten it
# After the last shard arrives, the start is this much later: every shard, polling, sees it.
_START_MARGIN_NS = 50_000_000
_POLL_S = 0.002
# `shard=2/4` in a node id (its parameter id, joined to others' by "-").
_SHARD_ID = re.compile(r"(?P<sep>[\[-])shard=(?P<i>\d+)/(?P<n>\d+)(?=[\]-])")


# The load keys that make a shape to split (`load.LOAD_KEYS`: the others only shape a rate).
_SHAPE_KEYS = ("concurrency", "rate")


class SplitError(ValueError):
    """A `split=True` that cannot run; the message says why, the caller names the test."""


class Choice(NamedTuple):
    """A test's `split`, and where it was given: its marker (as written: `check_split` checks
    it), a `[[budget]]` rule (`rule`, its `budgets.toml:LINE`) or `[defaults]` (`defaults`)."""

    value: object
    rule: str | None = None
    defaults: bool = False


def choice_of(
    item: pytest.Item,
    level: Level | None,
    markers: Sequence[pytest.Mark],
    marker_names: Sequence[str],
    budget_file: BudgetFile | None,
    rules: Sequence[BudgetRule] | None = None,
) -> Choice | None:
    """A test's `split` as the load keys are taken: the closest marker's, else the first
    `[[budget]]` rule's that selects the test and gives it, else `[defaults]`'s (for a test a
    marker or a rule budgets, as `[defaults]` applies). None when nothing gives it. The rules
    are matched against `split_id`: the test is split when it is collected, before pytest
    gives it its parameters (`markers`: the `latency` ones, closest first; `rules`: those
    rules, where the caller matched them already)."""
    choice = _marker_choice(markers)
    if choice is not None or budget_file is None or not budget_file.splits:
        return choice
    if rules is None:
        rules = _rules(item, level, marker_names, budget_file)
    return _file_choice(markers, rules, budget_file)


def _marker_choice(markers: Sequence[pytest.Mark]) -> Choice | None:
    return next((Choice(m.kwargs["split"]) for m in markers if "split" in m.kwargs), None)


def _rules(
    item: pytest.Item, level: Level | None, marker_names: Sequence[str], budget_file: BudgetFile
) -> tuple[BudgetRule, ...]:
    return budget_file.rules_for(split_id(item, level), marker_names)


def _file_choice(
    markers: Sequence[pytest.Mark], rules: Sequence[BudgetRule], budget_file: BudgetFile
) -> Choice | None:
    if not markers and not rules:
        return None  # a test nothing budgets: [defaults] is not its
    for rule in rules:
        if rule.split is not None:
            return Choice(rule.split, rule=rule.source)
    split = budget_file.defaults.split
    return None if split is None else Choice(split, defaults=True)


def split_id(item: pytest.Item, level: Level | None) -> str:
    """The node id a `[[budget]]` rule's `split` is matched against: the test function's, with
    its sweep level (`t.py::test_a[concurrency=16]`), the same when the test is collected and
    when it is planned; a parameter of pytest's own (`parametrize`) does not exist yet when the
    shards are made."""
    nodeid = item.nodeid
    function = getattr(item, "originalname", item.name)
    if function != item.name:  # a parametrized test: `t.py::test_a[...]` → `t.py::test_a`
        nodeid = nodeid[: len(nodeid) - len(item.name)] + str(function)
    return nodeid if level is None else f"{nodeid}[{level.id}]"


def shards_of(
    item: pytest.Item,
    levels: Sequence[Level] | None,
    workers: int,
    budget_file: BudgetFile | None,
) -> list[tuple[Level | None, Shard | None]] | None:
    """What a test is collected as, at each level of its sweep (`levels`; None: a test of one
    level): that level's shards, one per worker and as many as its samples and concurrency
    allow, or the level whole (a shard None) when that is fewer than two. None when no level is
    split (no `split`, fewer than two workers)."""
    if workers < 2:
        return None
    from pytest_latency.load import Shard

    markers = list(item.iter_markers("latency"))
    names = [m.name for m in item.iter_markers()]
    parts: list[tuple[Level | None, Shard | None]] = []
    for level in levels or (None,):
        count = _count(item, level, markers, names, budget_file, workers)
        if count < 2:
            parts.append((level, None))
        else:
            parts.extend((level, Shard(index, count)) for index in range(count))
    return parts if any(shard is not None for _, shard in parts) else None


def _count(
    item: pytest.Item,
    level: Level | None,
    markers: Sequence[pytest.Mark],
    marker_names: Sequence[str],
    budget_file: BudgetFile | None,
    workers: int,
) -> int:
    """How many shards a test (at `level`) is split into: its workers, its samples and its
    concurrency, whichever is fewest; 1 when it is not split or has no load shape (one sample
    at a time: nothing runs at once to split). Values are taken as the plan takes them (a bad
    one is the plan's error, named there)."""
    rules = _rules(item, level, marker_names, budget_file) if budget_file is not None else ()
    choice = choice_of(item, level, markers, marker_names, budget_file, rules)
    if choice is None or choice.value is not True:
        return 1
    # Neither key: one sample at a time, nothing runs at once to split.
    concurrency, rate = (_given(k, level, markers, rules, budget_file) for k in _SHAPE_KEYS)
    if concurrency is None and rate is None:
        return 1
    samples = next((m.kwargs["samples"] for m in markers if "samples" in m.kwargs), None)
    if samples is None and budget_file is not None:
        samples = budget_file.defaults.samples
    count = workers
    for value in (samples or 1, concurrency):
        if isinstance(value, int) and not isinstance(value, bool):
            count = min(count, value)
    return count


def _given(
    key: str,
    level: Level | None,
    markers: Sequence[pytest.Mark],
    rules: Sequence[BudgetRule],
    budget_file: BudgetFile | None,
) -> object:
    """A load key's value as written: the level's (a sweep's), the closest marker's, the first
    rule's that gives it, `[defaults]`'s; None where none does."""
    if level is not None and level.key == key:
        return level.value
    for marker in markers:
        if key in marker.kwargs:
            return marker.kwargs[key]
    tables = [rule.load for rule in rules]
    if budget_file is not None:
        tables.append(budget_file.defaults.load)
    return next((value for table in tables for name, value in table if name == key), None)


def check_split(choice: Choice, plan: SamplingPlan) -> None:
    """A test's `split` checked against the plan it splits: a bool, and a load shape to split.
    `[defaults]` splits the tests that have one and leaves the others be: it is every budgeted
    test's, and most suites run some tests one sample at a time. A shape of one sample at a
    time (`concurrency=1`, a sweep's first level) runs whole: there is nothing to split."""
    if not isinstance(choice.value, bool):
        raise SplitError(f"split={choice.value!r} must be True or False")
    load = plan.load
    if (
        choice.value
        and not choice.defaults
        and (load is None or (load.concurrency is None and load.rate is None))
    ):
        raise SplitError(
            "split=True splits a load shape across pytest-xdist workers: give concurrency= "
            "or rate= too"
        )


def share_plan(plan: SamplingPlan, shard: Shard) -> SamplingPlan:
    """A shard's part of its test's plan: its part of the samples and of the load; every shard
    warms up as the plan says (each warms its own process). No sequential sampling: a look
    would judge one shard's part alone. The shards were counted from the same values
    (`shards_of`), but with the rules that select the test by its function and level
    (`split_id`); a rule that selects it by a parameter's id as well may give the plan less:
    a part that would be empty, or no load to share, is a `SplitError` (the shard could run
    nothing, or nothing at once)."""
    if plan.load is None or plan.load.sequential:
        raise SplitError(
            f"split across {shard.count} workers, and this test runs one sample at a time: give "
            "it concurrency= or rate= where it is split, or split=False"
        )
    small = [
        f"{name}={total}"
        for name, total in (("samples", plan.samples), ("concurrency", plan.load.concurrency))
        if total is not None and total < shard.count
    ]
    if small:
        raise SplitError(
            f"split across {shard.count} workers needs at least {shard.count} of each part, "
            f"and this test has {' and '.join(small)}: raise it, or run with fewer workers"
        )
    samples = shard.part(plan.samples)
    return plan._replace(samples=samples, max_samples=samples, load=plan.load.share(shard))


def unsharded(nodeid: str) -> str:
    """A node id without its shard's part: the joined test's (`t[shard=1/2]` → `t`,
    `t[concurrency=4-shard=1/2]` → `t[concurrency=4]`)."""
    match = _SHARD_ID.search(nodeid)
    if match is None:
        return nodeid
    head, tail = nodeid[: match.start()], nodeid[match.end() :]
    if match["sep"] == "[":
        return head + ("[" + tail[1:] if tail.startswith("-") else tail[1:])
    return head + tail


def shard_in(nodeid: str) -> Shard | None:
    """The shard a node id names (a record that carries no shard of its own: late calls, a
    test in flight when the run stopped; the scheduler's collection); None for a test that is
    not one."""
    match = _SHARD_ID.search(nodeid)
    if match is None:
        return None
    from pytest_latency.load import Shard

    return Shard(int(match["i"]) - 1, int(match["n"]))


# ---- the meeting (on each worker) ----------------------------------------------------------------


class Meeting(NamedTuple):
    """How a shard's meeting went: when all start (perf_counter_ns) and whether all came."""

    start_ns: int
    together: bool


def meet(run_id: str, nodeid: str, shard: Shard) -> Meeting:
    """Wait for the test's other shards (each worker's), up to the timeout; return when to
    start. perf_counter is the system's monotonic clock on the platforms pytest-xdist runs
    workers on (Linux and macOS CLOCK_MONOTONIC, Windows QPC), so one instant serves all."""
    folder = _test_folder(run_id, nodeid)
    mine = folder / str(shard.index)
    if mine.exists():  # this shard ran before in this run (a rerun): its peers have moved on
        return Meeting(time.perf_counter_ns(), together=False)
    _write(mine, str(time.perf_counter_ns()))
    deadline = time.monotonic() + timeout_s()
    while True:
        arrivals = [_read(folder / str(i)) for i in range(shard.count)]
        # One gave up and ran alone, or will not come (`leave`): waiting for it is in vain.
        if any(a == _APART for a in arrivals):
            return Meeting(time.perf_counter_ns(), together=False)
        if all(a is not None for a in arrivals):
            return Meeting(max(int(a) for a in arrivals if a) + _START_MARGIN_NS, together=True)
        if time.monotonic() > deadline:
            _write(mine, _APART)
            return Meeting(time.perf_counter_ns(), together=False)
        time.sleep(_POLL_S)


_APART = "apart"


def leave(run_id: str, nodeid: str, shard: Shard) -> None:
    """A shard that failed before it met the others (its setup, or its warmup, raised): its
    peers stop waiting for it and run alone (and the joined test says so), where they would
    have waited the whole timeout (`MEET_TIMEOUT_S`, 120 s) for a shard that never comes."""
    mine = _test_folder(run_id, nodeid) / str(shard.index)
    if not mine.exists():
        _write(mine, _APART)


def _test_folder(run_id: str, nodeid: str) -> Path:
    """Where a split test's shards meet, within the run's meeting place."""
    folder = meeting_folder(run_id) / hashlib.sha256(unsharded(nodeid).encode()).hexdigest()[:20]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def meeting_folder(run_id: str) -> Path:
    """The run's meeting place: `run_id` is the controller's own (`MEETING_INPUT`), new for
    every run, so no run meets another's shards or a stopped run's files."""
    return Path(tempfile.gettempdir()) / f"pytest-latency-split-{run_id}"


def timeout_s() -> float:
    """How long a shard waits for the others (`MEET_TIMEOUT_ENV`, else `MEET_TIMEOUT_S`)."""
    try:
        return float(os.environ.get(MEET_TIMEOUT_ENV, MEET_TIMEOUT_S))
    except ValueError:
        return MEET_TIMEOUT_S


def _write(path: Path, text: str) -> None:
    # Written aside and renamed: another shard never reads half a file.
    aside = path.with_suffix(".tmp")
    aside.write_text(text, encoding="utf-8")
    aside.replace(path)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:  # not there yet, or (Windows) being replaced: read again at the next poll
        return None


def sleep_until(when_ns: int) -> None:
    delay = (when_ns - time.perf_counter_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)


# ---- the join (on the controller) ----------------------------------------------------------------

APART_HINT = (
    "pytest-latency: the shards of this split test did not run together (one waited {timeout:g} s "
    "for the others and ran alone), so its figures are not those of the load asked for. Run "
    "with the plugin's scheduler (pytest-xdist's default --dist load), one shard per worker."
)


class Joiner:
    """The shards' records on the controller until every shard of a test has reported."""

    def __init__(self) -> None:
        self._parts: dict[str, dict[int, TestData]] = {}
        self._late: dict[str, list[TestData]] = {}

    def add(self, test: TestData) -> TestData | None:
        """A shard's call-report record; the joined record (not judged yet) once it was the
        last of its test's shards, else None."""
        assert test.shard is not None
        nodeid = unsharded(test.nodeid)
        if test.outcome == "rerun":  # an attempt pytest-rerunfailures repeats: its retry counts
            return None
        parts = self._parts.setdefault(nodeid, {})
        parts[test.shard.index] = test
        if len(parts) < test.shard.count:
            return None
        del self._parts[nodeid]
        return self._join(nodeid, [parts[i] for i in sorted(parts)])

    def late(self, test: TestData) -> TestData | None:
        """A shard's teardown record: renamed for the joined test when that is made (the
        caller adds it), held for it until then (None)."""
        nodeid = unsharded(test.nodeid)
        if nodeid in self._parts:
            self._late.setdefault(nodeid, []).append(test)
            return None
        import dataclasses

        return dataclasses.replace(test, nodeid=nodeid, shard=None, _pool=None)

    def in_flight(self, test: TestData) -> TestData | None:
        """What a shard in flight when the run stopped measured (a worker's `workeroutput`):
        late calls of a joined test, or the shard's part, joined now with what the others
        reported (the run is partial; the test is marked interrupted)."""
        if test.teardown:
            return self.late(test)
        test.shard = shard_in(test.nodeid)
        return self.add(test)

    def leftovers(self) -> list[TestData]:
        """At the end of the run, the tests some shard never reported (its worker crashed, the
        run stopped): joined from the shards that did, marked apart."""
        out = []
        for nodeid, parts in self._parts.items():
            joined = self._join(nodeid, [parts[i] for i in sorted(parts)])
            joined.apart = True
            if joined.outcome == "passed":
                joined.outcome = "interrupted"
            out.append(joined)
        self._parts.clear()
        return out

    def _join(self, nodeid: str, parts: Sequence[TestData]) -> TestData:
        from pytest_latency.testdata import TestData

        joined = TestData.joined(parts, nodeid)
        if joined.sweep is not None:
            joined.sweep = unsharded(joined.sweep)
        for late in self._late.pop(nodeid, []):
            joined = joined.with_late(late)
        return joined


__all__ = [
    "APART_HINT",
    "MEETING_INPUT",
    "MEET_TIMEOUT_ENV",
    "MEET_TIMEOUT_S",
    "Choice",
    "Joiner",
    "Meeting",
    "SplitError",
    "check_split",
    "choice_of",
    "meet",
    "meeting_folder",
    "shard_in",
    "shards_of",
    "share_plan",
    "sleep_until",
    "split_id",
    "timeout_s",
    "unsharded",
]
