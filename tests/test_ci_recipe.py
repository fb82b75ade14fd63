"""docs/ci.md's whole flow, run command by command as the docs give it (issue #16: every command
in docs/ci.md is run by a test): a baseline on main, two shards gated against it, the merge
that judges the `[session]` budgets again, the run-wide compare and the PR comment's files.

The commands are read from the docs' block, so the docs cannot drift from what works. Two
changes only, both for a machine with no provider: every `pytest` line also gets
`--latency-sim=instant` (the built-in simulator stands in for the API), and the suite's pace
comes from $DECODE_MS, so the pull request can be made slower than main. The GitHub Actions
workflow in the same file is run job by job and step by step the same way (below)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
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


def test_every_shell_command_in_the_docs_is_in_the_block_run_here() -> None:
    # The workflow's steps are run below; any other shell block would be a command no test runs.
    text = DOCS.read_text(encoding="utf-8")
    blocks = re.findall(r"^```(bash|sh|shell|console)\n", text, re.M)
    assert blocks == ["bash"], blocks


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
    # Each shard fails on its own test's regression against main's baseline.
    for path, test in (("test_chat.py", "test_answer"), ("test_agent.py", "test_agent_step")):
        shard = statuses[f"pytest tests/latency/{path}"]
        assert shard.returncode == 1, (path, shard.stdout[-2000:])
        assert "regression(s) against the baseline baseline.json" in shard.stdout, path
        assert re.search(rf"^tests/latency/{path}::{test}: \w+ slower by ", shard.stdout, re.M)

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
#
# The workflow is read as YAML, as Actions reads it, and its jobs are run here as a runner would:
# each job in a workspace of its own (one per matrix entry), `needs` and `if:` honoured (a step
# without a status function runs only while every earlier one passed), `run:` steps through bash
# with `${{ … }}` filled in, the steps that `uses:` an action played by a few lines each, and `gh`
# a stand-in that serves main's artifacts and logs the PR comment. Two changes for a machine
# with no provider, as above: PYTEST_ADDOPTS adds the simulator, and $DECODE_MS sets the pace.

CHECKOUT, SETUP_PYTHON = "actions/checkout@v4", "actions/setup-python@v5"
UPLOAD, DOWNLOAD = "actions/upload-artifact@v4", "actions/download-artifact@v4"
RUN_ID = "4242"  # the id the stand-in `gh run list` gives main's last good run

STANDIN_GH = """
import os, pathlib, shutil, sys

args = sys.argv[1:]
with open(os.environ["STANDIN_LOG"], "a", encoding="utf-8") as log:
    print(" ".join(args), file=log)
artifacts = pathlib.Path(os.environ["STANDIN_ARTIFACTS"])
assert os.environ.get("GH_TOKEN"), "gh needs GH_TOKEN"
if args[:2] == ["run", "list"]:
    # Main's last good run of this workflow, asked for as the docs ask for it.
    asked = dict(zip(args[2::2], args[3::2]))
    wanted = {"--workflow": "latency.yml", "--branch": "main", "--event": "push",
              "--status": "success", "--json": "databaseId", "--jq": ".[0].databaseId"}
    if any(asked.get(flag) != value for flag, value in wanted.items()):
        sys.exit(1)
    print(RUN_ID)
    sys.exit(0)
if args[:2] == ["run", "download"]:
    if args[2] != RUN_ID or args[3] != "--name":
        sys.exit(1)
    for path in (artifacts / args[4]).iterdir():  # one artifact: into the current directory
        shutil.copy(path, path.name)
    sys.exit(0)
if args[:2] == ["pr", "comment"]:
    if "--edit-last" in args:  # no earlier comment to edit: fails, as the real one does
        sys.exit(1)
    body = pathlib.Path(args[args.index("--body-file") + 1])
    shutil.copy(body, pathlib.Path(os.environ["STANDIN_LOG"]).with_name("comment.md"))
    sys.exit(0 if body.stat().st_size else 2)
