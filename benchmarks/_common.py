"""Shared by the benchmark scripts: starting the simulator in its own process, and the small
statistics they report (median with a 10th–90th percentile spread, the load average).

Not a benchmark itself; the scripts import it as `_common` (they run as `python benchmarks/x.py`,
so this folder is on the path). Importing it puts tests/ on the path too, so that a benchmark
measures with the tests' own helpers (`remote_sim`'s error against the truth, the frameworks'
scenarios) rather than a copy of them.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.append(str(ROOT / "tests"))


def spawn_sim(command: list[str]) -> tuple[subprocess.Popen[str], str]:
    """Run a `pytest-latency sim --port 0 ...` command; return the process and its base URL
    (read from its first line, so no free-port race)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"the simulator did not start: {line!r}")
    return proc, line.rsplit(" ", 1)[-1].strip()


def steal_ms() -> float:
    """The time a hypervisor has taken the machine's CPUs from it since boot, summed over the
    CPUs, ms (`/proc/stat`'s steal); 0 where not told. On a virtual machine whose host is
    busy, a thread can lose its CPU for 100 ms without sleeping or queueing for it (session
    22): a round that met such steal measured the host, not the client."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) * 1000 / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def spread(values: list[float], fmt: str) -> str:
    """`median [p10..p90]`, formatted."""
    return (
        f"{format(statistics.median(values), fmt)} "
        f"[{format(quantile(values, 0.1), fmt)}..{format(quantile(values, 0.9), fmt)}]"
    )


# The accuracy targets (docs/performance.md): |measured - truth| at the median and the 99th
# percentile, early or late alike. Every benchmark judges by these two.
P50_TARGET_MS, P99_TARGET_MS = 1.0, 5.0


def error_pct(errors: list[float], p: float) -> float:
    """Nearest-rank `p`-th percentile of |errors|: the accuracy targets bound the size of an
    error, early or late alike. NaN for no errors (a round that measured nothing)."""
    if not errors:
        return float("nan")
    ordered = sorted(abs(v) for v in errors)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def target_excess(
    *errors: list[float], pct: Callable[[list[float], float], float] = error_pct
) -> float:
    """How far each list's |error| p50 and p99 are from the accuracy targets: the largest over
    its target (at most 1: within them); infinite for a list with nothing to rank. `pct` reads
    a list's |error| percentile (`error_pct`'s nearest rank, or a bound of it: NaN for no
    errors)."""
    targets = ((50, P50_TARGET_MS), (99, P99_TARGET_MS))
    ratios = [pct(e, p) / target for e in errors for p, target in targets]
    return math.inf if any(math.isnan(x) for x in ratios) else max(ratios, default=0.0)


def within_targets(*errors: list[float]) -> bool:
    """Each list's |error| p50 and p99 within the accuracy targets (an empty list is not)."""
    return target_excess(*errors) <= 1
