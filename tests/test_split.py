"""Split: `@pytest.mark.latency(..., split=True)` runs a test's load across pytest-xdist workers,
its shards at the same time, and judges it on the controller over every shard's calls.

The arithmetic (each shard's part, the whole again, the joined record's numbering) is checked
exactly; the distributed runs are real `pytest -n 2` subprocesses against the built-in simulator,
and the checks read their result files: one test, not two shards; its samples and load the whole
ones; the shards' samples in flight at the same time (the most in flight at once is the whole
concurrency, which neither shard alone reaches); a budget judged over the joined calls fails the
run; shards that could not meet fail saying so. Time bounds are loose (a worker's start-up, a busy
machine); the counts are exact."""

from __future__ import annotations

import json
import re
import time
from types import SimpleNamespace
from typing import Any

import pytest
from latency_data import call_metrics

from pytest_latency.budgets import BudgetFile, parse_budget_file
from pytest_latency.calls import OUTSIDE, Call, ManualValue, SampleSpan
from pytest_latency.load import Load, Shard, joined
from pytest_latency.plugin._shard_schedule import ShardFirst
from pytest_latency.plugin._split import SplitError, shard_in, shards_of, share_plan, unsharded
from pytest_latency.plugin._state import SamplingPlan
from pytest_latency.plugin._sweep import level_of
from pytest_latency.testdata import TestData

pytest_plugins = ["pytester"]


# ---- the arithmetic --------------------------------------------------------------------------


@pytest.mark.parametrize("total", [1, 2, 3, 7, 16, 17])
@pytest.mark.parametrize("count", [2, 3, 4])
def test_the_parts_add_up_and_differ_by_at_most_one(total: int, count: int) -> None:
    parts = [Shard(i, count).part(total) for i in range(count)]
    assert sum(parts) == total
    assert max(parts) - min(parts) <= 1


def test_a_load_split_and_joined_is_the_load_again() -> None:
    load = Load(concurrency=9, rate=30.0, arrival="poisson", burstiness=0.5, seed=7)
    parts = [load.share(Shard(i, 2)) for i in range(2)]
    assert [p.concurrency for p in parts] == [5, 4]
    assert [p.rate for p in parts] == [15.0, 15.0]
    assert [p.seed for p in parts] == [7, 8]  # the shards' Poisson schedules differ
    assert joined(parts) == load
    closed = Load(concurrency=4)
    assert joined([closed.share(Shard(i, 4)) for i in range(4)]) == closed


def test_constant_arrivals_interleave_across_shards() -> None:
    load = Load(rate=20.0, arrival="constant")
    phases = [load.share(Shard(i, 4)).phase_s(Shard(i, 4)) for i in range(4)]
    # One schedule of 20/s starts a sample every 50 ms: the four shards' at 0, 50, 100, 150.
    assert phases == pytest.approx([0.0, 0.05, 0.1, 0.15])
    # Poisson starts are staggered the same way: no burst of one sample per shard at the start.
    assert Load(rate=20.0).share(Shard(1, 2)).phase_s(Shard(1, 2)) == pytest.approx(0.05)
    assert Load(concurrency=4).share(Shard(1, 2)).phase_s(Shard(1, 2)) == 0.0  # closed loop
    thirds = [Load(rate=0.7).share(Shard(i, 3)) for i in range(3)]
    assert joined(thirds).rate == 0.7  # as written, not 0.7000000000000001


@pytest.mark.parametrize(
    ("nodeid", "whole", "shard"),
    [
        ("t.py::test_a[shard=1/2]", "t.py::test_a", Shard(0, 2)),
        ("t.py::test_a[shard=2/2]", "t.py::test_a", Shard(1, 2)),
        ("t.py::test_a[concurrency=4-shard=2/3]", "t.py::test_a[concurrency=4]", Shard(1, 3)),
        ("t.py::test_a[shard=1/2-x]", "t.py::test_a[x]", Shard(0, 2)),
        ("t.py::test_a[concurrency=*-shard=1/2]", "t.py::test_a[concurrency=*]", Shard(0, 2)),
        ("t.py::test_a[rate=20/s]", "t.py::test_a[rate=20/s]", None),
        ("t.py::test_a[myshard=1/2]", "t.py::test_a[myshard=1/2]", None),
    ],
)
def test_a_shards_node_id_names_its_test(nodeid: str, whole: str, shard: Shard | None) -> None:
    assert unsharded(nodeid) == whole
    assert shard_in(nodeid) == shard


