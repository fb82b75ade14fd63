"""Routing: every call reaches the test running when it started, from any thread; a test that
makes no call costs no recording; an unplanned test's body is sample 0 and its fixtures are not."""

from __future__ import annotations

import threading

import pytest

from pytest_latency.plugin._routing import Router
from pytest_latency.recording import OUTSIDE
from pytest_latency.wire import WireRecord


def _record() -> WireRecord:
    return WireRecord("POST", "http://h/v1/messages", b"{}", 0)


def test_calls_between_tests_go_to_the_session_and_calls_in_a_test_to_that_test() -> None:
    router = Router()
    router.route(_record())
    router.start("t.py::test_a")
    assert router.recording is None  # nothing made yet: a test that calls nothing costs nothing
    router.route(_record())
    router.finish()
    router.route(_record())
    router.start("t.py::test_b")
    router.route(_record())
    recording = router.current()
    assert recording is not None and recording.nodeid == "t.py::test_b"
    assert [e.record.owner for e in recording.entries] == ["t.py::test_b"]
    router.finish()
    router.route(_record())
    owners = [e.record.owner for e in router._outside_tests().entries]
    assert owners == ["<session>"] * 3


def test_threads_racing_for_the_first_call_share_one_recording() -> None:
    router = Router()
    router.start("t.py::test_threads")
    barrier = threading.Barrier(8)

    def call() -> None:
        barrier.wait()
        for _ in range(50):
            router.route(_record())

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recording = router.recording
    assert recording is not None and len(recording.entries) == 400


@pytest.mark.parametrize("first_call", ["in a fixture", "in the body"])
def test_a_plain_run_is_sample_0_whenever_the_recording_is_made(first_call: str) -> None:
    router = Router()
    router.start("t.py::test_plain")
    if first_call == "in a fixture":
        router.route(_record())  # setup: a fixture's call
    router.begin_plain_run()
    router.route(_record())  # the body's call
    router.end_plain_run()
    router.route(_record())  # teardown
    recording = router.recording
    assert recording is not None
    samples = [e.sample for e in recording.entries]
    expected = [0, OUTSIDE] if first_call == "in the body" else [OUTSIDE, 0, OUTSIDE]
    assert samples == expected
    assert recording.samples_run == 1


def test_text_limit_reaches_each_record() -> None:
    router = Router()
    router.text_limit = 40
    router.start("t.py::test_text")
    record = _record()
    router.route(record)
    assert record.text_limit == 40


def _recording_loaded_after(pytester: pytest.Pytester, body: str) -> bool:
    pytester.makeconftest(
        """
        import sys

        def pytest_sessionfinish(session):
            print("recording loaded:", "pytest_latency.recording" in sys.modules)
        """
    )
    pytester.makepyfile(test_suite=body)
    # A subprocess: this process has imported `recording` long ago.
    result = pytester.runpytest_subprocess("-s")
    assert result.ret == 0, result.stdout.str()
    loaded = [line for line in result.stdout.lines if "recording loaded:" in line]
    assert len(loaded) == 1, result.stdout.str()
    return loaded[0].rstrip().endswith("True")


def test_a_suite_that_calls_nothing_never_loads_the_recording(pytester: pytest.Pytester) -> None:
    plain = "def test_a():\n    assert True\n\ndef test_b(tmp_path):\n    assert tmp_path\n"
    assert not _recording_loaded_after(pytester, plain)


def test_a_recorded_value_loads_it(pytester: pytest.Pytester) -> None:
    # The check above can fail: the same probe sees the module once a test records something.
    recorded = "def test_a(latency):\n    latency.record('ttft', 0.2)\n"
    assert _recording_loaded_after(pytester, recorded)


def test_a_nested_session_hands_the_outer_one_its_sink_back(pytester: pytest.Pytester) -> None:
    # A plugin author's suite runs pytester sessions inside its tests, with pytest-latency
    # installed: when the inner session ends, the outer test's calls must still be recorded.
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_outer="""
        pytest_plugins = ["pytester"]

        def test_outer(pytester, anthropic_client, latency):
            pytester.makepyfile(test_inner="def test_inner():\\n    pass\\n")
            pytester.inline_run().assertoutcome(passed=1)
            anthropic_client.messages.create(
                model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
            assert len(latency.calls) == 1
        """
    )
    pytester.runpytest_subprocess("--latency-sim=instant").assert_outcomes(passed=1)
