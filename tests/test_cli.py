"""The `pytest-latency` console script: report, merge, compare, and clean errors on bad input."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from latency_data import build, make_test, sample_tests

from pytest_latency.cli import main
from pytest_latency.results import load_result, write_result


@pytest.fixture
def shards(tmp_path: Path) -> tuple[Path, Path]:
    tests = sample_tests()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_result(a, build(tests[:2]))
    write_result(b, build(tests[2:]))
    return a, b


def test_report_writes_html_and_markdown(shards: tuple[Path, Path], tmp_path: Path) -> None:
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    assert main(["report", str(shards[0]), "-o", str(html), "--markdown", str(md)]) == 0
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert "latency budgets failed" in md.read_text()


def test_merge_combines_shards(
    shards: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "all.json"
    # sample_tests has a failing TTFT budget: the merged run failed, and merge says so.
    assert main(["merge", str(shards[0]), str(shards[1]), "-o", str(out)]) == 1
    assert "1 latency budget(s) failed in the merged run" in capsys.readouterr().err
    merged = load_result(out)
    assert len(merged["tests"]) == 5 and merged["run"]["shards"] == 2
    passing = tmp_path / "passing.json"
    write_result(passing, build([make_test("t.py::ok", seed=1)]))
    assert main(["merge", str(passing), str(passing), "-o", str(out)]) == 0


def test_compare_exit_status_follows_regressions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, head, same = tmp_path / "base.json", tmp_path / "head.json", tmp_path / "same.json"
    write_result(base, build([make_test("t.py::t", seed=1, samples=40)]))
    write_result(
        head,
        build([make_test("t.py::t", seed=2, samples=40, ttft_ms=900)]),
    )
    write_result(same, build([make_test("t.py::t", seed=3, samples=40)]))
    assert main(["compare", str(base), str(head)]) == 1
    assert "regression" in capsys.readouterr().out
    diff = tmp_path / "diff.md"
    assert main(["compare", str(base), str(same), "--tolerance", "10%", "-o", str(diff)]) == 0
    assert diff.read_text().startswith("✅")
    # A tolerance beyond the slowdown: not a regression.
    assert main(["compare", str(base), str(head), "--tolerance", "500%", "-o", str(diff)]) == 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "missing.json: no such file"),
        ("{not json", "not valid JSON"),
        ('{"schema": "other"}', "not a pytest-latency result file"),
        (
            json.dumps(
                {
                    "schema": "pytest-latency/1",
                    "run": {},
                    "tests": [],
                    "groups": {},
                    "session": {"metrics": {"ttft": {"hdr": "garbage"}}},
                }
            ),
            "malformed result file: session.metrics.ttft",
        ),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, expected: str
) -> None:
    path = tmp_path / "missing.json"
    if content is not None:
        path.write_text(content)
    good = tmp_path / "good.json"
    write_result(good, build([]))
    for argv in (
        ["report", str(path), "-o", str(tmp_path / "x.html")],
        ["merge", str(good), str(path), "-o", str(tmp_path / "x.json")],
        ["compare", str(good), str(path)],
    ):
        if content is not None and "garbage" in content and argv[0] == "report":
            continue  # a report of an empty session does not read the histogram
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert expected in err
        assert str(path) in err


def test_sim_is_still_there(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["sim", "--help"])
    assert info.value.code == 0
    assert "--preset" in capsys.readouterr().out


def test_sim_on_a_port_in_use_is_one_line_and_a_failure() -> None:
    # Issue #16: a 24-line traceback. A subprocess: `sim` tunes the garbage collector for a
    # server process, which this one is not.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "pytest_latency.cli", "sim", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done
    assert done.stderr == (
        f"pytest-latency: error: sim: cannot listen on 127.0.0.1:{port}: "
        f"{os.strerror(errno.EADDRINUSE)}\n"
    )
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("tolerance", "reason"),
    [("lots", "expected a number or a percentage"), ("2000%", "must be between 0% and 1000%")],
)
def test_a_bad_tolerance_is_a_usage_error(
    shards: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tolerance: str, reason: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["compare", str(shards[0]), str(shards[1]), "--tolerance", tolerance])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --tolerance: not a tolerance: '{tolerance}' ({reason}" in err, err


def _damaged(tmp_path: Path, change: Any) -> Path:
    data = json.loads(json.dumps(build(sample_tests())))
    change(data)
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(data).replace('"__deep__"', "[" * 50_000 + "]" * 50_000))
    return path


def _set(*steps: Any, value: Any) -> Any:
    def change(data: Any) -> None:
        for step in steps[:-1]:
            data = data[step]
        data[steps[-1]] = value

    return change


@pytest.mark.parametrize(
    ("change", "field"),
    [
        # The AttributeError tracebacks of issue #15, one per field it named.
        (
            _set("tests", 1, "metrics", value=[1]),
            "tests[1].metrics: expected an object, got a list",
        ),
        (_set("tests", 0, "budgets", value={"x": 1}), "tests[0].budgets: expected a list"),
        (_set("run", "versions", value="3.11"), "run.versions: expected an object, got a string"),
        (_set("session", "budgets", value=7), "session.budgets: expected a list, got an integer"),
        (_set("tests", 2, "cache_read_ratio", value=0.5), "tests[2].cache_read_ratio: expected"),
        (_set("session", "cache_read_ratio", value=None), "session.cache_read_ratio: expected"),
        # The RecursionError traceback: 50,000 levels deep.
        (_set("tests", 0, "what_ifs", value="__deep__"), "not valid JSON: nested too deeply"),
        (
            _set(
                "tests",
                0,
                "findings",
                value=[{"kind": "x", "evidence": json.loads("[" * 40 + "]" * 40)}],
            ),
            "tests[0].findings[0].evidence: expected an object, got a list",
        ),
        # The garbage `hdr` merge passed through, and numbers no reader can use.
        (
            _set("tests", 0, "metrics", "ttft", "hdr", value="HISTFAAAgarbage"),
            "tests[0].metrics.ttft.hdr: not an HdrHistogram V2 blob",
        ),
        (
            _set("tests", 0, "metrics", "ttft", "count", value=-3),
            "tests[0].metrics.ttft.count: count -3 out of range",
        ),
        (
            _set("tests", 0, "metrics", "ttft", "p50", value=10**30),
            "tests[0].metrics.ttft.p50: number out of range",
        ),
        (
            _set("groups", "model=claude-sonnet-4-5", "call_count", value="9"),
            "groups['model=claude-sonnet-4-5'].call_count: expected an integer",
        ),
        (
            _set("tests", 0, "budgets", 0, "status", value="meh"),
            "tests[0].budgets[0].status: expected one of pass, fail, inconclusive",
        ),
    ],
)
def test_a_damaged_file_is_one_line_naming_file_and_field_for_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, field: str
) -> None:
    bad = _damaged(tmp_path, change)
    good = tmp_path / "good.json"
    write_result(good, build(sample_tests()))
    for argv in (
        ["report", str(bad), "--markdown", str(tmp_path / "x.md")],
        ["merge", str(good), str(bad), "-o", str(tmp_path / "x.json")],
        ["compare", str(good), str(bad)],
        ["compare", str(bad), str(good)],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"pytest-latency: error: {bad}: "), err
        assert field in err, err
    assert not (tmp_path / "x.json").exists()  # merge wrote nothing from a damaged shard


def test_compare_reads_counts_no_list_could_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A count of 2^40 in a well-formed 44-byte blob: compared from the counts (it was an
    instant MemoryError; 10^8 took 4 GB), with the regression found."""
    import time
    import tracemalloc
    from collections import Counter

    from pytest_latency import histogram

    base = build([make_test("t.py::t", seed=1, samples=40)])
    head = json.loads(json.dumps(base))
    for result, index in ((base, 2000), (head, 2400)):
        block = result["tests"][0]["metrics"]["ttft"]
        block["hdr"] = histogram._encode(Counter({index: 2**40}))
        block["count"] = 2**40
    head["tests"][0]["metrics"]["ttft"]["p50"] *= 2
    write_result(tmp_path / "base.json", base)
    write_result(tmp_path / "head.json", head)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        status = main(["compare", str(tmp_path / "base.json"), str(tmp_path / "head.json")])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 5
    assert peak < 32 << 20, peak
    assert status == 1 and "ttft" in capsys.readouterr().out


