"""Plugin state: the stash keys and the values kept under them.

Owns the shapes of everything the plugin remembers between hooks: resolved settings, each test's
sampling plan, and the run-wide state. Nothing here runs hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import pytest

from pytest_latency.plugin._routing import Router

if TYPE_CHECKING:
    from collections.abc import Callable

    from pytest_latency.attribution import Sink
    from pytest_latency.audit import Audit, Escape
    from pytest_latency.budgets import BudgetFile, Expectation
    from pytest_latency.diagnose import Finding
    from pytest_latency.load import Load
    from pytest_latency.results import Comparison
    from pytest_latency.sim import SimServer
    from pytest_latency.testdata import TestData
    from pytest_latency.verdicts import Judgement

REPORT_ATTRIBUTE = "pytest_latency"


class Handoff:
    """Records put on reports in this process, by the report's id, until the tracker's
    logreport takes them (the same report object: the report itself carries only plain data);
    and whether a result file will be built, so each record's blocks are built where its test
    ran (`results.test_blocks`)."""

    __slots__ = ("blocks", "records")

    def __init__(self) -> None:
        self.records: dict[int, TestData] = {}
        self.blocks = False


COLLECTOR_NAME = "latency-collector"
TRACKER_NAME = "latency-tracker"
SAMPLER_NAME = "latency-sampler"
WORKER_NAME = "latency-worker"
HELD_NAME = "latency-held-reports"
SCHEDULER_NAME = "latency-shard-scheduler"


# NamedTuples and plain classes, not dataclasses: pytest imports this module in every session of
# an environment where the plugin is installed, and a frozen dataclass costs ~1 ms to define
# (it compiles its methods), a NamedTuple ~0.1 ms (benchmarks/bench_unused_plugin.py).


class Settings(NamedTuple):
    capture: str
    sim_preset: str | None
    anthropic_base_url: str | None
    openai_base_url: str | None
    budget_file: BudgetFile | None
    policy: str
    read_ahead: bool = False
    # `--latency-sim=auto`: the simulator stands in only for providers nobody configured.
    sim_auto: bool = False
    # `--latency-flagged`: keep, exclude or fail on consumer-bound, client-saturated or capped
    # calls.
    flagged: str = "keep"
    # `--latency-capture-text=N`: characters of prompt/output text kept per call; 0 keeps none.
    capture_text: int = 0
    # `--latency-gc=freeze` (default): gc.freeze when the first test's body starts, and after a
    # setup that warmed an SDK (`plugin._sampling.TestTracker`).
    freeze_gc: bool = True
    # `--latency-gemini-base-url`: the gemini_client fixtures' server (beats the environment's).
    gemini_base_url: str | None = None


class SamplingPlan(NamedTuple):
    """How a test is sampled and judged: its marker overlaid on the budgets file's rules."""

    expectations: tuple[Expectation, ...]
    samples: int
    warmup: int
    max_samples: int  # == samples unless inconclusive verdicts may draw more
    # How the samples are started (concurrency, an open-loop rate); None: one after another.
    load: Load | None = None

    @property
    def budgeted(self) -> bool:
        return bool(self.expectations)

    @property
    def looks(self) -> int:
        """How many times the verdicts may be computed: after `samples`, then after each
        doubling until `max_samples` (20 → 40 → 80 → 160 → 200 is five looks)."""
        from pytest_latency.verdicts import looks_for

        return looks_for(self.samples, self.max_samples)


class RunState:
    """Run-wide state: on the controller, every test's record in arrival order (xdist
    interleaves)."""

    __slots__ = (
        "audit",
        "comparison",
        "escaped",
        "escaped_finding",
        "handoff",
        "outer_audit",
        "outer_sink",
        "restore_signals",
        "router",
        "session_judgements",
        "sim",
        "tests",
        "uninstall_auto_capture",
        "write_failures",
        "written",
    )

    def __init__(self) -> None:
        self.tests: list[TestData] = []
        self.handoff = Handoff()
        # The test running in this process and its recording: an interrupted run still reports
        # what that test measured.
        self.router = Router()
        self.outer_sink: Sink | None = None  # the sink before this session's, put back at the end
        # Connections outside captured attempts (`audit`), and the log before this session's.
        self.audit: Audit | None = None
        self.outer_audit: Audit | None = None
        # The run's escapes (every process's, merged on the controller) and their finding.
        self.escaped: list[Escape] = []
        self.escaped_finding: Finding | None = None
        self.uninstall_auto_capture: Callable[[], None] | None = None
        self.sim: SimServer | None = None
        self.session_judgements: list[Judgement] = []
        self.written: list[str] = []
        self.write_failures: list[str] = []  # an output not written: its option, path, reason
        # Puts back the stop signals' handlers replaced for the session (`_signals`).
        self.restore_signals: Callable[[], None] | None = None
        # The run against `--latency-baseline`, compared after the last test.
        self.comparison: Comparison | None = None


# In a pytest-xdist worker's workeroutput: the escapes its audit found (`audit.Escape.to_dict`).
ESCAPED_KEY = "pytest_latency_escaped"

SETTINGS_KEY = pytest.StashKey[Settings]()
RUN_KEY = pytest.StashKey[RunState]()
PLAN_KEY = pytest.StashKey[SamplingPlan]()
