"""Output files: the JSON result file, the HTML report, the Markdown summary, and the baseline.

Owns the output options, their validation before any test runs (an unwritable path is a usage
error, not a lost run), building the result file once at the end on the controller, writing every
file through `results.write_atomic`, each on its own (one that fails is reported with its path and
costs no other output), appending the Markdown to `$GITHUB_STEP_SUMMARY`, and comparing against a
saved baseline. `results` and `report` (jinja2) are imported only when a file is asked for.
"""

from __future__ import annotations

import datetime
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    from pytest_latency.results import ResultFile

JSON_DESC = "Write the run's result file (JSON, schema pytest-latency/1, HDR histograms) to PATH"
REPORT_DESC = "Write the self-contained HTML report to PATH"
MARKDOWN_DESC = "Write a Markdown summary fit for a PR comment to PATH"
SAVE_DESC = "Save this run's result file as a baseline at PATH (same format as --latency-json)"
BASELINE_DESC = (
    "Compare each budgeted test's latency with a saved result file; fail the run on a "
    "regression beyond --latency-tolerance that is statistically significant"
)
TOLERANCE_DESC = "Relative change a baseline regression must exceed (default 10%%)"


class Outputs(NamedTuple):  # not a dataclass: see the Settings class in `_state`
    json: Path | None = None
    report: Path | None = None
    markdown: Path | None = None
    save: Path | None = None
    baseline: ResultFile | None = None
    baseline_path: Path | None = None
    tolerance: float = 0.10

    @property
    def wanted(self) -> bool:
        return any((self.json, self.report, self.markdown, self.save, self.baseline))


def files_wanted(config: pytest.Config) -> bool:
    """Whether this run will build a result file (any output asked for, on the command line,
    in the ini file, or through $GITHUB_STEP_SUMMARY); cheap, on every process."""
    names = ("latency_json", "latency_report", "latency_markdown")
    return (
        any(config.getoption(n, default=None) for n in (*names, "latency_save", "latency_baseline"))
        or any(config.getini(n) for n in names)
        or bool(os.environ.get("GITHUB_STEP_SUMMARY"))
    )


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("latency")
    group.addoption("--latency-json", dest="latency_json", metavar="PATH", help=JSON_DESC)
    group.addoption("--latency-report", dest="latency_report", metavar="PATH", help=REPORT_DESC)
    group.addoption(
        "--latency-markdown", dest="latency_markdown", metavar="PATH", help=MARKDOWN_DESC
    )
    group.addoption("--latency-save", dest="latency_save", metavar="PATH", help=SAVE_DESC)
    group.addoption(
        "--latency-baseline", dest="latency_baseline", metavar="PATH", help=BASELINE_DESC
    )
    group.addoption(
        "--latency-tolerance", dest="latency_tolerance", metavar="PCT", help=TOLERANCE_DESC
    )
    parser.addini("latency_json", JSON_DESC, default="")
    parser.addini("latency_report", REPORT_DESC, default="")
    parser.addini("latency_markdown", MARKDOWN_DESC, default="")


def _path(config: pytest.Config, name: str, *, ini: bool = True) -> Path | None:
    value = config.getoption(name, default=None)
    if value is None and ini:
        value = config.getini(name) or None
        if value is not None and config.inipath is not None:
            return config.inipath.parent / str(value)
    return None if value is None else Path(str(value))