def _call(sample: int, *, warmup: bool = False) -> Call:
    return Call(sample, warmup, (call_metrics(t_start_ms=max(sample, 0), ttft_ms=5, e2e_ms=20),))


def test_the_joined_record_numbers_each_shards_samples_after_the_previous_ones() -> None:
    def shard(index: int, samples: int) -> TestData:
        return TestData(
            nodeid=f"t.py::test_a[shard={index + 1}/2]",
            samples=samples,
            warmup=1,
            calls=(_call(-2, warmup=True), _call(OUTSIDE), *(_call(i) for i in range(samples))),
            manual=tuple(ManualValue(i, False, "turn", 1.0) for i in range(samples)),
            spans=tuple(SampleSpan(i, False, i, i + 1) for i in range(samples)),
            load=Load(concurrency=2).share(Shard(index, 2)),
            shard=Shard(index, 2),
            pending=("ttft.p95 < 1s",),
        )

    whole = TestData.joined([shard(0, 3), shard(1, 2)], "t.py::test_a")
    assert whole.samples == 5 and whole.warmup == 2 and whole.shards == 2
    kept = sorted(c.sample for c in whole.calls if c.sample >= 0)
    assert kept == [0, 1, 2, 3, 4]  # one numbering, as one process would have made it
    assert sorted(c.sample for c in whole.calls if c.warmup) == [-3, -2]
    assert [c.sample for c in whole.calls].count(OUTSIDE) == 2
    assert sorted(m.sample for m in whole.manual) == [0, 1, 2, 3, 4]
    assert whole.pool.samples == 5
    assert whole.load == Load(concurrency=2)
    assert TestData.from_wire(whole.to_wire()).shards == 2


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester


def test_a_test_is_split_into_no_more_shards_than_its_samples_or_concurrency(
    pytester: pytest.Pytester,
) -> None:
    items = pytester.getitems(
        """
        import pytest
        @pytest.mark.latency(samples=8, concurrency=4, split=True)
        def test_wide(): pass
        @pytest.mark.latency(samples=8, concurrency=2, split=True)
        def test_narrow(): pass
        @pytest.mark.latency(samples=8, concurrency=4)
        def test_unsplit(): pass
        """
    )
    by_name = {item.name: item for item in items}
    wide, narrow, unsplit = (by_name[n] for n in ("test_wide", "test_narrow", "test_unsplit"))
    assert _counts(wide, 8) == [4] * 4
    assert _counts(narrow, 8) == [2, 2]
    assert shards_of(wide, None, 1, None) is None  # one worker: nothing to split across
    assert shards_of(unsplit, None, 8, None) is None


def _counts(item: pytest.Item, workers: int, budget_file: BudgetFile | None = None) -> list[int]:
    """What `item` is collected as, one entry a part: its shard count (1: a level run whole)."""
    levels = [level for level in (level_of(item),) if level is not None] or None
    parts = shards_of(item, levels, workers, budget_file) or []
    return [1 if shard is None else shard.count for _, shard in parts]


def test_each_level_of_a_sweep_is_split_as_that_level_allows(pytester: pytest.Pytester) -> None:
    items = pytester.getitems(
        """
        import pytest
        @pytest.mark.latency(samples=8, concurrency=[1, 2, 16], split=True)
        def test_sweep(): pass
        """
    )
    levels = [level for level in map(level_of, items) if level is not None]
    assert [level.value for level in levels] == [1, 2, 16]
    parts = shards_of(items[0], levels, 4, None) or []
    # Level 1 runs whole; 2 allows two shards; 16 one per worker. Each level's shards are its
    # own: 2/2 at level 2, 4/4 at level 16.
    assert [(level.value if level else None, shard) for level, shard in parts] == [
        (1, None),
        (2, Shard(0, 2)),
        (2, Shard(1, 2)),
        *((16, Shard(i, 4)) for i in range(4)),
    ]


