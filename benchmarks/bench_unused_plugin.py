"""Installed but unused: what pytest-latency costs a suite that makes no LLM calls.

Generates a suite of ``--tests`` (2,000) trivial tests (``assert i + 1 > i``, no fixtures, no LLM
calls) in a temporary directory with its own empty ``pytest.ini``, then runs
``python -m pytest -q -p no:cacheprovider`` on it as a subprocess with the plugin enabled (the
``latency`` entry point loads as in any environment where the package is installed) and with
``-p no:latency``, interleaved (ABBA order: each pair runs back to back, so the noise of the
shared machine hits both alike), ``--reps`` times each. Reported: the per-pair wall-time ratio
enabled / disabled and the ratio of the child processes' CPU time (user + system, from
``getrusage(RUSAGE_CHILDREN)``; it does not count time lost to other processes), as median and
10th–90th percentile spread over the pairs. Target: wall ratio <= 1.03. A 1-test suite is run
in the same interleaving to split the difference into a constant (startup, plugin import,
session hooks) and a per-test part.

By default .pyc files are written and reused (``--bytecode cached``, redirected to a temporary
``PYTHONPYCACHEPREFIX``), as on a developer machine or a CI job with a warm cache;
``--bytecode none`` sets ``PYTHONDONTWRITEBYTECODE=1`` (this box's default shell setting), where
every run compiles everything again, including pytest's assertion rewrite of the plugin's own
modules (pytest rewrites an entry-point plugin's package).

Wall time on a shared 2-core machine drifts by ±10 % between runs of the same command, more than
the 3 % this benchmark is about, so it also counts what does not drift: the CPU instructions each
variant executes (``--instructions``, on by default where valgrind is installed). It runs both
suites once more per variant under ``valgrind --tool=cachegrind --cache-sim=no`` with
``PYTHONHASHSEED=0``; the count repeats to a few instructions in 7 billion, so the ratio of the
counts and its split into startup and per-test parts are exact for this machine's Python and
packages. CPython runs 4–5 billion instructions a second here, so the instruction ratio tracks the
CPU-time ratio; the wall ratio is still the target.

It also prints the top entries of ``python -X importtime -c "import pytest_latency.plugin"``: what
importing the plugin costs at startup (every pytest session of the environment pays it).

    python benchmarks/bench_unused_plugin.py            # ~4 min (--bytecode none: ~6 min)
    python benchmarks/bench_unused_plugin.py --quick    # ~1.5 min
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import load, spread

COMMAND = "python benchmarks/bench_unused_plugin.py"
BASE = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def write_suite(root: Path, tests: int, per_file: int = 100) -> None:
    (root / "pytest.ini").write_text("[pytest]\n")
    for f in range(0, tests, per_file):
        body = "".join(
            f"def test_{i}():\n    assert {i} + 1 > {i}\n\n\n"
            for i in range(f, min(f + per_file, tests))
        )
        (root / f"test_unused_{f // per_file:03}.py").write_text(body)


ENV: dict[str, str] = dict(os.environ)


def child_env(bytecode: str, cache_dir: Path) -> None:
    """`cached`: the usual setup, .pyc files written and reused (redirected to `cache_dir` with
    PYTHONPYCACHEPREFIX so nothing lands in the source tree); `none`: PYTHONDONTWRITEBYTECODE=1,
    every module (and pytest's assertion rewrite of every test module and of the plugin's own
    modules, which pytest rewrites as an entry-point plugin) is compiled again in every run."""
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    ENV.pop("PYTHONPYCACHEPREFIX", None)
    if bytecode == "none":
        ENV["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        ENV["PYTHONPYCACHEPREFIX"] = str(cache_dir)


def run_once(root: Path, extra: list[str], expected: int) -> tuple[float, float]:
    """(wall s, child CPU s) of one pytest run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [*BASE, *extra], cwd=root, env=ENV, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    if done.returncode != 0 or f"{expected} passed" not in last:
        raise SystemExit(f"pytest {' '.join(extra)} failed: {last}\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def instructions(root: Path, extra: list[str]) -> int:
    """Instructions one pytest run executes, counted by valgrind (same hash seed every run)."""
    done = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         *BASE, *extra],
        cwd=root, env={**ENV, "PYTHONHASHSEED": "0"}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"valgrind {' '.join(extra)} failed:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def instruction_lines(root: Path, small: Path, tests: int) -> list[str]:
    disabled = ["-p", "no:latency"]
    on, off = instructions(root, []), instructions(root, disabled)
    one_on, one_off = instructions(small, []), instructions(small, disabled)
    startup = one_on - one_off
    per_test = (on - off - startup) / max(tests - 1, 1)
    return [
        "\ninstructions (valgrind cachegrind, PYTHONHASHSEED=0; exact, load-independent):",
        f"  {tests} tests: enabled {on:,}  -p no:latency {off:,}  ratio {on / off:.4f}",
        f"  1 test:  enabled {one_on:,}  -p no:latency {one_off:,}",
        f"  startup (1-test difference): {startup / 1e6:+.1f} M instructions "
        f"({startup / off:.2%} of the {tests}-test run); per test: {per_test / 1e3:+.1f} k",
        f"  target <= 1.03 on instructions: {on / off:.4f} "
        f"({'met' if on / off <= 1.03 else 'NOT met'})",
    ]


