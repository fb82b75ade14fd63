"""Outputs: the result file, the HTML report and the Markdown summary are written once at the
end, on the controller, atomically; bad paths are usage errors; an interrupted run and a crashed
pytest-xdist worker still leave valid files; local and distributed runs aggregate alike."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic  # noqa: F401  (kept loaded across pytester's in-process runs: see test_plugin_sim)
import openai  # noqa: F401
import pytest

import pytest_latency.sim  # noqa: F401

pytest_plugins = ["pytester"]

SUITE = """
import os
import pytest

PROMPT = [{"role": "user", "content": "a fixed question"}]

@pytest.mark.parametrize("i", range(6))
@pytest.mark.latency("ttft.max < 5s", samples=2)
def test_chat(openai_client, latency, i):
    for _ in openai_client.chat.completions.create(
            model="gpt-test", messages=PROMPT, stream=True,
            stream_options={"include_usage": True}):
        pass

@pytest.mark.parametrize("i", range(4))
def test_messages(anthropic_client, i):
    anthropic_client.messages.create(model="claude-test", max_tokens=16, messages=PROMPT)
"""


def _load(path: Path) -> dict[str, Any]:
    def reject(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    data: dict[str, Any] = json.loads(path.read_text(), parse_constant=reject)
    return data


@pytest.fixture
def tester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner_suite=SUITE)
    return pytester


def test_the_result_file_report_and_summary_are_written(tester: pytest.Pytester) -> None:
    (tester.path / "out").mkdir()
    result = tester.runpytest(
        "--latency-sim=instant",
        "--latency-json=out/result.json",
        "--latency-report=out/report.html",
        "--latency-markdown=out/summary.md",
    )
    result.assert_outcomes(passed=10)
    result.stdout.fnmatch_lines(["*result file: out/result.json*", "*HTML report*"])
    data = _load(tester.path / "out/result.json")
    assert data["schema"] == "pytest-latency/1" and data["run"]["partial"] is False
    assert len(data["tests"]) == 10
    assert data["session"]["metrics"]["ttft"]["count"] == 12 + 4 * 0  # streamed calls only
    html = (tester.path / "out/report.html").read_text()
    assert "test_inner_suite.py::test_chat[0]" in html and "<html" in html
    markdown = (tester.path / "out/summary.md").read_text()
    assert "all 6 latency budgets passed" in markdown and "test\\_chat\\[5\\]" in markdown


@pytest.mark.parametrize(
    "args",
    [
        ["--latency-json=missing/dir/result.json"],
        ["--latency-report=."],
        ["--latency-baseline=nope.json"],
        ["--latency-tolerance=lots"],
    ],
)
def test_bad_output_options_are_usage_errors_before_tests_run(
    tester: pytest.Pytester, args: list[str]
) -> None:
    result = tester.runpytest("--latency-sim=instant", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.no_fnmatch_line("*passed*")
    assert "Traceback" not in result.stderr.str()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("lots", "--latency-tolerance=lots: expected a number or a percentage such as 10%"),
        ("20", "--latency-tolerance=20: must be between 0% and 1000%"),
    ],
)
def test_a_bad_tolerance_says_what_a_tolerance_is(
    tester: pytest.Pytester, value: str, message: str
) -> None:
    result = tester.runpytest("--latency-sim=instant", f"--latency-tolerance={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_an_unwritable_directory_is_a_usage_error(tester: pytest.Pytester) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere: permission bits cannot make a directory unwritable")
    locked = tester.path / "locked"
    locked.mkdir(mode=0o500)
    result = tester.runpytest(f"--latency-json={locked}/r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_outputs_to_a_symlink_a_device_and_a_fifo_keep_them_what_they_are(
    tester: pytest.Pytester,
) -> None:
    (tester.path / "real").mkdir()
    (tester.path / "real/r.json").write_text("old")
    (tester.path / "r.json").symlink_to(tester.path / "real/r.json")
    (tester.path / "null.html").symlink_to("/dev/null")
    fifo = tester.path / "summary.fifo"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    result = tester.runpytest(
        "--latency-sim=instant",
        "--latency-json=r.json",
        "--latency-report=null.html",
        f"--latency-markdown={fifo.name}",
    )
    reader.join(timeout=30)
    result.assert_outcomes(passed=10)
    assert result.ret == pytest.ExitCode.OK
    assert (tester.path / "r.json").is_symlink()
    assert len(_load(tester.path / "real/r.json")["tests"]) == 10
    assert (tester.path / "null.html").is_symlink()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert len(received) == 1 and "test\\_chat\\[5\\]" in received[0]
    assert not list(tester.path.rglob("*.tmp"))


def test_a_failed_output_is_reported_and_costs_no_other(
    tester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk under the HTML report: the result file, the Markdown and the step summary
    are still written; the failure names its option and path; a passing run exits 3."""
    (tester.path / "full.html").symlink_to("/dev/full")  # every write: ENOSPC
    summary = tester.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    result = tester.runpytest(
        "--latency-sim=instant",
        "--latency-json=r.json",
        "--latency-report=full.html",
        "--latency-markdown=r.md",
    )
    result.assert_outcomes(passed=10)
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    failure = "--latency-report=full.html: cannot write: No space left on device"
    result.stdout.fnmatch_lines(
        [f"pytest-latency: {failure}", f"::error title=pytest-latency::{failure}"]
    )
    assert len(_load(tester.path / "r.json")["tests"]) == 10
    assert "all 6 latency budgets passed" in (tester.path / "r.md").read_text()
    assert "all 6 latency budgets passed" in summary.read_text()
    assert (tester.path / "full.html").is_symlink()


