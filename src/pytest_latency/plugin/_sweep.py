"""Sweeps: one test run at several load levels (`concurrency=[1, 4, 16]`, `rate=["5/s", "20/s"]`).

Owns the expansion of a `latency` marker whose `concurrency` or `rate` is a list into one test
per level (`pytest_generate_tests`: ids `concurrency=4`, `rate=20/s`, so a level is a node id of
its own that `-k`, xdist and the reports all see), the level each such test runs at (`level_of`),
the name of the sweep a test belongs to (its node id with the level as `*`), and which budgets a
level filter (`ttft{concurrency=16}.p95 < 800ms`) applies to (`applies`); its hook also makes a
split test's shards (`_split.shards_of`: each level's own, so one parametrization of (level,
shard) pairs, `concurrency=1` beside `concurrency=4-shard=1/2`). Cheap at import and for an
unsplit suite: this hook runs for every test function of the suite. May import `load` and
`_split` (lazily), `_state` (the settings: the budgets file may split a test); pytest for the
hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from pytest_latency.plugin._state import SETTINGS_KEY

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pytest

    from pytest_latency.budgets import Expectation
    from pytest_latency.load import Load, Shard

# The keys a sweep may list, and a level filter may name (`budgets.LEVEL_FILTER_KEYS`).
SWEPT = ("concurrency", "rate")
# The pseudo-argument holding a test's level (a direct parametrization no test function takes).
LEVEL_ARG = "_latency_level"
# And a split test's shard (`_split`): read here, so an unsplit test never loads `_split`.
SHARD_ARG = "_latency_shard"
# In each pytest-xdist worker's `workerinput` under `--dist load`: the split tests' meeting place.
MEETING_INPUT = "pytest_latency_meeting"


class Level(NamedTuple):
    """One level of a sweep: the swept key and its value as the marker wrote it."""

    key: str
    value: object

    @property
    def id(self) -> str:
        return f"{self.key}={self.value}"


class SweepError(ValueError):
    """A sweep that cannot run: the message names what is wrong; the caller names the test."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    definition = metafunc.definition
    # `keywords` holds marker names: a dict lookup, where iter_markers builds generators.
    marked = "latency" in definition.keywords
    # A split test's shards (`t[concurrency=4-shard=1/2]`) are made on a pytest-xdist worker
    # only: the controller collects nothing, and without workers there is nothing to split
    # across. Only under `--dist load`, whose scheduler the plugin's is (it names the meeting
    # place in `workerinput`: a worker's own `dist` option reads "no"): the others send a
    # module's tests (loadfile, loadscope, worksteal's ranges) or all of them (each) to one
    # worker, where the shards could not run together.
    workerinput = getattr(metafunc.config, "workerinput", None)
    if not isinstance(workerinput, dict) or MEETING_INPUT not in workerinput:
        workerinput = None
    if not marked and workerinput is None:
        return
    levels = _levels(definition) if marked else None
    parts = None
    if workerinput is not None:
        settings = metafunc.config.stash.get(SETTINGS_KEY, None)
        budget_file = settings.budget_file if settings is not None else None
        if _marker_splits(definition, marked) or (budget_file is not None and budget_file.splits):
            from pytest_latency.plugin import _split

            workers = int(workerinput.get("workercount", 1))
            parts = _split.shards_of(definition, levels, workers, budget_file)
    if parts is not None:
        # One parametrization of (level, shard) pairs: a level's shards are its own (a cross
        # product would give every level the same number).
        metafunc.fixturenames.extend((LEVEL_ARG, SHARD_ARG))
        ids = [_part_id(level, shard) for level, shard in parts]
        metafunc.parametrize((LEVEL_ARG, SHARD_ARG), parts, ids=ids)
    elif levels is not None:
        metafunc.fixturenames.append(LEVEL_ARG)
        metafunc.parametrize(LEVEL_ARG, levels, ids=[level.id for level in levels])


