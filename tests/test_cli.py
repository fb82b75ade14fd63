"""The `pytest-latency` console script: report, merge, compare, and clean errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

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


def test_merge_combines_shards(shards: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "all.json"
    assert main(["merge", str(shards[0]), str(shards[1]), "-o", str(out)]) == 0
    merged = load_result(out)
    assert len(merged["tests"]) == 5 and merged["run"]["shards"] == 2


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


def _limit_file_size(limit: int) -> None:
    # In the child only: a write past `limit` bytes fails with EFBIG, as on a full disk.
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_write_failure_names_the_file_keeps_the_old_one_and_exits_2(
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
    assert done.returncode == 2
    assert done.stderr == f"pytest-latency: error: {html}: cannot write: File too large\n"
    assert html.read_text() == "the old report"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_full_disk_is_one_line_naming_the_output(
    shards: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = tmp_path / "all.json"
    full.symlink_to("/dev/full")  # every write: ENOSPC
    assert main(["merge", str(shards[0]), str(shards[1]), "-o", str(full)]) == 2
    assert capsys.readouterr().err == (
        f"pytest-latency: error: {full}: cannot write: No space left on device\n"
    )
    diff = tmp_path / "diff.md"
    diff.symlink_to("/dev/full")
    assert main(["compare", str(shards[0]), str(shards[1]), "-o", str(diff)]) == 2
    assert f"{diff}: cannot write: No space left on device" in capsys.readouterr().err