def _check_writable(option: str, path: Path) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise pytest.UsageError(f"--{option}={path}: is a directory, expected a file path")
    if not parent.is_dir():
        raise pytest.UsageError(f"--{option}={path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise pytest.UsageError(f"--{option}={path}: not writable")


def _tolerance(config: pytest.Config) -> float:
    raw = config.getoption("latency_tolerance", default=None)
    if raw is None:
        return 0.10
    from pytest_latency.budgets import BudgetError, parse_tolerance

    try:
        return parse_tolerance(str(raw))
    except BudgetError as exc:
        raise pytest.UsageError(f"--latency-tolerance={raw}: {exc.reason}") from None


def read_outputs(config: pytest.Config) -> Outputs:
    paths = {
        "latency-json": _path(config, "latency_json"),
        "latency-report": _path(config, "latency_report"),
        "latency-markdown": _path(config, "latency_markdown"),
        "latency-save": _path(config, "latency_save", ini=False),
    }
    for option, path in paths.items():
        if path is not None:
            _check_writable(option, path)
    baseline_path = _path(config, "latency_baseline", ini=False)
    baseline = None
    if baseline_path is not None:
        from pytest_latency.results import ResultError, load_result

        try:
            baseline = load_result(baseline_path)
        except ResultError as exc:
            raise pytest.UsageError(f"--latency-baseline: {exc}") from None
    return Outputs(
        json=paths["latency-json"],
        report=paths["latency-report"],
        markdown=paths["latency-markdown"],
        save=paths["latency-save"],
        baseline=baseline,
        baseline_path=baseline_path,
        tolerance=_tolerance(config),
    )


def run_info(config: pytest.Config, started: datetime.datetime) -> dict[str, Any]:
    # Imported here: only a run that writes a file needs them (importlib.metadata alone is ~10 ms).
    import platform
    from importlib import metadata

    versions = {"python": platform.python_version()}
    sdks = ("anthropic", "openai", "google-genai")
    for dist in ("pytest-latency", "pytest", *sdks, "httpx2", "aiohttp", "pytest-xdist"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "started": started.isoformat(timespec="seconds"),
        "duration_s": round((now - started).total_seconds(), 3),
        "versions": versions,
        "git": _git(config.rootpath),
        "prices": _prices(config),
    }


def _prices(config: pytest.Config) -> dict[str, Any]:
    """What priced the run's calls: genai-prices' bundled snapshot and its version, and the
    budgets.toml overrides (`pricing.PriceTable`)."""
    from pytest_latency.plugin._state import RUN_KEY

    return config.stash[RUN_KEY].router.prices().table().to_dict()


def _git(root: Path) -> dict[str, Any] | None:
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=5, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    return {
        "commit": commit,
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


class Written(NamedTuple):
    """What `write_outputs` did: a line per file written, and a line per output that failed
    (its option and path, and why)."""

    lines: list[str]
    failures: list[str]


def write_outputs(outputs: Outputs, result: dict[str, Any]) -> Written:
    """Write every requested file, each attempted on its own: one that fails (a full disk, a
    render bug) is reported and the others are still written."""
    from pytest_latency.results import dumps

    done = Written([], [])
    if outputs.json is not None or outputs.save is not None:
        text = _render(done, "the result file", lambda: dumps(result))
        for option, path in (("latency-json", outputs.json), ("latency-save", outputs.save)):
            if path is not None and text is not None:
                _write(done, option, path, text, f"result file: {path}")
    if outputs.report is not None:
        from pytest_latency.report import render_html

        html = _render(done, f"--latency-report={outputs.report}", lambda: render_html(result))
        if html is not None:
            _write(done, "latency-report", outputs.report, html, f"HTML report: {outputs.report}")
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if outputs.markdown is not None or summary_file:
        from pytest_latency.report import render_markdown

        markdown = _render(done, "the Markdown summary", lambda: render_markdown(result))
        if markdown is not None and outputs.markdown is not None:
            line = f"Markdown summary: {outputs.markdown}"
            _write(done, "latency-markdown", outputs.markdown, markdown, line)
        if markdown is not None and summary_file:
            try:
                with open(summary_file, "a", encoding="utf-8") as handle:
                    handle.write(markdown + "\n")
            except OSError as exc:
                done.failures.append(
                    f"$GITHUB_STEP_SUMMARY={summary_file}: cannot append: {exc.strerror or exc}"
                )
            else:
                done.lines.append("Markdown summary appended to $GITHUB_STEP_SUMMARY")
    return done


def _render(done: Written, what: str, render: Callable[[], str]) -> str | None:
    try:
        return render()
    except Exception as exc:  # a renderer's bug must not cost the other outputs
        done.failures.append(f"{what}: could not be rendered: {exc!r}")
        return None


def _write(done: Written, option: str, path: Path, text: str, line: str) -> None:
    from pytest_latency.results import WriteError, write_atomic

    try:
        write_atomic(path, text)
    except WriteError as exc:
        done.failures.append(f"--{option}={exc}")
    else:
        done.lines.append(line)