def plugin_active(root: Path, extra: list[str]) -> bool:
    done = subprocess.run(
        [*BASE, *extra, "--help"], cwd=root, env=ENV, capture_output=True, text=True, check=False
    )
    return "--latency-budget" in done.stdout


def importtime(top: int) -> list[str]:
    for _ in range(2):  # the second run reads the .pyc files the first one wrote (if cached)
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import pytest_latency.plugin"],
            env=ENV,
            capture_output=True,
            text=True,
            check=True,
        )
    rows: list[tuple[int, int, str]] = []
    out: list[str] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, total_us, module = (part.strip() for part in line[12:].split("|"))
        rows.append((int(own), int(total_us), module))
    total = max(c for _, c, n in rows if n.strip() == "pytest_latency.plugin")
    pytest_total = max((c for _, c, n in rows if n.strip() == "pytest"), default=0)
    out.append(f"\nimporttime of `import pytest_latency.plugin` (second of two runs, so a "
               f"cached .pyc is warm; load {load()}):")  # fmt: skip
    out.append(f"  pytest_latency.plugin cumulative {total / 1000:.1f} ms, of which `pytest` "
               f"itself {pytest_total / 1000:.1f} ms (loaded anyway by pytest)")  # fmt: skip
    ours = sorted((r for r in rows if r[2].strip().startswith("pytest_latency")),
                  key=lambda r: -r[1])  # fmt: skip
    out.append(f"  top {top} pytest_latency modules by cumulative time:")
    out.append(f"    {'self ms':>8} {'cumul ms':>9}  module")
    for self_us, cumulative, name in ours[:top]:
        out.append(f"    {self_us / 1000:8.2f} {cumulative / 1000:9.2f}  {name.strip()}")
    out.append(f"  top {top} of all modules by self time:")
    for self_us, cumulative, name in sorted(rows, key=lambda r: -r[0])[:top]:
        out.append(f"    {self_us / 1000:8.2f} {cumulative / 1000:9.2f}  {name.strip()}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=20, help="runs of each variant")
    ap.add_argument("--top", type=int, default=12, help="importtime rows to show")
    ap.add_argument(
        "--bytecode",
        choices=("cached", "none"),
        default="cached",
        help="cached: .pyc files reused between runs (usual); none: PYTHONDONTWRITEBYTECODE=1",
    )
    ap.add_argument("--quick", action="store_true", help="a short run (4 pairs)")
    ap.add_argument(
        "--instructions",
        action=argparse.BooleanOptionalAction,
        default=shutil.which("valgrind") is not None,
        help="also count instructions under valgrind (default: when valgrind is installed)",
    )
    args = ap.parse_args()
    if args.quick:
        args.reps = 4
    argv = " ".join(sys.argv[1:])
    print(f"command: {COMMAND}{' ' + argv if argv else ''}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  cores: {os.cpu_count()}")
    with (
        tempfile.TemporaryDirectory(prefix="latency-unused-") as tmp,
        tempfile.TemporaryDirectory(prefix="latency-unused-one-") as tmp_one,
    ):
        root = Path(tmp)
        write_suite(root, args.tests)
        child_env(args.bytecode, Path(tmp_one) / "pycache")
        print(f"bytecode: {args.bytecode} (PYTHONDONTWRITEBYTECODE in this shell: "
              f"{os.environ.get('PYTHONDONTWRITEBYTECODE', 'unset')})")  # fmt: skip

        enabled: list[str] = []
        disabled = ["-p", "no:latency"]
        if not plugin_active(root, enabled) or plugin_active(root, disabled):
            raise SystemExit("the latency plugin is not installed, or -p no:latency did not work")
        print(f"suite: {args.tests} trivial tests in {tmp}; each variant {args.reps} runs")
        print(f"  A: {' '.join(BASE[2:])}\n  B: {' '.join(BASE[2:] + disabled)}")
        run_once(root, enabled, args.tests)  # warm the file cache and the .pyc files
        run_once(root, disabled, args.tests)
        small = Path(tmp_one) / "suite"
        small.mkdir()  # a separate tree: same-named test modules in one run would clash
        write_suite(small, 1)
        print(f"load average before: {load()}")
        pairs: list[tuple[tuple[float, float], tuple[float, float]]] = []
        startup: list[float] = []  # enabled − disabled wall of a 1-test suite: the constant part
        for i in range(args.reps):
            if i % 2 == 0:
                a = run_once(root, enabled, args.tests)
                b = run_once(root, disabled, args.tests)
                one_a, _ = run_once(small, enabled, 1)
                one_b, _ = run_once(small, disabled, 1)
            else:
                one_b, _ = run_once(small, disabled, 1)
                one_a, _ = run_once(small, enabled, 1)
                b = run_once(root, disabled, args.tests)
                a = run_once(root, enabled, args.tests)
            pairs.append((a, b))
            startup.append(one_a - one_b)
        print(f"load average after: {load()}")
        imports = importtime(args.top)  # same bytecode setting (cached: warm .pyc files)
        counted = instruction_lines(root, small, args.tests) if args.instructions else []
    wall_ratio = [a[0] / b[0] for a, b in pairs]
    cpu_ratio = [a[1] / b[1] for a, b in pairs]
    print(f"\n{'':26} {'enabled':>22} {'-p no:latency':>22} {'ratio enabled/off':>26}")
    print(
        f"{'wall s (median [p10..p90])':26} {spread([a[0] for a, _ in pairs], '.3f'):>22} "
        f"{spread([b[0] for _, b in pairs], '.3f'):>22} {spread(wall_ratio, '.4f'):>26}"
    )
    print(
        f"{'CPU s  (median [p10..p90])':26} {spread([a[1] for a, _ in pairs], '.3f'):>22} "
        f"{spread([b[1] for _, b in pairs], '.3f'):>22} {spread(cpu_ratio, '.4f'):>26}"
    )
    extra_ms = statistics.median([(a[0] - b[0]) * 1000 for a, b in pairs])
    print(f"median extra wall per run: {extra_ms:+.0f} ms "
          f"({extra_ms * 1000 / args.tests:+.1f} µs per test, startup included)")  # fmt: skip
    constant_ms = statistics.median(startup) * 1000
    cpu_extra_ms = statistics.median([(a[1] - b[1]) * 1000 for a, b in pairs])
    per_test_us = (extra_ms - constant_ms) * 1000 / max(args.tests - 1, 1)
    print(f"median extra CPU per run: {cpu_extra_ms:+.0f} ms; 1-test suite (startup, collection "
          f"and session hooks only): {constant_ms:+.0f} ms wall, so about "
          f"{per_test_us:+.1f} µs per test")  # fmt: skip
    median = statistics.median(wall_ratio)
    print(f"target: wall ratio <= 1.03: {median:.4f} ({'met' if median <= 1.03 else 'NOT met'})")
    print("\n".join(counted + imports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
