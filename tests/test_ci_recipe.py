"""docs/ci.md's whole flow, run command by command as the docs give it (issue #16: every command
in docs/ci.md is run by a test): a baseline on main, two shards gated against it, the merge
that judges the `[session]` budgets again, the run-wide compare and the PR comment's files.

The commands are read from the docs' block, so the docs cannot drift from what works. Two
changes only, both for a machine with no provider: every `pytest` line also gets
`--latency-sim=instant` (the built-in simulator stands in for the API), and the suite's pace
comes from $DECODE_MS, so the pull request can be made slower than main."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

DOCS = Path(__file__).parent.parent / "docs" / "ci.md"

CHAT = """
import os
import pytest

@pytest.fixture
def paced(llm_sim):
    llm_sim.set_model(llm_sim.model.replace(
        ttfb_ms=1.0, decode_ms_per_token=float(os.environ["DECODE_MS"]), output_tokens=6,
        jitter=0.05, seed=3))
    return llm_sim

@pytest.mark.latency("e2e.max < 10s", samples=8)
def test_answer(openai_client, paced):
    for _ in openai_client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}], stream=True):
        pass
"""
AGENT = CHAT.replace("test_answer", "test_agent_step")
SAMPLES = 8
BUDGETS = """
[session]
expect = ["error_rate < 50%", "e2e.p50 < 10s", "itl.p50 < 8ms"]
"""


def _commands() -> list[list[str]]:
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"<!-- Every command in this block is run.*?```bash\n(.*?)```", text, re.S)
    assert block, "docs/ci.md lost its whole-flow block"
    lines = [ln for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]
    return [shlex.split(line) for line in lines]


def _run(argv: list[str], cwd: Path, decode_ms: float) -> subprocess.CompletedProcess[str]:
    if argv[0] == "pytest":
        argv = [
            sys.executable,
            "-m",
            "pytest",
            *argv[1:],
            "--latency-sim=instant",
            "-p",
            "no:cacheprovider",
        ]
    elif argv[0] == "pytest-latency":
        argv = [sys.executable, "-m", "pytest_latency.cli", *argv[1:]]
    env = {**os.environ, "DECODE_MS": str(decode_ms)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _project(root: Path) -> None:
    (root / "tests" / "latency").mkdir(parents=True)
    (root / "tests" / "latency" / "test_chat.py").write_text(CHAT)
    (root / "tests" / "latency" / "test_agent.py").write_text(AGENT)
    (root / "budgets.toml").write_text(BUDGETS)
    (root / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


def test_the_docs_block_holds_the_whole_flow() -> None:
    tools = [(argv[0], argv[1] if argv[0] == "pytest-latency" else "") for argv in _commands()]
    assert tools == [
        ("pytest", ""),
        ("pytest", ""),
        ("pytest", ""),
        ("pytest-latency", "merge"),
        ("pytest-latency", "compare"),
        ("pytest-latency", "report"),
    ]


def test_the_whole_flow_fails_a_slower_pull_request_at_every_step(tmp_path: Path) -> None:
    # Each command runs once (a pytest process with the SDKs costs seconds); that the same
    # steps pass an unchanged run is covered where it is cheap: test_results.py (merge judges
    # the session budgets again as one run would), test_plugin_ci.py (an unchanged run is not
    # a regression).
    _project(tmp_path)
    main, *pull_request = _commands()
    done = _run(main, tmp_path, decode_ms=3.0)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    baseline = json.loads((tmp_path / "baseline.json").read_text())
    assert [b["status"] for b in baseline["session"]["budgets"]] == ["pass"] * 3

    # The pull request decodes four times slower.
    statuses = {}
    for argv in pull_request:
        statuses[" ".join(argv[:2])] = done = _run(argv, tmp_path, decode_ms=12.0)
        assert done.returncode in (0, 1), (argv, done.stdout[-2000:], done.stderr[-2000:])
    shard = statuses["pytest tests/latency/test_chat.py"]
    assert shard.returncode == 1 and "regression(s) against the baseline" in shard.stdout

    # The session's itl budget, judged again over both shards' gaps, fails the merge.
    merge = statuses["pytest-latency merge"]
    assert merge.returncode == 1, merge.stderr
    assert "latency budget(s) failed in the merged run" in merge.stderr
    result = json.loads((tmp_path / "latency.json").read_text())
    session = result["session"]["budgets"]
    assert [b["expr"] for b in session] == ["error_rate < 50%", "e2e.p50 < 10s", "itl.p50 < 8ms"]
    assert all(b["shards"] == 2 for b in session)  # one row each, judged over both shards
    missed = session[2]
    assert missed["status"] == "fail" and missed["n"] == 2 * SAMPLES * 5  # 5 gaps a call
    assert result["session"]["call_count"] == 2 * SAMPLES

    # The run-wide compare names the tests and the session; report writes the PR's files.
    compare = statuses["pytest-latency compare"]
    assert compare.returncode == 1, compare.stdout
    diff = (tmp_path / "diff.md").read_text()
    assert diff.startswith("🔴") and "\\(session\\)" in diff and "test\\_answer" in diff
    assert statuses["pytest-latency report"].returncode == 0
    markdown = (tmp_path / "latency.md").read_text()
    assert markdown.startswith("❌ **pytest-latency: 1 of 5 latency budgets failed; ")
    assert "itl.p50 &lt; 8ms" in markdown and "session, shard" not in markdown
    assert (tmp_path / "latency.html").read_text().startswith("<!DOCTYPE html>")


# ---- the GitHub Actions workflow -----------------------------------------------------------------


def _workflow() -> dict[Any, Any]:
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"## GitHub Actions\n\n```yaml\n(.*?)```", text, re.S)
    assert block, "docs/ci.md lost its GitHub Actions workflow"
    workflow: dict[Any, Any] = yaml.safe_load(block.group(1))
    return workflow


def _step(steps: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (step,) = [s for s in steps if s.get("name") == name]
    return step


def test_the_github_workflow_runs_the_gate_and_hands_its_files_on(tmp_path: Path) -> None:
    """The workflow in docs/ci.md, read as YAML as Actions reads it, its steps run here: the gate
    step's command (plus the simulator, as above) fails the job on a missed budget and writes
    the files the upload and comment steps name; the comment step's shell line, run with a
    stand-in `gh`, falls back to a new comment when there is none to edit; every package the
    install step names is the project or one its own dev extra installs."""
    workflow = _workflow()
    # YAML 1.1 reads the bare key `on` as true; Actions reads it as "on".
    assert workflow.get("on", workflow.get(True)) == "pull_request"
    steps = workflow["jobs"]["latency"]["steps"]

    install = next(s["run"] for s in steps if str(s.get("run", "")).startswith("pip install"))
    project = tomllib.loads((DOCS.parent.parent / "pyproject.toml").read_text(encoding="utf-8"))
    dev = {re.split(r"[<>=\[ ]", d)[0] for d in project["project"]["optional-dependencies"]["dev"]}
    assert set(shlex.split(install)[2:]) <= {project["project"]["name"]} | dev

    _project(tmp_path)
    (tmp_path / "budgets.toml").write_text('[session]\nexpect = ["itl.p50 < 1ms"]\n')
    gate = _step(steps, "Latency gate")
    assert set(gate["env"]) == {"ANTHROPIC_API_KEY", "OPENAI_API_KEY"}
    summary = tmp_path / "step-summary.md"
    argv = [*shlex.split(gate["run"]), "--latency-sim=instant", "-p", "no:cacheprovider"]
    assert argv[0] == "pytest"
    env = {**os.environ, "DECODE_MS": "3.0", "GITHUB_ACTIONS": "true"}
    env["GITHUB_STEP_SUMMARY"] = str(summary)
    done = subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, (done.stdout[-2000:], done.stderr[-2000:])
    assert re.search(r"^::error file=budgets\.toml,line=2,.*itl\.p50", done.stdout, re.M), (
        done.stdout[-2000:]
    )
    markdown = (tmp_path / "latency.md").read_text()
    assert markdown.startswith("❌ **pytest-latency: 1 of 3 latency budgets failed")  # + e2e.max
    assert markdown in summary.read_text()  # the job summary got the same Markdown

    upload = _step(steps, "Upload the report")
    assert upload["if"] == "always()"
    for path in upload["with"]["path"].split():
        assert (tmp_path / path).stat().st_size > 0, path

    comment = _step(steps, "Comment the summary on the pull request")
    line = re.sub(r"\$\{\{ github\.event\.pull_request\.number \}\}", "7", comment["run"])
    assert "${{" not in line
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "gh.log"
    # No earlier comment to edit: `gh pr comment --edit-last` fails, as the real one does.
    (bin_dir / "gh").write_text(
        f'#!/bin/sh\necho "$@" >> {shlex.quote(str(log))}\n'
        'case "$*" in *--edit-last*) exit 1;; esac\n'
        'test -s "$5" || exit 2\n'
    )
    (bin_dir / "gh").chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    shell = subprocess.run(
        ["bash", "-c", line], cwd=tmp_path, env={**os.environ, "PATH": path}, timeout=30
    )
    assert shell.returncode == 0
    assert log.read_text().splitlines() == [
        "pr comment 7 --body-file latency.md --edit-last",
        "pr comment 7 --body-file latency.md",
    ]