def test_budgets_toml_splits_a_test_as_the_marker_would(pytester: pytest.Pytester) -> None:
    items = pytester.getitems(
        """
        import pytest
        @pytest.mark.latency(concurrency=4)
        def test_marked(): pass
        @pytest.mark.latency(concurrency=4, split=False)
        def test_kept_whole(): pass
        @pytest.mark.latency("ttft.p50 < 1s")
        def test_one_at_a_time(): pass
        def test_by_rule(): pass
        def test_unbudgeted(): pass
        """
    )
    by_name = {item.name: item for item in items}
    budgets = parse_budget_file(
        "[defaults]\nsamples = 6\nsplit = true\n\n"
        '[[budget]]\nselect = "*::test_by_rule"\nexpect = "ttft.p50 < 1s"\nconcurrency = 3\n',
        path="budgets.toml",
    )
    assert _counts(by_name["test_marked"], 8, budgets) == [4] * 4  # samples 6, concurrency 4
    assert _counts(by_name["test_by_rule"], 8, budgets) == [3] * 3  # the rule's concurrency
    assert _counts(by_name["test_kept_whole"], 8, budgets) == []  # the marker beats the file
    assert _counts(by_name["test_one_at_a_time"], 8, budgets) == []  # no load shape to split
    assert _counts(by_name["test_unbudgeted"], 8, budgets) == []  # [defaults] is not its
    unsplit = parse_budget_file(
        '[defaults]\nsplit = true\n[[budget]]\nselect = "*::test_marked"\nexpect = '
        '"ttft.p50 < 1s"\nsplit = false\n',
        path="budgets.toml",
    )
    assert _counts(by_name["test_marked"], 8, unsplit) == []  # the first rule beats [defaults]


class _Worker:
    """A pytest-xdist worker as `ShardFirst` sends to it: the tests it is sent, in order."""

    def __init__(self, index: int) -> None:
        self.sent: list[int] = []
        self.gateway = SimpleNamespace(id=f"gw{index}")  # how pytest-xdist names it in a log

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        pass


def test_the_tests_split_into_more_shards_are_sent_first() -> None:
    """Then every worker a test's shards run on has run the same shards before them: a level of
    2 shards sent ahead of a level of 3 would keep the third worker waiting at the meeting while
    the first two ran it."""
    collection = [
        "t.py::test_a[concurrency=1]",
        "t.py::test_a[concurrency=2-shard=1/2]",
        "t.py::test_a[concurrency=2-shard=2/2]",
        "t.py::test_a[concurrency=8-shard=1/3]",
        "t.py::test_a[concurrency=8-shard=2/3]",
        "t.py::test_a[concurrency=8-shard=3/3]",
        "t.py::test_b",
    ]
    workers = [_Worker(i) for i in range(3)]
    scheduler = ShardFirst.__new__(ShardFirst)  # its state set by hand: no pytest-xdist session
    scheduler.numnodes = len(workers)
    scheduler.collection = None
    scheduler.maxschedchunk = None
    scheduler.pending = []
    scheduler.node2collection = {w: list(collection) for w in workers}
    scheduler.node2pending = {w: [] for w in workers}
    scheduler.schedule()
    sent = [[collection[i].split("::")[1] for i in w.sent] for w in workers]
    assert sent[0][:2] == ["test_a[concurrency=8-shard=1/3]", "test_a[concurrency=2-shard=1/2]"]
    assert sent[1][:2] == ["test_a[concurrency=8-shard=2/3]", "test_a[concurrency=2-shard=2/2]"]
    assert sent[2][0] == "test_a[concurrency=8-shard=3/3]"
    # The rest as pytest-xdist sends it, after the shards.
    assert sorted(name for names in sent for name in names if "shard" not in name) == [
        "test_a[concurrency=1]",
        "test_b",
    ]


# ---- real distributed runs -------------------------------------------------------------------

# Each worker's simulator streams 20 tokens at 10 ms: ~200 ms a call, long enough that samples
# of the two shards overlap by far more than a worker's start-up jitter.
CONFTEST = """
import pytest

@pytest.fixture
def sim(llm_sim):
    llm_sim.set_model(llm_sim.model.replace(
        ttfb_ms=1.0, prefill_us_per_token=0.0, decode_ms_per_token=10.0, jitter=0.0,
        output_tokens=20))
    return llm_sim

@pytest.fixture
def ask(sim, openai_client):
    def call():
        stream = openai_client.chat.completions.create(
            model="m", stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "hi"}])
        for _ in stream:
            pass
    return call
"""