sys.exit(3)
"""


def _workflow() -> dict[Any, Any]:
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"## GitHub Actions\n\n.*?```yaml\n(.*?)```", text, re.S)
    assert block, "docs/ci.md lost its GitHub Actions workflow"
    workflow: dict[Any, Any] = yaml.safe_load(block.group(1))
    return workflow


def _lookup(path: str, context: dict[str, Any]) -> Any:
    if path.startswith("secrets."):
        return "stand-in-secret"
    value: Any = context
    for part in path.split("."):
        assert isinstance(value, dict) and part in value, f"the workflow uses {path}"
        value = value[part]
    return value


def _fill(text: str, context: dict[str, Any]) -> str:
    return re.sub(r"\$\{\{\s*([\w.-]+)\s*\}\}", lambda m: str(_lookup(m[1], context)), text)


_TERM = re.compile(r"(?:(always|success|failure|cancelled)\(\)|([\w.]+) (==|!=) '([^']*)')")


def _if(expression: str | None, context: dict[str, Any], ok: bool) -> bool:
    """An `if:` as Actions evaluates it, for the forms the workflow uses (terms joined by `&&`:
    a status function, or a context compared with a string); without a status function it
    means `success() && …`. Any other form fails the test, so the docs cannot outgrow it."""
    if expression is None:
        return ok
    status = {"always": True, "success": ok, "failure": not ok, "cancelled": False}
    value, has_status = True, False
    for term in expression.split("&&"):
        m = _TERM.fullmatch(term.strip())
        assert m, f"this test cannot evaluate `if: {expression}`"
        function, name, op, string = m.groups()
        if function:
            has_status, value = True, value and status[function]
        else:
            value = value and ((_lookup(name, context) == string) == (op == "=="))
    return value if has_status else ok and value


def _paths(spec: str) -> list[str]:
    return [line.strip() for line in spec.splitlines() if line.strip()]


class _Runner:
    """Runs the workflow's jobs for one event, all of them, in `needs` order."""

    def __init__(self, root: Path, workflow: dict[Any, Any], event: str, decode_ms: float):
        self.root, self.workflow, self.event = root, workflow, event
        self.artifacts = root / "artifacts" / event
        self.artifacts.mkdir(parents=True)
        self.log = root / f"gh-{event}.log"
        bin_dir = root / "bin"
        if not bin_dir.exists():
            bin_dir.mkdir()
            gh = bin_dir / "gh"
            gh.write_text(f"#!{sys.executable}\nRUN_ID = {RUN_ID!r}\n{STANDIN_GH}")
            gh.chmod(0o755)
        self.env = {
            **os.environ,
            "PATH": os.pathsep.join(
                [str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]]
            ),
            "PYTEST_ADDOPTS": "--latency-sim=instant -p no:cacheprovider",
            "DECODE_MS": str(decode_ms),
            "GITHUB_ACTIONS": "true",
            "STANDIN_LOG": str(self.log),
            "STANDIN_ARTIFACTS": str(root / "artifacts" / "push"),  # main's run
        }
        self.env.pop("GITHUB_STEP_SUMMARY", None)
        self.steps: dict[tuple[str, str], subprocess.CompletedProcess[str] | None] = {}
        self.jobs: dict[str, bool | None] = {}  # None: skipped
        self.workspaces: dict[str, Path] = {}
        self.summaries: dict[tuple[str, str], Path] = {}  # each step's $GITHUB_STEP_SUMMARY

    def ran(self, job: str, step: str) -> subprocess.CompletedProcess[str]:
        done = self.steps[job, step]
        assert done is not None, f"{job}: {step} did not run"
        return done

    def run(self) -> None:
        pending = dict(self.workflow["jobs"])
        while pending:
            name, job = next(
                (n, j) for n, j in pending.items() if all(d in self.jobs for d in _needs(j))
            )
            del pending[name]
            needs_ok = all(self.jobs[d] for d in _needs(job))
            context = {"github": self._github()}
            if not _if(job.get("if"), context, needs_ok):
                self.jobs[name] = None
                continue
            entries = job.get("strategy", {}).get("matrix", {}).get("include") or [None]
            results = [self._job(name, job, entry) for entry in entries]
            self.jobs[name] = all(results)

    def _github(self) -> dict[str, Any]:
        return {
            "event_name": self.event,
            "event": {"pull_request": {"number": 7}} if self.event == "pull_request" else {},
            "token": "stand-in-token",
        }

    def _job(self, name: str, job: dict[str, Any], matrix: dict[str, Any] | None) -> bool:
        label = name if matrix is None else f"{name}-{matrix['shard']}"
        work = self.root / "work" / self.event / label
        work.mkdir(parents=True)
        self.workspaces[label] = work
        context = {"github": self._github(), "matrix": matrix or {}}
        ok = True
        for i, step in enumerate(job["steps"]):
            key = (label, step.get("name") or step.get("uses") or step["run"].split()[0])
            if not _if(step.get("if"), context, ok):
                self.steps[key] = None
                continue
            self.summaries[key] = self.root / f"summary-{label}-{i}.md"
            done = self._step(step, context, work, self.summaries[key])
            self.steps[key] = done
            ok = ok and done.returncode == 0
        return ok

    def _step(
        self, step: dict[str, Any], context: dict[str, Any], work: Path, summary: Path
    ) -> subprocess.CompletedProcess[str]:
        def passed() -> subprocess.CompletedProcess[str]:
            return subprocess.CompletedProcess([], 0, "", "")

        with_ = {k: _fill(str(v), context) for k, v in step.get("with", {}).items()}
        uses = step.get("uses")
        if uses == CHECKOUT:
            for path in (self.root / "project").iterdir():
                copy = shutil.copytree if path.is_dir() else shutil.copy
                copy(path, work / path.name)
            return passed()
        if uses == SETUP_PYTHON:
            assert with_ == {"python-version": "3.12"}
            return passed()
        if uses == UPLOAD:
            target = self.artifacts / with_["name"]
            target.mkdir()
            for name in _paths(with_["path"]):
                assert (work / name).stat().st_size > 0, name  # stricter than Actions' warning
                shutil.copy(work / name, target / name)
            return passed()
        if uses == DOWNLOAD:
            assert set(with_) == {"pattern", "merge-multiple"} and step["with"]["merge-multiple"]
            for artifact in sorted(self.artifacts.glob(with_["pattern"])):
                for path in artifact.iterdir():
                    shutil.copy(path, work / path.name)
            return passed()
        assert uses is None, f"the workflow uses an action this test cannot play: {uses}"
        script = _fill(step["run"], context)
        if script.startswith("pip install"):
            _check_install(script)
            return passed()
        env = {**self.env, **{k: _fill(str(v), context) for k, v in step.get("env", {}).items()}}
        env["GITHUB_STEP_SUMMARY"] = str(summary)
        # Actions' default shell for `run:` on Linux.
        return subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )


def _needs(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def _check_install(script: str) -> None:
    """Every package an install step names is the project or one its own dev extra installs."""
    project = tomllib.loads((DOCS.parent.parent / "pyproject.toml").read_text(encoding="utf-8"))
    dev = {re.split(r"[<>=\[ ]", d)[0] for d in project["project"]["optional-dependencies"]["dev"]}
    assert set(shlex.split(script)[2:]) <= {project["project"]["name"]} | dev, script


def test_the_github_workflow_gates_a_pull_request_against_main_shards_merges_and_comments(
    tmp_path: Path,
) -> None:
    """The workflow in docs/ci.md, every job and step of it run here (above): a push to main
    saves the baseline as an artifact; a pull request four times slower fails each shard's gate
    on its regression against that baseline, and the merge job, run although the shards failed,
    judges the session budgets again over both shards, compares the whole run with main,
    renders the report and posts latency.md and diff.md as one comment."""
    workflow = _workflow()
    # YAML 1.1 reads the bare key `on` as true; Actions reads it as "on".
    on = workflow.get("on", workflow.get(True))
    assert on == {"push": {"branches": ["main"]}, "pull_request": None}
    assert workflow["jobs"]["merge"]["permissions"]["pull-requests"] == "write"
    _project(tmp_path / "project")

    main = _Runner(tmp_path, workflow, "push", decode_ms=3.0)
    main.run()
    assert main.jobs == {"baseline": True, "gate": None, "merge": None}
    saved = main.ran("baseline", "Save the baseline")
    assert saved.returncode == 0, saved.stdout[-2000:]
    baseline = json.loads((main.artifacts / "latency-baseline" / "baseline.json").read_text())
    assert [b["status"] for b in baseline["session"]["budgets"]] == ["pass"] * 3
    assert len(baseline["tests"]) == 2

    pr = _Runner(tmp_path, workflow, "pull_request", decode_ms=12.0)
    pr.run()
    assert pr.jobs == {"baseline": None, "gate": False, "merge": False}
    assert pr.log.read_text().splitlines()[:2] == [
        "run list --workflow latency.yml --branch main --event push --status success --limit 1 "
        "--json databaseId --jq .[0].databaseId",
        f"run download {RUN_ID} --name latency-baseline",
    ]
    for shard, test in (("1", "test_answer"), ("2", "test_agent_step")):
        gate = pr.ran(f"gate-{shard}", "Latency gate")
        assert gate.returncode == 1, (gate.stdout[-2000:], gate.stderr)
        assert "regression(s) against the baseline baseline.json" in gate.stdout
        assert re.search(
            rf"^::error file=tests/latency/.*title=latency regression::.*::{test}: ",
            gate.stdout,
            re.M,
        ), gate.stdout[-2000:]
        result = json.loads(
            (pr.artifacts / f"latency-shard-{shard}" / f"shard-{shard}.json").read_text()
        )
        assert [t["nodeid"].split("::")[1] for t in result["tests"]] == [test]
        assert result["baseline"]["regressions"], shard
        # The job summary got the shard's Markdown, regressions and all.
        summary = pr.summaries[f"gate-{shard}", "Latency gate"].read_text()
        assert summary.startswith("❌ **pytest-latency: ") and "### Regressions against" in summary

    merge = pr.ran("merge", "Merge the shards and judge the session budgets again")
    assert merge.returncode == 1, (merge.stdout, merge.stderr)
    assert "latency budget(s) failed in the merged run" in merge.stderr
    work = pr.workspaces["merge"]
    merged = json.loads((work / "latency.json").read_text())
    assert all(b["shards"] == 2 for b in merged["session"]["budgets"])
    compare = pr.ran("merge", "Compare the whole run with main")
    assert compare.returncode == 1, compare.stdout
    report = pr.ran("merge", "Render the report")
    assert report.returncode == 0, report.stderr
    assert pr.ran("merge", "Upload the report").returncode == 0
    assert sorted(p.name for p in (pr.artifacts / "latency-report").iterdir()) == [
        "diff.md",
        "latency.html",
        "latency.json",
    ]

    comment = pr.ran("merge", "Comment the summary on the pull request")
    assert comment.returncode == 0, comment.stderr
    assert pr.log.read_text().splitlines()[-2:] == [
        "pr comment 7 --body-file comment.md --edit-last",
        "pr comment 7 --body-file comment.md",
    ]
    body = (tmp_path / "comment.md").read_text()
    latency_md, diff_md = (work / "latency.md").read_text(), (work / "diff.md").read_text()
    assert body == latency_md + diff_md
    assert latency_md.startswith("❌ **pytest-latency: ") and diff_md.startswith("🔴")
    # Every step of every job ran for one event or the other.
    ran = {
        (label.split("-")[0], name) for r in (main, pr) for (label, name), d in r.steps.items() if d
    }
    every = {
        (job, step.get("name") or step.get("uses") or step["run"].split()[0])
        for job, spec in workflow["jobs"].items()
        for step in spec["steps"]
    }
    assert ran == every
