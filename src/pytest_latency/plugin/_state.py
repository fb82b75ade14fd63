"""Plugin state: the stash keys and the values kept under them.

Owns the shapes of everything the plugin remembers between hooks: resolved settings, each test's
sampling plan and live recording, and the run-wide state. Nothing here runs hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_latency.recording import Recording

if TYPE_CHECKING:
    from pytest_latency.aggregate import TestSummary
    from pytest_latency.budgets import BudgetFile, Expectation
    from pytest_latency.sim import SimServer

REPORT_ATTRIBUTE = "pytest_latency"
COLLECTOR_NAME = "latency-collector"
PLUGIN_NAME = "latency"  # the pytest11 entry point's name


@dataclass(frozen=True, slots=True)
class Settings:
    capture: str
    sim_preset: str | None
    anthropic_base_url: str | None
    openai_base_url: str | None
    budget_file: BudgetFile | None
    policy: str
    read_ahead: bool = False
    # `--latency-sim=auto`: the simulator stands in only for providers nobody configured.
    sim_auto: bool = False
    # `--latency-flagged`: keep, exclude or fail on consumer-bound / client-saturated calls.
    flagged: str = "keep"
    # `--latency-capture-text=N`: characters of prompt/output text kept per call; 0 keeps none.
    capture_text: int = 0


@dataclass(frozen=True, slots=True)
class SamplingPlan:
    """How a test is sampled and judged: its marker overlaid on the budgets file's rules."""

    expectations: tuple[Expectation, ...]
    samples: int
    warmup: int
    max_samples: int  # == samples unless inconclusive verdicts may draw more

    @property
    def budgeted(self) -> bool:
        return bool(self.expectations)

    @property
    def looks(self) -> int:
        """How many times the verdicts may be computed: after `samples`, then after each
        doubling until `max_samples` (20 → 40 → 80 → 160 → 200 is five looks)."""
        looks, n = 1, self.samples
        while n < self.max_samples:
            n = min(2 * n, self.max_samples)
            looks += 1
        return looks


@dataclass(slots=True)
class RunState:
    """Run-wide state: on the controller, every test's data in arrival order (xdist interleaves)."""

    tests: list[dict[str, Any]] = field(default_factory=list)
    summaries: list[TestSummary] = field(default_factory=list)
    session_recording: Recording = field(default_factory=lambda: Recording("<session>"))
    uninstall_auto_capture: Any = None
    sim: SimServer | None = None
    session_judgements: list[Any] = field(default_factory=list)
    # The test running now in this process: an interrupted run still reports what it measured.
    current: Recording | None = None
    written: list[str] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)


SETTINGS_KEY = pytest.StashKey[Settings]()
RUN_KEY = pytest.StashKey[RunState]()
PLAN_KEY = pytest.StashKey[SamplingPlan]()
RECORDING_KEY = pytest.StashKey[Recording]()