SUITE = """
import pytest

@pytest.mark.latency("ttft.p50 < 5s", samples=8, concurrency=4, split=True)
def test_split(ask):
    ask()

@pytest.mark.latency("ttft.p50 < 5s", samples=4, concurrency=2)
def test_whole(ask):
    ask()
"""


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest_subprocess(
        "-p", "xdist", "--latency-sim=instant", "--latency-json=out.json", *args
    )
    data = json.loads((pytester.path / "out.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return result, data


def _test(data: dict[str, Any], name: str) -> dict[str, Any]:
    (test,) = [t for t in data["tests"] if t["nodeid"].endswith(f"::{name}")]
    assert isinstance(test, dict)
    return test


def test_shards_run_together_on_two_workers_and_are_judged_as_one_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result, data = _run(pytester, "-n", "2")
    result.assert_outcomes(passed=3)  # two shards and the unsplit test
    nodeids = [t["nodeid"] for t in data["tests"]]
    assert not [n for n in nodeids if "shard=" in n], nodeids  # one test, not its shards
    split = _test(data, "test_split")
    assert split["samples"] == 8 and split["call_count"] == 8
    assert split["load"]["concurrency"] == 4
    assert split["load"]["split"] == {"shards": 2, "together": True}
    # Each shard runs 2 at once: 4 in flight at once only if the shards ran at the same time.
    assert split["load"]["in_flight_max"] == 4
    assert [b["passed"] for b in split["budgets"]] == [True]
    assert "split" not in _test(data, "test_whole")["load"]
    from pytest_latency.report._view import load_text

    assert load_text(split) == (
        "Closed loop, concurrency 4, split across 2 pytest-xdist workers: at most 4 samples in "
        "flight."
    )


def test_a_budget_judged_over_the_joined_calls_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_suite="""
        import pytest

        @pytest.mark.latency("ttft.p50 < 1us", samples=4, concurrency=2, split=True)
        def test_split(ask):
            ask()
        """
    )
    result, data = _run(pytester, "-n", "2")
    result.assert_outcomes(passed=1, failed=1)  # the last shard to report carries the verdict
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*latency budget missed*", "*ttft.p50 < 1us*"])
    split = _test(data, "test_split")
    assert split["outcome"] == "failed" and split["call_count"] == 4
    assert [b["passed"] for b in split["budgets"]] == [False]


def test_shards_that_cannot_meet_run_alone_and_fail_saying_so(pytester: pytest.Pytester) -> None:
    # The second worker's shard is held up in its setup past the first one's wait.
    pytester.makepyfile(
        test_suite="""
        import os, time
        import pytest

        @pytest.fixture
        def late():
            if os.environ.get("PYTEST_XDIST_WORKER") == "gw1":
                time.sleep(3)

        @pytest.mark.latency("ttft.p50 < 5s", samples=4, concurrency=2, split=True)
        def test_split(late, ask):
            ask()
        """
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTEST_LATENCY_MEET_TIMEOUT", "1")
        result, data = _run(pytester, "-n", "2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*shards of this split test did not run together*"])
    split = _test(data, "test_split")
    assert split["load"]["split"] == {"shards": 2, "together": False}
    assert split["outcome"] == "failed"


def test_under_another_dist_mode_a_split_test_runs_whole(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result, data = _run(pytester, "-n", "2", "--dist", "loadfile")
    result.assert_outcomes(passed=2)
    split = _test(data, "test_split")
    assert split["samples"] == 8 and "split" not in split["load"]


def test_the_budget_files_rules_and_late_calls_belong_to_the_joined_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_suite="""
        import pytest

        @pytest.fixture
        def after(ask):
            yield
            ask()  # a fixture's call at teardown: outside every sample, the test's all the same

        @pytest.mark.latency(samples=4, concurrency=2, split=True)
        def test_split(after, ask):
            ask()
        """
    )
    pytester.makefile(
        ".toml",
        budgets='[[budget]]\nselect = "test_suite.py::test_split"\nexpect = ["ttft.p50 < 1us"]\n',
    )
    result, data = _run(pytester, "-n", "2", "--latency-budget=budgets.toml")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*ttft.p50 < 1us*"])
    assert [t["nodeid"] for t in data["tests"]] == ["test_suite.py::test_split"]
    split = data["tests"][0]
    assert split["call_count"] == 4 and split["unsampled_call_count"] == 2  # one per shard
    assert [b["expr"] for b in split["budgets"]] == ["ttft.p50 < 1us"]


def test_samples_from_budgets_toml_bound_the_shards_as_the_markers_do(
    pytester: pytest.Pytester,
) -> None:
    (item,) = pytester.getitems(
        """
        import pytest
        @pytest.mark.latency(concurrency=4, split=True)
        def test_split(): pass
        """
    )
    assert _counts(item, 2, None) == []  # one sample (the default): nothing to split
    assert _counts(item, 2, parse_budget_file("[defaults]\nsamples = 1\n", path="b")) == []
    assert _counts(item, 2, parse_budget_file("[defaults]\nsamples = 3\n", path="b")) == [2, 2]


def test_a_part_that_would_be_empty_is_a_split_error() -> None:
    """The shards are counted from the plan's values (`shards_of`), with the rules that select
    the test by its function and level; one that selects it by another parameter's id may give
    the plan less than was counted on."""
    plan = SamplingPlan((), 1, 0, 1, Load(concurrency=4))
    with pytest.raises(SplitError, match=r"needs at least 2 of each part.*samples=1"):
        share_plan(plan, Shard(0, 2))
    with pytest.raises(SplitError, match="runs one sample at a time"):
        share_plan(plan._replace(samples=4, max_samples=4, load=Load(seed=3)), Shard(0, 2))
    shared = share_plan(plan._replace(samples=5, max_samples=5), Shard(1, 2))
    assert (shared.samples, shared.load) == (2, Load(concurrency=2, seed=1))


def test_an_open_loop_and_a_sweep_split_across_workers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_suite="""
        import pytest

        @pytest.mark.latency(samples=8, rate="20/s", arrival="constant", split=True)
        def test_rate(ask):
            ask()

        @pytest.mark.latency(samples=4, concurrency=[1, 4], split=True)
        def test_sweep(ask):
            ask()
        """
    )
    result, data = _run(pytester, "-n", "2", "-v")
    result.assert_outcomes(passed=5)  # the rate's two shards, level 1 whole, level 4's two
    rate = _test(data, "test_rate")
    assert rate["load"]["rate_per_s"] == 20.0 and rate["load"]["arrival"] == "constant"
    assert rate["load"]["schedule"]["samples"] == 8  # every shard's samples kept the schedule
    assert rate["metrics"]["queue"]["count"] == 8
    # Each level is split as it allows: one sample at a time is nothing to split.
    ran = _ran(result, "test_sweep")
    assert ran == [
        "test_sweep[concurrency=1]",
        "test_sweep[concurrency=4-shard=1/2]",
        "test_sweep[concurrency=4-shard=2/2]",
    ]
    levels = {t["nodeid"].split("::")[-1]: t for t in data["tests"] if "test_sweep" in t["nodeid"]}
    assert sorted(levels) == ["test_sweep[concurrency=1]", "test_sweep[concurrency=4]"]
    for name, test in levels.items():
        assert test["load"]["sweep"].endswith("test_sweep[concurrency=*]")
        assert test["load"]["concurrency"] == int(name[-2])
        assert test["samples"] == 4 and test["call_count"] == 4
    one, four = levels["test_sweep[concurrency=1]"], levels["test_sweep[concurrency=4]"]
    assert "split" not in one["load"]
    assert four["load"]["split"] == {"shards": 2, "together": True}
    assert four["load"]["in_flight_max"] == 4  # 2 a shard: 4 at once only if they met