def test_a_failed_output_keeps_a_failing_runs_own_exit_status(tester: pytest.Pytester) -> None:
    tester.makepyfile(test_inner_fails="def test_fails():\n    assert False\n")
    (tester.path / "full.json").symlink_to("/dev/full")
    result = tester.runpytest("--latency-sim=instant", "--latency-json=full.json")
    result.assert_outcomes(passed=10, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["pytest-latency: --latency-json=full.json: cannot write: *"])


def _limit_file_size(limit: int) -> None:
    # In the child only: a write past `limit` bytes fails with EFBIG (Python ignores SIGXFSZ),
    # as a full disk makes it fail with ENOSPC.
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_file_size_limit_under_the_report_keeps_the_old_one_and_leaves_no_temporary_file(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(
        test_inner_small="""
        import pytest

        @pytest.mark.parametrize("i", range(3))
        def test_call(openai_client, i):
            openai_client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "q"}])
        """
    )
    (tester.path / "r.html").write_text("the old report")
    # The result file of three tests is about 16 KB, their report about 33 KB.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "test_inner_small.py",
            "--latency-sim=instant",
            "--latency-json=r.json",
            "--latency-report=r.html",
            "--latency-markdown=r.md",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tester.path,
        preexec_fn=lambda: _limit_file_size(24_000),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == pytest.ExitCode.INTERNAL_ERROR, done.stdout + done.stderr
    assert "3 passed" in done.stdout
    assert "pytest-latency: --latency-report=r.html: cannot write: File too large" in done.stdout
    assert (tester.path / "r.html").read_text() == "the old report"
    assert len(_load(tester.path / "r.json")["tests"]) == 3
    assert (tester.path / "r.md").read_text().startswith("**pytest-latency")
    assert not list(tester.path.rglob("*.tmp")), list(tester.path.iterdir())


def _as_a_terminal_starts_it(signum: int) -> Callable[[], None]:
    """A `preexec_fn` giving the inner run the signal's default disposition. Started under
    `nohup` or in the background (`cmd &` in a script, as CI jobs often are), this suite's
    processes inherit SIGHUP, or SIGINT, ignored, which the plugin rightly leaves alone
    (`_signals`: an ignored signal stays ignored) and Python too (no KeyboardInterrupt handler
    over an ignored SIGINT), so the run slept on through it (CI, sessions 11 and 13: test_b
    still sleeping 60 s after SIGHUP; all three tests passing after Ctrl-C)."""

    def restore() -> None:
        signal.signal(signum, signal.SIG_DFL)

    return restore


def test_ctrl_c_mid_run_writes_a_partial_result_with_what_it_measured(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(
        test_inner_interrupt="""
        import pathlib
        import time

        def test_a(openai_client):
            openai_client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "q"}])

        def test_b(openai_client):
            openai_client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "q"}])
            pathlib.Path("started").touch()
            time.sleep(60)  # interrupted here

        def test_c():
            pass
        """
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        "test_inner_interrupt.py",
        "--latency-sim=instant",
        "--latency-json=r.json",
        "--latency-report=r.html",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
    ]
    process = subprocess.Popen(
        command,
        cwd=tester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=_as_a_terminal_starts_it(signal.SIGINT),
    )
    try:
        deadline = time.monotonic() + 60
        while not (tester.path / "started").exists():
            assert process.poll() is None, process.communicate()[0].decode()
            assert time.monotonic() < deadline, "the inner run never reached test_b"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)  # what Ctrl-C sends
        output = process.communicate(timeout=60)[0].decode()
    finally:
        if process.poll() is None:
            # Reaped and its pipe closed here: left to the garbage collector, a killed run's
            # ResourceWarnings failed whichever test ran next on the worker (CI, session 13).
            process.kill()
            process.communicate()
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output
    data = _load(tester.path / "r.json")
    assert data["run"]["partial"] is True
    outcomes = {t["nodeid"].split("::")[1]: t["outcome"] for t in data["tests"]}
    assert outcomes == {"test_a": "passed", "test_b": "interrupted"}
    assert all(t["call_count"] == 1 for t in data["tests"])
    assert (tester.path / "r.html").stat().st_size > 0


SLOW_SUITE = """
import pathlib
import time

def test_a(openai_client):
    openai_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])

def test_b(openai_client):
    openai_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    pathlib.Path("b.started").touch()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # stopped here
        try:
            time.sleep(0.5)
        except KeyboardInterrupt:
            # Only in a worker, where a KeyboardInterrupt is what pytest-xdist's own shutdown
            # sends a busy worker (execnet, 5 s after the controller's teardown began): the
            # plugin's stop must not wait for that. In one process it is the stop itself.
            if SWALLOW:
                continue
            raise

def test_c():
    pass
"""


@pytest.mark.parametrize(
    ("workers", "name", "group"),
    [
        ([], "SIGTERM", False),
        ([], "SIGHUP", False),
        ([], "SIGQUIT", False),
        (["-n", "2"], "SIGTERM", False),  # to the controller only: it tells the workers
        (["-n", "2"], "SIGINT", True),  # a terminal's Ctrl-C: every process of the group
    ],
    ids=["serial-SIGTERM", "serial-SIGHUP", "serial-SIGQUIT", "xdist-SIGTERM", "xdist-ctrl-c"],
)
def test_a_stop_signal_writes_a_partial_result_with_what_it_measured_and_exits_promptly(
    tester: pytest.Pytester, workers: list[str], name: str, group: bool
) -> None:
    """What CI runners, terminals and supervisors send on cancel, timeout and hangup: a real
    process, a real signal. Under pytest-xdist the worker's test in flight is kept too."""
    if not hasattr(signal, name):
        pytest.skip(f"{name} is POSIX-only")
    tester.makepyfile(test_inner_slow=f"SWALLOW = {bool(workers)}\n" + SLOW_SUITE)
    command = [
        sys.executable,
        "-X",
        "faulthandler",
        "-m",
        "pytest",
        "test_inner_slow.py",
        *workers,
        "-v",
        "--latency-sim=instant",
        "--latency-json=r.json",
        "--latency-markdown=r.md",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
    ]
    stop = getattr(signal, name)
    process = subprocess.Popen(
        command,
        cwd=tester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=group,
        preexec_fn=_as_a_terminal_starts_it(stop),
    )
    lines: list[str] = []
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60

        def test_a_reported() -> bool:
            # `-v` prints the line once the controller has test_a's report.
            return any("PASSED" in line and "::test_a" in line for line in list(lines))

        while not (test_a_reported() and (tester.path / "b.started").exists()):
            assert process.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "the inner run never reached test_b"
            time.sleep(0.05)
        signalled = time.monotonic()
        if group:
            os.killpg(process.pid, stop)
        else:
            process.send_signal(stop)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            # Every thread's stack (faulthandler, on SIGABRT) says where the run was.
            process.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
            reader.join(timeout=10)
            pytest.fail("the run did not stop within 60 s of the signal:\n" + "".join(lines))
        took = time.monotonic() - signalled
        reader.join(timeout=10)
        output = "".join(lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join(timeout=10)
        process.stdout.close()
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output
    assert f"received {name}" in output
    assert "INTERNALERROR" not in output and "crashed" not in output, output
    data = _load(tester.path / "r.json")
    assert data["run"]["partial"] is True
    outcomes = {t["nodeid"].split("::")[1]: t["outcome"] for t in data["tests"]}
    assert outcomes == {"test_a": "passed", "test_b": "interrupted"}, (outcomes, output)
    assert all(t["call_count"] == 1 for t in data["tests"])
    assert "**Partial run**" in (tester.path / "r.md").read_text()
    # Waiting for pytest-xdist's shutdown instead takes 10 s at least (its kill timeout for a
    # worker that does not stop), and took 11 s before the workers were told.
    assert took < 10, (took, output)


def test_a_crashed_xdist_worker_loses_only_its_current_test_and_marks_the_run_partial(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(
        test_inner_crash="""
        import os
        import pytest

        @pytest.mark.parametrize("i", range(8))
        def test_call(openai_client, i):
            openai_client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "q"}])

        def test_crash(openai_client):
            openai_client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "q"}])
            os._exit(1)
        """
    )
    result = tester.runpytest(
        "test_inner_crash.py",
        "-n",
        "2",
        "--latency-sim=instant",
        "--latency-json=r.json",
        "--latency-report=r.html",
        "--latency-markdown=r.md",
    )
    result.assert_outcomes(passed=8, failed=1)
    result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running*test_crash*"])
    data = _load(tester.path / "r.json")
    names = sorted(t["nodeid"].split("::")[1] for t in data["tests"])
    assert names == [f"test_call[{i}]" for i in range(8)]
    assert data["session"]["call_count"] == 8
    # What test_crash measured died with its worker: the run is partial, and says so.
    assert data["run"]["partial"] is True
    html = (tester.path / "r.html").read_text()
    assert "test_call[7]" in html and "the results are partial" in html
    markdown = (tester.path / "r.md").read_text().splitlines()
    assert markdown[2].startswith("> ⚠️ **Partial run**: the run was interrupted"), markdown


def test_a_worker_that_finishes_cleanly_leaves_the_run_whole(tester: pytest.Pytester) -> None:
    result = tester.runpytest("-n", "2", "--latency-sim=instant", "--latency-markdown=r.md")
    result.assert_outcomes(passed=10)
    assert "Partial run" not in (tester.path / "r.md").read_text()


def _deterministic(data: dict[str, Any]) -> Any:
    """What must not depend on how tests were distributed: per test, its call and token counts;
    per group and for the session, call counts and token statistics."""

    def tokens(block: dict[str, Any]) -> Any:
        return {
            m: {k: v for k, v in block["metrics"][m].items() if k != "hdr"}
            for m in ("input_tokens", "output_tokens")
            if m in block["metrics"]
        }

    tests = sorted(
        (t["nodeid"], t["call_count"], t["error_count"], json.dumps(tokens(t), sort_keys=True))
        for t in data["tests"]
    )
    groups = {k: (g["call_count"], tokens(g)) for k, g in data["groups"].items()}
    return tests, groups, data["session"]["call_count"], tokens(data["session"])


def test_serial_and_distributed_runs_aggregate_identically(tester: pytest.Pytester) -> None:
    runs = {}
    for workers in ("0", "4"):
        result = tester.runpytest(
            "-n", workers, "--latency-sim=instant", f"--latency-json=r{workers}.json"
        )
        result.assert_outcomes(passed=10)
        runs[workers] = _load(tester.path / f"r{workers}.json")
    assert _deterministic(runs["0"]) == _deterministic(runs["4"])
    ttft = [runs[w]["session"]["metrics"]["ttft"]["count"] for w in runs]
    assert ttft == [12, 12]


LATE_CALLS = """
import pytest

PROMPT = [{"role": "user", "content": "hi"}]


def ask(client):
    client.messages.create(model="claude-test", max_tokens=16, messages=PROMPT)


@pytest.fixture
def cleanup_call(anthropic_client):
    yield
    ask(anthropic_client)


@pytest.fixture
def broken(anthropic_client):
    ask(anthropic_client)
    raise RuntimeError("setup fails after a call")


def test_body_and_teardown(anthropic_client, cleanup_call):
    ask(anthropic_client)


def test_teardown_only(cleanup_call):
    pass


def test_setup_fails(broken):
    pass
"""


@pytest.mark.parametrize("workers", ["0", "2"])
def test_calls_made_after_the_call_report_are_kept(pytester: pytest.Pytester, workers: str) -> None:
    # Fixture teardown runs after the call report has gone (to the controller, under xdist);
    # a failed setup has no call report at all. Their calls ride on the teardown report.
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_late=LATE_CALLS)
    result = pytester.runpytest("-n", workers, "--latency-sim=instant", "--latency-json=r.json")
    result.assert_outcomes(passed=2, errors=1)
    data = _load(pytester.path / "r.json")
    tests = {t["nodeid"].split("::")[-1]: t for t in data["tests"]}
    counts = {name: (t["call_count"], t["unsampled_call_count"]) for name, t in tests.items()}
    assert counts == {
        "test_body_and_teardown": (1, 1),
        "test_teardown_only": (0, 1),
        "test_setup_fails": (0, 1),
    }
    assert tests["test_setup_fails"]["outcome"] == "failed"
    assert data["session"]["call_count"] == 1  # the body's: fixture calls are never pooled


LOGGED_AFTER_THE_PHASES = """
import pytest
from _pytest.runner import runtestprotocol


# What pytest-rerunfailures and pytest-forked do: run all three phases, then log the reports.
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in runtestprotocol(item, nextitem=nextitem, log=False):
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
"""


def test_reports_logged_after_the_phases_keep_body_and_fixture_calls_apart(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(LOGGED_AFTER_THE_PHASES)
    pytester.makepyfile(test_late=LATE_CALLS)
    result = pytester.runpytest("--latency-sim=instant", "--latency-json=r.json")
    result.assert_outcomes(passed=2, errors=1)
    tests = {t["nodeid"].split("::")[-1]: t for t in _load(pytester.path / "r.json")["tests"]}
    counts = {name: (t["call_count"], t["unsampled_call_count"]) for name, t in tests.items()}
    assert counts == {
        "test_body_and_teardown": (1, 1),
        "test_teardown_only": (0, 1),
        "test_setup_fails": (0, 1),
    }


def test_setup_only_runs_count_no_body_calls(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_late=LATE_CALLS)
    result = pytester.runpytest("--setup-only", "--latency-sim=instant", "--latency-json=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the broken fixture still fails
    data = _load(pytester.path / "r.json")
    assert {t["nodeid"].split("::")[-1]: t["call_count"] for t in data["tests"]} == {
        "test_body_and_teardown": 0,
        "test_teardown_only": 0,
        "test_setup_fails": 0,
    }
    assert data["session"]["call_count"] == 0


def test_values_recorded_in_teardown_are_never_budgeted(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_manual="""
        import pytest

        @pytest.fixture
        def slow_cleanup(latency):
            yield
            latency.record("ttft", 5.0)  # a fixture's value: kept, never pooled

        @pytest.mark.latency("ttft.max < 300ms")
        def test_fast(slow_cleanup, latency):
            latency.record("ttft", 0.1)
        """
    )
    (pytester.path / "budgets.toml").write_text('[session]\nexpect = ["ttft.max < 300ms"]\n')
    result = pytester.runpytest("--latency-budget=budgets.toml", "--latency-json=r.json")
    result.assert_outcomes(passed=1)
    assert result.ret == 0  # the session budget saw the body's value only
    [test] = _load(pytester.path / "r.json")["tests"]
    assert test["metrics"]["ttft"]["count"] == 1


CONTROLLER_THREAD = """
import threading

import httpx2

from pytest_latency import instrument
from pytest_latency.sim import LatencyModel, SimServer


def pytest_sessionstart(session):
    if hasattr(session.config, "workerinput"):
        return  # only the controller pings
    server = SimServer(LatencyModel.preset("instant"))
    server.start()
    client = instrument(httpx2.Client())
    stop = threading.Event()

    def ping():
        while not stop.wait(0.005):
            client.get(server.base_url + "/_sim/truth")

    thread = threading.Thread(target=ping, daemon=True)
    thread.start()
    session.config.add_cleanup(server.stop)
    session.config.add_cleanup(thread.join)
    session.config.add_cleanup(stop.set)
"""


def test_an_xdist_controller_credits_its_own_calls_to_no_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONTROLLER_THREAD)
    pytester.makepyfile(
        test_quiet="""
        import time
        import pytest

        @pytest.mark.parametrize("i", range(6))
        def test_quiet(i):
            time.sleep(0.02)
        """
    )
    result = pytester.runpytest_subprocess("-n", "2", "--latency-json=r.json")
    result.assert_outcomes(passed=6)
    data = _load(pytester.path / "r.json")
    assert data["tests"] == [] and data["session"]["call_count"] == 0


@pytest.mark.skipif(not hasattr(pytest, "SubtestReport"), reason="subtests are built in from 9.0")
def test_subtests_calls_stay_with_their_test(pytester: pytest.Pytester) -> None:
    # Each subtest block gets a call-phase report of its own; the calls are the test's samples.
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_sub="""
        def test_each_model(subtests, anthropic_client):
            for model in ("a", "b"):
                with subtests.test(model=model):
                    anthropic_client.messages.create(
                        model=model, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
                    )
        """
    )
    result = pytester.runpytest("--latency-sim=instant", "--latency-json=r.json")
    assert result.ret == 0
    data = _load(pytester.path / "r.json")
    assert [(t["nodeid"], t["call_count"]) for t in data["tests"]] == [
        ("test_sub.py::test_each_model", 2)
    ]
    assert data["session"]["call_count"] == 2


def test_a_malformed_baseline_is_a_usage_error_naming_file_and_field(
    tester: pytest.Pytester,
) -> None:
    """It passed the old check: every test ran, then INTERNALERROR at the comparison."""
    tester.runpytest("--latency-sim=instant", "--latency-save=base.json").assert_outcomes(passed=10)
    data = json.loads((tester.path / "base.json").read_text())
    data["tests"][0]["metrics"] = ["not", "an", "object"]
    (tester.path / "base.json").write_text(json.dumps(data))
    result = tester.runpytest("--latency-sim=instant", "--latency-baseline=base.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert (
        "--latency-baseline: base.json: malformed result file: "
        "tests[0].metrics: expected an object, got a list" in err
    ), err
    assert "INTERNALERROR" not in result.stdout.str() + err and "Traceback" not in err
    result.stdout.no_fnmatch_line("*passed*")
