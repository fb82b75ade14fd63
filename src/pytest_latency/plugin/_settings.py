"""Options, ini keys and environment variables, resolved once into `Settings`.

Owns the command-line/ini surface of the plugin and its precedence (CLI beats environment beats
ini), and turns every bad value into a `pytest.UsageError` that names where it came from, before
any test runs: a malformed budgets file included.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_latency.plugin._state import Settings
from pytest_latency.policies import DEFAULT_FLAGGED, DEFAULT_POLICY, FLAGGED_POLICIES, POLICIES

if TYPE_CHECKING:
    from pytest_latency.budgets import BudgetFile

CAPTURE_DESC = (
    "Which HTTP requests to capture: 'fixtures' (the plugin's clients and instrument()ed ones) "
    "or 'auto' (every httpx2/httpx/aiohttp request a test makes, by patching the default "
    "transports and aiohttp's ClientSession)"
)
SIM_DESC = (
    "Start the built-in simulated LLM endpoint and point the client fixtures at it; the value "
    "is a latency-model preset (default: 'default'). 'auto' or 'auto:PRESET' uses the simulator "
    "only for providers with no API key or base URL configured"
)
ANTHROPIC_URL_DESC = "Base URL for the anthropic_client fixtures (beats ANTHROPIC_BASE_URL)"
OPENAI_URL_DESC = "Base URL for the openai_client fixtures (beats OPENAI_BASE_URL)"
GEMINI_URL_DESC = "Base URL for the gemini_client fixtures (beats GOOGLE_GEMINI_BASE_URL)"
BUDGET_DESC = (
    "Budgets file (TOML) selecting tests by node-id glob or marker, with session-wide budgets; "
    "also PYTEST_LATENCY_BUDGET"
)
POLICY_DESC = (
    "What an inconclusive verdict (the confidence interval straddles the budget, after extra "
    "samples up to max_samples) does: 'estimate' decides by the point estimate, 'pass' fails "
    "only confident misses, 'fail' demands confident passes; 'auto' (default) is 'pass' for "
    "tests that could sample up to max_samples and 'estimate' for fixed sample sizes"
)
READ_AHEAD_DESC = (
    "Read response bodies as they arrive (a thread or task per stream) rather than when the "
    "test asks for them: exact token timings for test bodies that sleep or await other I/O "
    "while streaming (not for CPU-bound ones)"
)
FLAGGED_DESC = (
    # The flags are catalogue.DISTORTING_FLAGS (not imported here: pytest loads this module in
    # every session); tests/test_saturation.py checks this list against it.
    "What budgets do with flagged calls (consumer_bound, client_saturated, capped, cpu_starved, "
    "gc_paused: "
    "their timings do not measure the server's response): 'keep' (default) judges them like any "
    "call, 'exclude' leaves them out of the timing pools (they stay in counts and reports), 'fail' "
    "fails a budgeted test that has any"
)
CAPTURE_TEXT_DESC = (
    "Keep up to N characters of each call's prompt and output text on its call record "
    "(latency.calls, and the per-test data on the test report; never in the result file or "
    "the reports), for debugging (default 0: never; only sizes and hashes are kept)"
)
GC_DESC = (
    "'freeze' (default): when the first test's body starts, and after a test's setup warmed an "
    "SDK, move every object alive to the garbage collector's permanent generation "
    "(gc.freeze), so that a collection during a call scans only what was made since, not the "
    "~230k objects the SDKs and pytest hold (~110 ms a full collection); 'keep' leaves the "
    "collector alone"
)
GC_CHOICES = ("freeze", "keep")
MARKER_DESC = (
    "latency(*expectations, samples=1, warmup=0, max_samples=None, concurrency=None, rate=None, "
    "arrival='poisson', burstiness=1, seed=0, split=False): judge the LLM calls of this test "
    "against budget expressions such as 'ttft.p95 < 400ms'; run the body warmup + samples times, "
    "and up to max_samples while a verdict is inconclusive; concurrency samples at once, or "
    "started at rate ('20/s') in an open loop, split across pytest-xdist workers with split=True "
    "(docs/load.md)"
)

CAPTURE_CHOICES = ("fixtures", "auto")
BUDGET_ENV = "PYTEST_LATENCY_BUDGET"


def _choice(valid: tuple[str, ...], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in valid:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not a {what}; choose from {', '.join(valid)}"
            )
        return value

    return check


def _text_limit(value: str) -> int:
    try:
        limit = int(value)
    except ValueError:
        limit = -1
    if limit < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a character count (an integer >= 0)")
    return limit


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("latency", "pytest-latency")
    group.addoption(
        "--latency-capture",
        dest="latency_capture",
        type=_choice(CAPTURE_CHOICES, "capture mode"),
        help=CAPTURE_DESC,
    )
    group.addoption(
        "--latency-sim",
        dest="latency_sim",
        nargs="?",
        const="default",
        default=None,
        metavar="PRESET",
        help=SIM_DESC,
    )
    group.addoption(
        "--latency-anthropic-base-url", dest="latency_anthropic_base_url", help=ANTHROPIC_URL_DESC
    )
    group.addoption(
        "--latency-openai-base-url", dest="latency_openai_base_url", help=OPENAI_URL_DESC
    )
    group.addoption(
        "--latency-gemini-base-url", dest="latency_gemini_base_url", help=GEMINI_URL_DESC
    )
    group.addoption("--latency-budget", dest="latency_budget", metavar="FILE", help=BUDGET_DESC)
    group.addoption(
        "--latency-inconclusive",
        dest="latency_inconclusive",
        type=_choice(POLICIES, "policy"),
        help=POLICY_DESC,
    )
    group.addoption(
        "--latency-read-ahead",
        dest="latency_read_ahead",
        action="store_true",
        default=None,
        help=READ_AHEAD_DESC,
    )
    group.addoption(
        "--latency-flagged",
        dest="latency_flagged",
        type=_choice(FLAGGED_POLICIES, "flagged-calls policy"),
        help=FLAGGED_DESC,
    )
    group.addoption(
        "--latency-capture-text",
        dest="latency_capture_text",
        type=_text_limit,
        metavar="N",
        help=CAPTURE_TEXT_DESC,
    )
    group.addoption(
        "--latency-gc", dest="latency_gc", type=_choice(GC_CHOICES, "gc policy"), help=GC_DESC
    )
    parser.addini("latency_capture", CAPTURE_DESC, default="fixtures")
    parser.addini("latency_gc", GC_DESC, default="freeze")
    parser.addini("latency_flagged", FLAGGED_DESC, default=DEFAULT_FLAGGED)
    parser.addini("latency_capture_text", CAPTURE_TEXT_DESC, default="0")
    parser.addini("latency_read_ahead", READ_AHEAD_DESC, type="bool", default=False)
    parser.addini("latency_sim", SIM_DESC, default="")
    parser.addini("latency_anthropic_base_url", ANTHROPIC_URL_DESC, default="")
    parser.addini("latency_openai_base_url", OPENAI_URL_DESC, default="")
    parser.addini("latency_gemini_base_url", GEMINI_URL_DESC, default="")
    parser.addini("latency_budget", BUDGET_DESC, default="")
    parser.addini("latency_inconclusive", POLICY_DESC, default=DEFAULT_POLICY)


def _cli(config: pytest.Config, name: str) -> str | None:
    value = config.getoption(name, default=None)
    return None if value is None else str(value)


def _ini(config: pytest.Config, name: str) -> str | None:
    value = config.getini(name)
    return str(value) if value else None


def _ini_choice(config: pytest.Config, name: str, valid: tuple[str, ...]) -> str | None:
    value = _ini(config, name)
    if value is not None and value not in valid:
        raise pytest.UsageError(
            f"{name} = {value!r} in {config.inipath or 'the ini file'} is not valid; "
            f"choose from {', '.join(valid)}"
        )
    return value


def _budget_path(config: pytest.Config) -> Path | None:
    """CLI (relative to the working directory) beats the environment beats the ini key
    (relative to the ini file's directory, as pytest does for its own paths)."""
    cli = _cli(config, "latency_budget") or os.environ.get(BUDGET_ENV) or None
    if cli:
        return Path(cli)
    ini = _ini(config, "latency_budget")
    if ini is None:
        return None
    base = config.inipath.parent if config.inipath else config.rootpath
    return base / ini


def _load_budgets(config: pytest.Config) -> BudgetFile | None:
    path = _budget_path(config)
    if path is None:
        return None
    from pytest_latency.budgets import BudgetError, load_budget_file

    try:
        return load_budget_file(path)
    except BudgetError as exc:
        raise pytest.UsageError(f"pytest-latency: {exc}") from None


def _capture_text(config: pytest.Config) -> int:
    cli = config.getoption("latency_capture_text", default=None)
    if cli is not None:
        return int(cli)
    value = _ini(config, "latency_capture_text") or "0"
    try:
        return _text_limit(value)
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(
            f"latency_capture_text in {config.inipath or 'the ini file'}: {exc}"
        ) from None


def read_settings(config: pytest.Config) -> Settings:
    capture_mode = _cli(config, "latency_capture") or _ini_choice(
        config, "latency_capture", CAPTURE_CHOICES
    )
    policy = _cli(config, "latency_inconclusive") or _ini_choice(
        config, "latency_inconclusive", POLICIES
    )
    flagged = _cli(config, "latency_flagged") or _ini_choice(
        config, "latency_flagged", FLAGGED_POLICIES
    )
    sim_preset = _cli(config, "latency_sim") or _ini(config, "latency_sim")
    sim_auto = False
    if sim_preset is not None:
        from pytest_latency.sim import LatencyModel, SimSettingsError

        if sim_preset == "auto" or sim_preset.startswith("auto:"):
            sim_auto = True
            sim_preset = sim_preset.partition(":")[2] or "default"
        try:
            LatencyModel.preset(sim_preset)
        except SimSettingsError as exc:
            raise pytest.UsageError(f"--latency-sim: {exc}") from None
    return Settings(
        capture=capture_mode or "fixtures",
        sim_preset=sim_preset,
        sim_auto=sim_auto,
        anthropic_base_url=_cli(config, "latency_anthropic_base_url")
        or _ini(config, "latency_anthropic_base_url"),
        openai_base_url=_cli(config, "latency_openai_base_url")
        or _ini(config, "latency_openai_base_url"),
        gemini_base_url=_cli(config, "latency_gemini_base_url")
        or _ini(config, "latency_gemini_base_url"),
        budget_file=_load_budgets(config),
        policy=policy or DEFAULT_POLICY,
        read_ahead=bool(
            config.getoption("latency_read_ahead", default=None)
            or config.getini("latency_read_ahead")
        ),
        flagged=flagged or DEFAULT_FLAGGED,
        capture_text=_capture_text(config),
        freeze_gc=_gc(config) == "freeze",
    )


def _gc(config: pytest.Config) -> str:
    return _cli(config, "latency_gc") or _ini_choice(config, "latency_gc", GC_CHOICES) or "freeze"