def _ran(result: pytest.RunResult, name: str) -> list[str]:
    """The tests of `name` a verbose run reports passed (shards by their own ids), sorted."""
    found = re.findall(rf"PASSED \S+::({name}(?:\[[^\]]*\])?)\s", result.stdout.str())
    return sorted(found)


@pytest.mark.parametrize(
    "budgets",
    [
        pytest.param("[defaults]\nsamples = 4\nsplit = true\n", id="defaults"),
        pytest.param(
            '[defaults]\nsamples = 4\n\n[[budget]]\nselect = "test_suite.py::test_split*"\n'
            'expect = ["ttft.p50 < 5s"]\nsplit = true\n',
            id="rule",
        ),
    ],
)
def test_split_in_budgets_toml_splits_a_test_as_the_marker_would(
    pytester: pytest.Pytester, budgets: str
) -> None:
    pytester.makepyfile(
        test_suite="""
        import pytest

        @pytest.mark.latency("ttft.p50 < 5s", concurrency=2)
        def test_split(ask):
            ask()

        @pytest.mark.latency("ttft.p50 < 5s", concurrency=2, split=False)
        def test_split_kept_whole(ask):
            ask()

        @pytest.mark.latency("ttft.p50 < 5s")
        def test_one_at_a_time(ask):
            ask()
        """
    )
    pytester.makefile(".toml", budgets=budgets)
    result, data = _run(pytester, "-n", "2", "-v", "--latency-budget=budgets.toml")
    result.assert_outcomes(passed=4)
    assert _ran(result, "test_split") == ["test_split[shard=1/2]", "test_split[shard=2/2]"]
    assert _ran(result, "test_split_kept_whole") == ["test_split_kept_whole"]
    assert _ran(result, "test_one_at_a_time") == ["test_one_at_a_time"]
    split = _test(data, "test_split")
    assert split["samples"] == 4 and split["call_count"] == 4
    assert split["load"]["split"] == {"shards": 2, "together": True}
    assert split["load"]["in_flight_max"] == 2  # one a shard: two at once only if they met
    # A marker's split=False beats the file; [defaults] leaves a test with no load shape whole.
    assert "split" not in _test(data, "test_split_kept_whole")["load"]
    assert "load" not in _test(data, "test_one_at_a_time")