def test_compare_p_values_are_those_of_the_values_the_histograms_hold() -> None:
    """On small files, the p-value compare reports from the histograms equals the rank test on
    the values the histograms hold, expanded."""
    from pytest_latency import stats
    from pytest_latency.histogram import LatencyHistogram
    from pytest_latency.results import compare_results

    base = build([make_test("t.py::t", seed=1, samples=12)])
    head = build([make_test("t.py::t", seed=2, samples=12, ttft_ms=700)])
    found = {
        c.metric: c.p_value for c in compare_results(base, head).changes if c.nodeid == "t.py::t"
    }
    assert found
    for metric, p_value in found.items():
        expanded = [
            [
                v
                for v, c in LatencyHistogram.decode(
                    r["tests"][0]["metrics"][metric]["hdr"]
                ).buckets()
                for _ in range(c)
            ]
            for r in (head, base)
        ]
        assert p_value == stats.mann_whitney_u(*expanded, alternative="greater").p_value, metric


def _limit_file_size(limit: int) -> None:
    # In the child only: a write past `limit` bytes fails with EFBIG, as on a full disk.
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_write_failure_names_the_file_keeps_the_old_one_and_exits_3(
    shards: tuple[Path, Path], tmp_path: Path
) -> None:
    """`ulimit -f 20`: the report is larger than 20 KB."""
    import subprocess
    import sys

    html = tmp_path / "r.html"
    html.write_text("the old report")
    done = subprocess.run(
        [sys.executable, "-m", "pytest_latency.cli", "report", str(shards[0]), "-o", str(html)],
        preexec_fn=lambda: _limit_file_size(20 * 1024),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3
    assert done.stderr == f"pytest-latency: error: {html}: cannot write: File too large\n"
    assert html.read_text() == "the old report"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_full_disk_is_one_line_naming_the_output(
    shards: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = tmp_path / "all.json"
    full.symlink_to("/dev/full")  # every write: ENOSPC
    passing = tmp_path / "passing.json"
    write_result(passing, build([make_test("t.py::t", seed=1)]))
    assert main(["merge", str(passing), "-o", str(full)]) == 3
    assert capsys.readouterr().err == (
        f"pytest-latency: error: {full}: cannot write: No space left on device\n"
    )
    # A merged run whose budgets failed keeps its own status, and still says why it has no file.
    assert main(["merge", str(shards[0]), str(shards[1]), "-o", str(full)]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"pytest-latency: error: {full}: cannot write: No space left on device"
    )
    diff = tmp_path / "diff.md"
    diff.symlink_to("/dev/full")
    assert main(["compare", str(shards[0]), str(shards[1]), "-o", str(diff)]) == 3
    assert f"{diff}: cannot write: No space left on device" in capsys.readouterr().err


def test_report_attempts_every_output_and_names_each_that_failed(
    shards: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A full disk under the HTML report costs not the Markdown summary; the status is the
    plugin's for an output that could not be written, not the one for bad input."""
    full_html, md = tmp_path / "r.html", tmp_path / "r.md"
    full_html.symlink_to("/dev/full")
    assert main(["report", str(shards[0]), "-o", str(full_html), "--markdown", str(md)]) == 3
    assert capsys.readouterr().err == (
        f"pytest-latency: error: {full_html}: cannot write: No space left on device\n"
    )
    assert "latency budgets failed" in md.read_text()
    full_md = tmp_path / "full.md"
    full_md.symlink_to("/dev/full")
    missing = tmp_path / "gone" / "r.html"
    assert main(["report", str(shards[0]), "-o", str(missing), "--markdown", str(full_md)]) == 3
    assert capsys.readouterr().err.splitlines() == [
        f"pytest-latency: error: {missing}: cannot write: No such file or directory",
        f"pytest-latency: error: {full_md}: cannot write: No space left on device",
    ]


def test_compare_keeps_its_regression_status_when_the_diff_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, head = tmp_path / "base.json", tmp_path / "head.json"
    write_result(base, build([make_test("t.py::t", seed=1, samples=40)]))
    write_result(head, build([make_test("t.py::t", seed=2, samples=40, ttft_ms=900)]))
    diff = tmp_path / "diff.md"
    diff.symlink_to("/dev/full")
    assert main(["compare", str(base), str(head), "-o", str(diff)]) == 1
    assert f"{diff}: cannot write: No space left on device" in capsys.readouterr().err
