"""Serial calls that could have run in parallel, and agent step counts per sample.

Owns the dependency test between two calls of one sample (does the later request carry the earlier
call's output?), the critical path through those dependencies, the time parallelism would have
saved, the `serial_independent_calls` finding, how far a sample's calls overlap (`Overlap`) and
the distribution of calls per sample. Imports only the stdlib, `pytest_latency.stats`,
`pytest_latency.metrics`, `pytest_latency.calls`, `pytest_latency.pools` (types) and its sibling
`_finding`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_latency import stats
from pytest_latency.calls import Call
from pytest_latency.diagnose._finding import (
    DEFAULTS,
    SERIAL_INDEPENDENT_CALLS,
    Finding,
    Thresholds,
    ms,
)
from pytest_latency.metrics import contains_output

if TYPE_CHECKING:
    from pytest_latency.pools import Pool

# Pairs listed in the evidence per sample: a 200-step agent would otherwise list thousands.
MAX_PAIRS = 20


@dataclass(frozen=True, slots=True)
class SampleSchedule:
    """One sample's calls in start order, and what running independent ones together would save.

    `pairs` are (i, j, overlap_us): call j started after call i ended, its request does not carry
    i's output, and had they started together they would have overlapped for min(duration i,
    duration j). `busy_us` is the time at least one call was in flight; `critical_us` the longest
    chain of calls that do depend on each other; `saving_us` = busy − critical (≥ 0).
    `undetermined` counts later calls whose dependence could not be told (the earlier output was
    empty or too short to fingerprint): they are treated as dependent.
    """

    sample: int
    calls: int
    pairs: tuple[tuple[int, int, float], ...]
    busy_us: float
    critical_us: float
    saving_us: float
    undetermined: int


def schedule(sample: int, calls: Sequence[Call]) -> SampleSchedule:
    done = sorted((c for c in calls if not c.failed), key=lambda c: c.attempts[0].t_start_ns)
    spans = [(c.attempts[0].t_start_ns, c.final.t_end_ns) for c in done]
    durations = [max(end - start, 0) / 1000 for start, end in spans]
    pairs: list[tuple[int, int, float]] = []
    undetermined = 0
    finish = list(durations)  # earliest finish of each call if only real dependencies held it
    for j, later in enumerate(done):
        for i in range(j):
            if spans[i][1] > spans[j][0]:
                continue  # they overlapped already: already parallel
            carried = contains_output(
                later.final.request_shingles,
                done[i].final.output_shingles,
                done[i].final.output_digests,
            )
            if carried is False:
                pairs.append((i, j, min(durations[i], durations[j])))
                continue
            if carried is None:
                undetermined += 1
            finish[j] = max(finish[j], finish[i] + durations[j])
    busy = _union_us(spans)
    critical = max(finish, default=0.0)
    return SampleSchedule(
        sample=sample,
        calls=len(calls),
        pairs=tuple(pairs),
        busy_us=busy,
        critical_us=critical,
        saving_us=max(busy - critical, 0.0),
        undetermined=undetermined,
    )


def _union_us(spans: Sequence[tuple[int, int]]) -> float:
    total = 0
    end = None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total / 1000


def step_counts(pool: Pool) -> dict[str, Any]:
    """The `calls` metric (agent step count) per kept sample, as a distribution."""
    counts = pool.calls_per_sample()
    if not counts:
        return {"n": 0}
    values = [float(c) for c in counts]
    return {
        "n": len(counts),
        "min": min(counts),
        "p50": stats.percentile(values, 50),
        "p95": stats.percentile(values, 95),
        "max": max(counts),
        "mean": sum(values) / len(values),
    }


@dataclass(frozen=True, slots=True)
class Overlap:
    """How a test's multi-call samples ran: the median number of calls per such sample, and
    the median concurrency (time in calls summed over the sample's span: 1.0 is one call after
    another, K is K calls side by side); `parallel` when that is at least the threshold."""

    samples: int
    median_calls: float
    concurrency: float
    parallel: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "median_calls": self.median_calls,
            "concurrency": self.concurrency,
            "parallel": self.parallel,
        }


def overlap(pool: Pool, thresholds: Thresholds = DEFAULTS) -> Overlap | None:
    """The overlap of the samples that made more than one call; None when none did."""
    by_sample: dict[int, list[tuple[float, float]]] = {}
    for call in pool.calls:
        spans = by_sample.setdefault(call.sample, [])
        spans.append((call.attempts[0].t_start_ns, call.final.t_end_ns))
    return overlap_of(by_sample.values(), thresholds)


def overlap_of(
    samples: Iterable[Sequence[tuple[float, float]]], thresholds: Thresholds = DEFAULTS
) -> Overlap | None:
    """The overlap of samples given as their calls' (start, end) spans, in any one unit: the
    one formula `overlap` and readers of older result files (their timelines) share."""
    levels: list[float] = []
    sizes: list[float] = []
    for spans in samples:
        if len(spans) < 2:
            continue
        span = max(end for _, end in spans) - min(start for start, _ in spans)
        if span <= 0:
            continue
        levels.append(sum(max(end - start, 0) for start, end in spans) / span)
        sizes.append(float(len(spans)))
    if not levels:
        return None
    level = stats.percentile(levels, 50)
    return Overlap(
        len(levels), stats.percentile(sizes, 50), level, level >= thresholds.parallel_concurrency
    )


def serial_findings(pool: Pool, thresholds: Thresholds = DEFAULTS) -> list[Finding]:
    by_sample: dict[int, list[Call]] = {}
    for call in pool.calls:
        by_sample.setdefault(call.sample, []).append(call)
    schedules = [schedule(s, cs) for s, cs in sorted(by_sample.items()) if len(cs) > 1]
    hits = [s for s in schedules if s.pairs and s.saving_us >= thresholds.serial_min_saving_us]
    # One sample doing it is a fact about that sample; the finding is about the test, so it needs
    # the pattern in at least half of the samples that made more than one call.
    if not hits or 2 * len(hits) < len(schedules):
        return []
    savings = [s.saving_us for s in hits]
    typical = hits[0]
    saving = stats.percentile(savings, 50)
    steps = step_counts(pool)
    pairs_text = ", ".join(f"{i}→{j}" for i, j, _ in typical.pairs[:5])
    if len(typical.pairs) > 5:
        pairs_text += ", …"
    return [
        Finding(
            SERIAL_INDEPENDENT_CALLS,
            f"serial calls that could run in parallel: in {len(hits)} of {len(schedules)} "
            f"samples a call started after another ended without its request carrying that "
            f"call's output (sample {typical.sample}: calls {pairs_text}); running them "
            f"concurrently would save a median {ms(saving)} of "
            f"{ms(stats.percentile([s.busy_us for s in hits], 50))} in calls per sample "
            f"(calls per sample: median {steps.get('p50', 0):g}, max {steps.get('max', 0)})",
            {
                "samples": len(schedules),
                "samples_with_pairs": len(hits),
                "median_saving_us": saving,
                "max_saving_us": max(savings),
                "median_busy_us": stats.percentile([s.busy_us for s in hits], 50),
                "median_critical_path_us": stats.percentile([s.critical_us for s in hits], 50),
                "example_sample": typical.sample,
                "example_pairs": [list(p) for p in typical.pairs[:MAX_PAIRS]],
                "undetermined_pairs": sum(s.undetermined for s in schedules),
                "calls_per_sample": steps,
            },
        )
    ]