def test_a_bad_split_in_budgets_toml_is_a_usage_error_naming_the_file(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile("def test_a(): pass")
    pytester.makefile(".toml", budgets='[defaults]\nsamples = 4\nsplit = "yes"\n')
    result = pytester.runpytest("--latency-budget=budgets.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*budgets.toml:3: split must be true or false, got 'yes'*"])


def test_a_rule_that_splits_a_test_with_no_load_shape_names_the_file(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_suite="""
        import pytest

        def test_a(): pass

        @pytest.mark.latency("ttft.p50 < 5s")
        def test_b(): pass
        """
    )
    pytester.makefile(
        ".toml",
        budgets='[defaults]\nsplit = true\n\n[[budget]]\nselect = "test_suite.py::test_a"\n'
        'expect = "ttft.p50 < 5s"\nsplit = true\n',
    )
    result = pytester.runpytest("--latency-budget=budgets.toml")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error
    result.stdout.fnmatch_lines(
        ["*budgets.toml:4: test_suite.py::test_a: split=True splits a load shape*"]
    )
    # [defaults] is every budgeted test's: it splits those with a load shape, leaves the rest.
    assert "test_b" not in result.stdout.str()


def test_without_workers_a_split_test_runs_whole(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result, data = _run(pytester)  # pytest-xdist loaded, no workers
    result.assert_outcomes(passed=2)
    split = _test(data, "test_split")
    assert split["samples"] == 8 and split["load"]["concurrency"] == 4
    assert "split" not in split["load"]


def test_split_needs_a_load_shape(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        @pytest.mark.latency(samples=4, split=True)
        def test_a(): pass
        @pytest.mark.latency(samples=4, concurrency=2, split="yes")
        def test_b(): pass
        """
    )
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(
        [
            "*test_a*split=True splits a load shape*give concurrency= or rate=*",
            "*test_b*split='yes' must be True or False*",
        ]
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED


def test_a_shard_whose_setup_fails_does_not_keep_the_others_waiting(
    pytester: pytest.Pytester,
) -> None:
    """Its peers would have waited the whole meeting timeout (120 s) for a shard that never
    comes: the failed shard says it will not (`_split.leave`) and they run alone at once."""
    pytester.makepyfile(
        test_suite="""
        import os
        import pytest

        @pytest.fixture
        def broken():
            if os.environ.get("PYTEST_XDIST_WORKER") == "gw1":
                raise RuntimeError("no database on this worker")

        @pytest.mark.latency("ttft.p50 < 5s", samples=4, concurrency=2, split=True)
        def test_split(broken, ask):
            ask()
        """
    )
    started = time.monotonic()
    result, data = _run(pytester, "-n", "2")
    took = time.monotonic() - started
    assert took < 90, f"the run took {took:.0f} s: a shard waited for the one that failed"
    result.stdout.fnmatch_lines(["*RuntimeError: no database on this worker*"])
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == 1, outcomes  # the broken shard's setup
    split = _test(data, "test_split")
    assert split["load"]["split"] == {"shards": 2, "together": False}
    assert split["call_count"] == 2  # the shard that ran: its 2 samples, nothing lost
