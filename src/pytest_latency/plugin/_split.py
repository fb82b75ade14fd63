"""Split: one test's load across pytest-xdist workers, run at the same time, judged joined.

Owns `split=True`: under `pytest -n N` a test with a load shape is collected as shards, one per
worker (`shard=1/2`: as many as there are workers, no more than its samples or concurrency),
each running its part of the samples, the concurrency and the rate (`load.Load.share`); the
shards meet before their first kept sample (after each one's warmup, which warms its own
process) and start together; their budgets are judged on the controller, over the joined record
(`testdata.TestData.joined`: every call of every shard, so the figures are exact), and a miss
fails the last shard's report. A shard that waited `MEET_TIMEOUT_S` for the others in vain runs
alone and the joined test fails saying so: its figures are not those of the load asked for.
The meeting is a directory of files under the system's temporary directory, named by the run
(pytest-xdist's test run id) and the test: each shard writes when it arrived, all of them start
a little after the last arrival. Without pytest-xdist, or with one worker, `split=True` changes
nothing. `_shard_schedule` sends each shard to a worker of its own. May import `load`,
`testdata`, `verdicts`, `diagnose` (lazily) and its siblings; pytest for the hook's types.
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

    from pytest_latency.load import Shard
    from pytest_latency.plugin._state import SamplingPlan
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


class SplitError(ValueError):
    """A `split=True` that cannot run; the message says why, the caller names the test."""


def shards_of(item: pytest.Item, workers: int) -> list[Shard] | None:
    """The shards a test is collected as: one per worker, as many as its samples and its
    concurrency allow; None when it is not split (no `split=True`, fewer than two workers)."""
    marker = next((m for m in item.iter_markers("latency") if "split" in m.kwargs), None)
    if marker is None or marker.kwargs["split"] is not True or workers < 2:
        return None
    from pytest_latency.load import Shard

    count = workers
    for key in ("samples", "concurrency"):
        value = marker.kwargs.get(key)
        values = value if isinstance(value, list | tuple) else [value]
        numbers = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        if numbers:
            count = min(count, *numbers)
    return [Shard(index, count) for index in range(count)] if count >= 2 else None


def check_split(value: object, plan: SamplingPlan) -> None:
    """`split=` checked against the plan it splits: a bool, and a load shape to split."""
    if not isinstance(value, bool):
        raise SplitError(f"split={value!r} must be True or False")
    if value and (plan.load is None or plan.load.sequential):
        raise SplitError(
            "split=True splits a load shape across pytest-xdist workers: give concurrency= "
            "or rate= too"
        )


def share_plan(plan: SamplingPlan, shard: Shard) -> SamplingPlan:
    """A shard's part of its test's plan: its part of the samples and of the load; every shard
    warms up as the plan says (each warms its own process). No sequential sampling: a look
    would judge one shard's part alone. A part that would be empty (samples or a concurrency
    from budgets.toml below the number of shards) is a `SplitError`: the shard could run
    nothing, or nothing at once."""
    assert plan.load is not None
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


def is_shard(nodeid: str) -> bool:
    return _SHARD_ID.search(nodeid) is not None


def shard_number(nodeid: str) -> int:
    """A shard's index (from 0) from its node id; 0 for a test that is not one."""
    match = _SHARD_ID.search(nodeid)
    return int(match["i"]) - 1 if match is not None else 0


def shard_in(nodeid: str) -> Shard | None:
    """The shard a node id names (a record that carries no shard of its own: late calls, a
    test in flight when the run stopped); None for a test that is not one."""
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
    "Joiner",
    "Meeting",
    "SplitError",
    "check_split",
    "is_shard",
    "meet",
    "meeting_folder",
    "shard_in",
    "shard_number",
    "shards_of",
    "share_plan",
    "sleep_until",
    "timeout_s",
    "unsharded",
]
