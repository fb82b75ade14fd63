"""The pytest plugin (entry point ``latency``): the only part of the package that imports pytest.

Nothing imports it. Its modules each own one thing: `_settings` (options and precedence),
`_state` (stash keys and the values under them), `_routing` (which test a call belongs to),
`_sampling` (plans, the sample loop, verdicts), `_sweep` and `_split` (a test at several load
levels, and across pytest-xdist workers), `_collector` (the controller-side summary and session
gate), `_signals` (stop signals as an interrupt), `_stopped` (the hooks of a stopped
run), `_fixtures` (clients and recorder), `_outputs` (files and CI outputs). This
module wires them: pluggy finds the hooks and fixtures re-exported here, and `pytest_configure`
registers the plugin objects that need the run's state (the tracker on every process, the
sampler once a test has a plan, the collector on the controller, the worker side on a
pytest-xdist worker of a run that writes files). Per-test state lives in `item.stash`, run-wide
state in `config.stash`; each test's measurements travel on its call report (calls made after
it, on its teardown report) as the plain-data attribute `pytest_latency`, which pytest-xdist
forwards to the controller unchanged, so local and distributed runs share one code path.
"""

from __future__ import annotations

import os

import pytest

# Stateful modules are imported by their full name, never as `from pytest_latency import x`:
# that form reuses a stale package attribute when the module was unloaded (pytester's in-process
# runs do it), leaving the plugin and capture with two different attribution modules.
from pytest_latency.attribution import set_sink
from pytest_latency.plugin import _outputs
from pytest_latency.plugin._collector import LatencyCollector
from pytest_latency.plugin._fixtures import (
    anthropic_client,
    async_anthropic_client,
    async_gemini_client,
    async_openai_client,
    gemini_client,
    latency,
    latency_async_http_client,
    latency_http_client,
    llm_sim,
    openai_client,
)
from pytest_latency.plugin._sampling import TestTracker, pytest_make_collect_report
from pytest_latency.plugin._settings import MARKER_DESC, add_options, read_settings
from pytest_latency.plugin._state import (
    COLLECTOR_NAME,
    ESCAPED_KEY,
    HELD_NAME,
    RUN_KEY,
    SAMPLER_NAME,
    SCHEDULER_NAME,
    SETTINGS_KEY,
    TRACKER_NAME,
    WORKER_NAME,
    RunState,
)
from pytest_latency.plugin._sweep import pytest_generate_tests

__all__ = [
    "anthropic_client",
    "async_anthropic_client",
    "async_gemini_client",
    "async_openai_client",
    "gemini_client",
    "latency",
    "latency_async_http_client",
    "latency_http_client",
    "llm_sim",
    "openai_client",
    "pytest_addoption",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_make_collect_report",
    "pytest_report_header",
    "pytest_sessionfinish",
    "pytest_unconfigure",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)
    _outputs.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_DESC)
    settings = read_settings(config)
    # Every usage error (budgets file, output paths, baseline) is raised before any side effect.
    is_controller = not hasattr(config, "workerinput")  # xdist workers report, never write
    outputs = _outputs.read_outputs(config) if is_controller else None
    config.stash[SETTINGS_KEY] = settings
    run = RunState()
    config.stash[RUN_KEY] = run
    run.router.text_limit = settings.capture_text
    if settings.budget_file is not None:
        run.router.price_overrides = settings.budget_file.prices
    run.outer_sink = set_sink(run.router.route)
    # The capture audit: which LLM-looking connections no captured client made (docs/
    # frameworks.md, "What escaped capture"). Its endpoints: the fixtures' configured ones.
    from pytest_latency import audit

    router = run.router
    run.audit = audit.Audit(
        lambda: router.nodeid,
        (
            url
            for url in (
                settings.anthropic_base_url,
                settings.openai_base_url,
                os.environ.get("ANTHROPIC_BASE_URL"),
                os.environ.get("OPENAI_BASE_URL"),
            )
            if url
        ),
    )
    run.outer_audit = audit.activate(run.audit)
    # A worker builds each test's blocks of the result file when the controller will write one
    # (the same options reach every process).
    run.handoff.blocks = _outputs.files_wanted(config)
    tracker = TestTracker(run.router, run.handoff, freeze_gc=settings.freeze_gc)
    config.pluginmanager.register(tracker, TRACKER_NAME)
    if settings.capture == "auto":
        from pytest_latency.capture import install_auto_capture

        run.uninstall_auto_capture = install_auto_capture(read_ahead=settings.read_ahead)
    workeroutput = getattr(config, "workeroutput", None)
    if run.handoff.blocks and isinstance(workeroutput, dict):
        from pytest_latency.plugin._stopped import WorkerSide

        config.pluginmanager.register(WorkerSide(run, workeroutput), WORKER_NAME)
    if outputs is not None and config.getoption("dist", "no") == "load":
        # pytest-xdist's controller: split tests' shards go to workers of their own.
        from pytest_latency.plugin._shard_schedule import ShardScheduler

        config.pluginmanager.register(ShardScheduler(), SCHEDULER_NAME)
    if outputs is not None:
        collector = LatencyCollector(run, settings, outputs)
        config.pluginmanager.register(collector, COLLECTOR_NAME)
        tracker.on_test_data = collector.collect


def pytest_sessionfinish(session: pytest.Session) -> None:
    # A pytest-xdist worker hands its audit's escapes to the controller (sent after this hook).
    workeroutput = getattr(session.config, "workeroutput", None)
    run = session.config.stash.get(RUN_KEY, None)
    if isinstance(workeroutput, dict) and run is not None and run.audit is not None:
        workeroutput[ESCAPED_KEY] = [e.to_dict() for e in run.audit.escapes()]


def pytest_unconfigure(config: pytest.Config) -> None:
    tracker = config.pluginmanager.get_plugin(TRACKER_NAME)
    if isinstance(tracker, TestTracker):
        tracker.thaw()
    names = (COLLECTOR_NAME, TRACKER_NAME, SAMPLER_NAME, WORKER_NAME, HELD_NAME, SCHEDULER_NAME)
    for name in names:
        registered = config.pluginmanager.get_plugin(name)
        if registered is not None:
            config.pluginmanager.unregister(registered)
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        return
    if run.restore_signals is not None:  # a worker's, or a session that never finished
        run.restore_signals()
        run.restore_signals = None
    # A session nested in a test (pytester's inline runs) hands the outer session its sink back.
    set_sink(run.outer_sink)
    if run.audit is not None:
        from pytest_latency import audit

        audit.activate(run.outer_audit)
        run.audit = None
    if run.uninstall_auto_capture is not None:
        run.uninstall_auto_capture()
    if run.sim is not None:
        run.sim.stop()
        run.sim = None


def pytest_report_header(config: pytest.Config) -> str | None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return None
    target = "as configured"
    if settings.sim_preset is not None:
        target = f"simulator ({settings.sim_preset})"
        if settings.sim_auto:
            target += " where no provider is configured"
    budgets = ""
    if settings.budget_file is not None:
        count = len(settings.budget_file.rules) + bool(settings.budget_file.session)
        budgets = f", budgets={settings.budget_file.path} ({count} rules)"
    return f"latency: capture={settings.capture}, endpoint={target}{budgets}"
