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
import time
from typing import Any

import pytest
from latency_data import call_metrics

from pytest_latency.calls import OUTSIDE, Call, ManualValue, SampleSpan
from pytest_latency.load import Load, Shard, joined
from pytest_latency.plugin._split import shard_number, shards_of, unsharded
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
    ("nodeid", "whole", "number"),
    [
        ("t.py::test_a[shard=1/2]", "t.py::test_a", 0),
        ("t.py::test_a[shard=2/2]", "t.py::test_a", 1),
        ("t.py::test_a[concurrency=4-shard=2/3]", "t.py::test_a[concurrency=4]", 1),
        ("t.py::test_a[shard=1/2-x]", "t.py::test_a[x]", 0),
        ("t.py::test_a[concurrency=*-shard=1/2]", "t.py::test_a[concurrency=*]", 0),
        ("t.py::test_a[rate=20/s]", "t.py::test_a[rate=20/s]", 0),
        ("t.py::test_a[myshard=1/2]", "t.py::test_a[myshard=1/2]", 0),
    ],
)
def test_a_shards_node_id_names_its_test(nodeid: str, whole: str, number: int) -> None:
    assert unsharded(nodeid) == whole
    assert shard_number(nodeid) == number


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
    assert [s.count for s in shards_of(wide, 8) or []] == [4] * 4
    assert [s.count for s in shards_of(narrow, 8) or []] == [2, 2]
    assert shards_of(wide, 1) is None  # one worker: nothing to split across
    assert shards_of(unsplit, 8) is None


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


def test_a_part_that_would_be_empty_is_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_suite="""
        import pytest

        @pytest.mark.latency(concurrency=4, split=True)
        def test_split(ask):
            ask()
        """
    )
    pytester.makefile(".toml", budgets="[defaults]\nsamples = 1\n")
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest_subprocess(
        "-p", "xdist", "-n", "2", "--latency-sim=instant", "--latency-budget=budgets.toml"
    )
    result.stdout.fnmatch_lines(["*split across 2 workers needs at least 2*samples=1*"])
    assert result.ret != 0


def test_an_open_loop_and_a_sweep_split_across_workers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_suite="""
        import pytest

        @pytest.mark.latency(samples=8, rate="20/s", arrival="constant", split=True)
        def test_rate(ask):
            ask()

        @pytest.mark.latency(samples=4, concurrency=[2, 4], split=True)
        def test_sweep(ask):
            ask()
        """
    )
    result, data = _run(pytester, "-n", "2")
    result.assert_outcomes(passed=6)
    rate = _test(data, "test_rate")
    assert rate["load"]["rate_per_s"] == 20.0 and rate["load"]["arrival"] == "constant"
    assert rate["load"]["schedule"]["samples"] == 8  # every shard's samples kept the schedule
    assert rate["metrics"]["queue"]["count"] == 8
    levels = {t["nodeid"].split("::")[-1]: t for t in data["tests"] if "test_sweep" in t["nodeid"]}
    assert sorted(levels) == ["test_sweep[concurrency=2]", "test_sweep[concurrency=4]"]
    for name, test in levels.items():
        assert test["load"]["sweep"].endswith("test_sweep[concurrency=*]")
        assert test["load"]["concurrency"] == int(name[-2])
        assert test["samples"] == 4


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