def _marker_splits(definition: pytest.Item, marked: bool) -> bool:
    return marked and any("split" in m.kwargs for m in definition.iter_markers("latency"))


def _part_id(level: Level | None, shard: Shard | None) -> str:
    """A part's id: `concurrency=4-shard=1/2`, `shard=1/2`, or a level run whole's
    `concurrency=1` (the ids `_split.unsharded` undoes)."""
    ids = [part.id for part in (level, shard) if part is not None]
    return "-".join(ids)


def _levels(item: pytest.Item) -> list[Level] | None:
    """The levels the closest marker giving a swept key lists; None when it gives one value.
    A malformed sweep is left to the plan, whose error names the test (a collection error)."""
    for marker in item.iter_markers("latency"):
        listed = [k for k in SWEPT if isinstance(marker.kwargs.get(k), list | tuple)]
        if len(listed) == 1 and marker.kwargs[listed[0]]:
            key = listed[0]
            values = list(marker.kwargs[key])
            if len(set(map(str, values))) == len(values):
                return [Level(key, value) for value in values]
        if listed or any(k in marker.kwargs for k in SWEPT):
            return None
    return None


def level_of(item: pytest.Item) -> Level | None:
    """The level a test of a sweep runs at; None for a test that is not one."""
    callspec = getattr(item, "callspec", None)
    level = callspec.params.get(LEVEL_ARG) if callspec is not None else None
    return level if isinstance(level, Level) else None


def shard_of(item: pytest.Item) -> Shard | None:
    """The shard of a split test a test is (`_split`); None for a test that is not one."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(SHARD_ARG) if callspec is not None else None


def check_sweep(kwargs: Mapping[str, object]) -> None:
    """A marker's swept key, checked: one key listed, its levels distinct and not empty."""
    listed = [k for k in SWEPT if isinstance(kwargs.get(k), list | tuple)]
    if len(listed) > 1:
        raise SweepError("a sweep lists one of concurrency= and rate=, not both")
    if listed:
        values = list(kwargs[listed[0]])  # type: ignore[call-overload]
        if not values:
            raise SweepError(f"{listed[0]}=[] lists no level")
        if len(set(map(str, values))) != len(values):
            raise SweepError(f"{listed[0]}={values!r} lists a level twice")


def sweep_name(nodeid: str, level: Level) -> str:
    """The name of the sweep a test belongs to: its node id with its level as `*`."""
    head, bracket, params = nodeid.partition("[")
    return head + bracket + params.replace(level.id, f"{level.key}=*", 1)


def applies(
    expectation: Expectation,
    load: Load | None,
    level: Level | None,
    levels: tuple[object, ...] = (),
) -> bool:
    """Whether a budget with level filters (`{concurrency=16}`) applies to a test run under
    `load`: each level it names must be the test's. On a test of a sweep (at `level`, one of
    `levels`, each read as `load.read_value` reads it), a level the sweep does not list is a
    `SweepError`: a typo would judge nothing."""
    from pytest_latency.load import LoadError, read_value

    for key, written in expectation.filters:
        if key not in SWEPT:
            continue
        try:
            wanted = read_value(key, _number(written) if key == "concurrency" else written)
        except LoadError as exc:
            raise SweepError(f"{expectation.text!r}: {exc}") from None
        if level is not None and level.key == key and wanted not in levels:
            listed = ", ".join(str(v) for v in levels)
            raise SweepError(
                f"{expectation.text!r} names {key}={written}, which this test's sweep does not "
                f"list ({key}=[{listed}])"
            )
        if (None if load is None else getattr(load, key)) != wanted:
            return False
    return True


def _number(text: str) -> object:
    return int(text) if text.isdigit() else text


__all__ = [
    "LEVEL_ARG",
    "MEETING_INPUT",
    "SHARD_ARG",
    "SWEPT",
    "Level",
    "SweepError",
    "applies",
    "check_sweep",
    "level_of",
    "pytest_generate_tests",
    "shard_of",
    "sweep_name",
]
