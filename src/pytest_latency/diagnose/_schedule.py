"""The load a test's samples ran under, as measured: how many were in flight at once, and whether
an open loop's samples started when the schedule meant them to.

Owns `LoadFigures` (the most samples in flight at once, read off the kept samples' spans; and,
under an open-loop rate, how late each sample started after its intended start: the median, the
worst, and how many were later than `Thresholds.schedule_late_us`), the `schedule_slipped`
finding, which says the client did not keep the schedule, and why that matters for the figures,
and the knee of a sweep's levels (`knee`: where p95 ttft leaves the lowest load's behind).
Computed once from a test's `pools.Pool`; the result file and the report print these numbers.
May import `pools`, `calls`, `stats` and its siblings; never pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_latency.diagnose._finding import DEFAULTS, SCHEDULE_SLIPPED, Finding, Thresholds, ms

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pytest_latency.calls import SampleSpan
    from pytest_latency.pools import Pool


class LoadFigures(NamedTuple):
    """What the kept samples' spans say about the load: `in_flight_max` samples ran at once at
    most; under an open loop (`scheduled` samples had an intended start), each started
    `late_p50_us` late at the median and `late_max_us` at worst, and `slipped` of them more than
    `threshold_us` late."""

    in_flight_max: int
    scheduled: int = 0
    late_p50_us: float | None = None
    late_max_us: float | None = None
    slipped: int = 0
    threshold_us: float = DEFAULTS.schedule_late_us

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"in_flight_max": self.in_flight_max}
        if self.scheduled:
            out["schedule"] = {
                "samples": self.scheduled,
                "late_p50_us": self.late_p50_us,
                "late_max_us": self.late_max_us,
                "slipped": self.slipped,
                "threshold_us": self.threshold_us,
            }
        return out


def in_flight_max(spans: Sequence[SampleSpan]) -> int:
    """The most spans open at one moment (a span ending as another starts does not overlap)."""
    edges = sorted([(s.start_ns, 1) for s in spans] + [(s.end_ns, -1) for s in spans])
    most = now = 0
    for _, step in edges:  # ends sort before starts at the same instant: -1 < 1
        now += step
        most = max(most, now)
    return most


def load_figures(pool: Pool, thresholds: Thresholds = DEFAULTS) -> LoadFigures | None:
    """The pool's load figures; None when it has no kept sample span."""
    spans = pool.spans()
    if not spans:
        return None
    lates = sorted(late for s in spans if (late := s.late) is not None)
    if not lates:
        return LoadFigures(in_flight_max(spans))
    from pytest_latency import stats

    return LoadFigures(
        in_flight_max(spans),
        len(lates),
        stats.percentile(stats.SortedValues.of(lates), 50),
        lates[-1],
        sum(1 for late in lates if late > thresholds.schedule_late_us),
        thresholds.schedule_late_us,
    )


def schedule_finding(
    figures: LoadFigures | None, thresholds: Thresholds = DEFAULTS
) -> Finding | None:
    """`schedule_slipped` when at least `schedule_slip_share` of an open loop's samples (and
    at least one) started more than `schedule_late_us` after their intended start."""
    if figures is None or not figures.scheduled or not figures.slipped:
        return None
    if figures.slipped < thresholds.schedule_slip_share * figures.scheduled:
        return None
    return Finding(
        SCHEDULE_SLIPPED,
        f"{figures.slipped} of {figures.scheduled} samples started more than "
        f"{ms(figures.threshold_us)} after their intended start (worst "
        f"{ms(figures.late_max_us or 0.0)}): the client did not keep the open loop's schedule, "
        "because the concurrency cap was full (earlier samples had not finished) or the "
        "process was too busy to start them; the wait is in queue and the *_intended figures, "
        "not in ttft or e2e. Raise the cap, lower the rate, or spread the load over "
        "pytest-xdist workers",
        {
            "samples": figures.scheduled,
            "slipped": figures.slipped,
            "late_max_us": figures.late_max_us,
            "late_p50_us": figures.late_p50_us,
            "threshold_us": figures.threshold_us,
        },
    )


def knee(figures: Sequence[float | None], thresholds: Thresholds = DEFAULTS) -> int | None:
    """The knee of a sweep whose levels, by increasing load, have these figures (p95 ttft):
    the index of the last level within `knee_ratio` of the lowest level's figure, when a higher
    level is past it; None when none is (the knee lies beyond the levels run), or when the
    lowest level has no figure."""
    base = figures[0] if figures else None
    if not base:
        return None
    for index, figure in enumerate(figures[1:], start=1):
        if figure is not None and figure > thresholds.knee_ratio * base:
            return index - 1
    return None
