"""Hostile result files through `pytest-latency report|merge|compare` (issue #15, items 6-7).

A seeded fuzzer mutates a rich, valid result file (every block the plugin writes: budgets,
findings with evidence, what-ifs, error kinds, timelines, prefill points, rollups) with wrong
types in any field, deep nesting, huge numbers and counts, garbage and bomb histogram blobs, and
drives the real entry point with it. Every outcome must be exit 0-2, and a refusal is one line
naming the file, with no traceback, within bounded memory and time.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import random
import resource
import struct
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from latency_data import build, diagnosis_tests, make_test

from pytest_latency import histogram as histogram_module
from pytest_latency.cli import main
from pytest_latency.histogram import MAX_TOTAL_COUNT
from pytest_latency.results import dumps, write_result

SEED = 20260815
DEEP = "__deep__"


def _blob_with(counts: dict[int, int]) -> str:
    """A well-formed V2 blob holding exactly these counts (index → count), however large."""
    return histogram_module._encode(Counter(counts))


def _bomb(inflated: int, claimed: int) -> str:
    """A blob whose zlib stream inflates to `inflated` bytes of zero counts, and whose payload
    header says the counts take `claimed` bytes."""
    header = struct.pack(">IIIIQQd", 0x1C849313, claimed, 0, 3, 1, 3_600_000_000, 1.0)
    deflater = zlib.compressobj(9)
    parts = [deflater.compress(header)]
    chunk = bytes(1 << 20)
    for _ in range(inflated >> 20):
        parts.append(deflater.compress(chunk))
    parts.append(deflater.flush())
    deflated = b"".join(parts)
    return base64.b64encode(struct.pack(">II", 0x1C849314, len(deflated)) + deflated).decode()


_BOMB_LIE = _bomb(64 << 20, 200_000)  # says 200 kB, inflates to 64 MB
_BOMB_TRUE = _bomb(64 << 20, (64 << 20) + 40)  # says what it holds: 64 MB
_BIG = [
    _blob_with({3000: 10**8}),  # the 44 KB file that took 4 GB in `compare`
    _blob_with({3000: 2**40, 5000: 2**40}),
    _blob_with({3000: MAX_TOTAL_COUNT + 1}),  # over the cap: refused
]
_HOSTILE: list[Any] = [
    None,
    True,
    0,
    -1,
    2**64,
    10**400,  # an int beyond any float
    1e308,
    "x",
    "",
    [],
    {},
    [1, "a", None],
    {"a": [1, {"b": 2}]},
    "HISTFAAAgarbage==",
    "not base64 !",
    _BOMB_LIE,
    _BOMB_TRUE,
    *_BIG,
    DEEP,
]


def _deep_json(depth: int, rng: random.Random) -> str:
    opener, closer = rng.choice([("[", "]"), ('{"k":', "}")])
    return opener * depth + "1" + closer * depth


def _plausible(old: Any, rng: random.Random) -> Any:
    """A value of the same JSON type, often at an edge: what a reader may trust the type of."""
    if isinstance(old, bool):
        return not old
    if isinstance(old, int):
        return rng.choice([0, 1, 7, 10**9, MAX_TOTAL_COUNT, -5])
    if isinstance(old, float):
        return rng.choice([0.0, -1.5, 0.5, 1e12, 3.6e9])
    if isinstance(old, str):
        return rng.choice(["", "x" * 5000, "::error file=x.py::forged\n\x1b[2J", "ünï\u2028"])
    if isinstance(old, list):
        return old[: rng.randint(0, len(old))] if old else old
    if isinstance(old, dict):
        return {k: v for k, v in old.items() if rng.random() < 0.7}
    return old


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node[:3]):  # a few items of each list are enough
            out += _paths(value, (*path, index))
    return out


def _mutated(document: dict[str, Any], rng: random.Random) -> str:
    """The document as JSON text with one to three hostile changes."""
    data = json.loads(dumps(document))
    paths = [p for p in _paths(data) if p]
    deep = None
    for _ in range(rng.choice([1, 1, 2, 3])):
        path = rng.choice(paths)
        parent = data
        for step in path[:-1]:
            if not isinstance(parent, dict | list):
                break
            try:
                parent = parent[step]
            except (KeyError, IndexError, TypeError):
                break
        else:
            if not isinstance(parent, dict | list):
                continue
            key = path[-1]
            if isinstance(parent, dict) and rng.random() < 0.15:
                parent.pop(key, None)
                continue
            value = _plausible(parent[key], rng) if rng.random() < 0.5 else rng.choice(_HOSTILE)
            if value == DEEP:
                deep = _deep_json(rng.choice([40, 2_000, 100_000]), rng)
            try:
                parent[key] = value
            except (IndexError, TypeError):
                continue
    text = json.dumps(data, ensure_ascii=False)
    if deep is not None:
        text = text.replace(json.dumps(DEEP), deep)
    return text


def _rich() -> dict[str, Any]:
    tests = [*diagnosis_tests()[1:], make_test("t.py::test_plain", seed=5, samples=8)]
    return build(tests)


@pytest.fixture(scope="module")
def rich() -> dict[str, Any]:
    return _rich()


def _one_line_naming(err: str, path: Path) -> None:
    assert err.count("\n") == 1, err
    assert err.startswith("pytest-latency: error: "), err
    assert str(path) in err, err
    assert "Traceback" not in err, err


def fuzz_result_files(tmp_path: Path) -> dict[str, Any]:
    """The fuzz loop, run in a fresh process (`CHILD`): its outcomes, the fields refused, its
    time and how far it raised the process's peak RSS above what the process took to get there
    (imports, the rich file, one clean run of each command). Any assertion fails the child."""
    rich = _rich()
    good = tmp_path / "good.json"
    write_result(good, rich)
    bad = tmp_path / "bad.json"
    out = tmp_path / "out"

    def run(argv: list[str]) -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = main(argv)  # any exception escaping fails the child with its traceback
        return status, err.getvalue()

    def commands() -> list[list[str]]:
        return [
            ["report", str(bad), "-o", f"{out}.html", "--markdown", f"{out}.md"],
            ["merge", str(good), str(bad), "-o", f"{out}.json"],
            ["compare", str(good), str(bad), "-o", f"{out}.diff.md"],
            ["compare", str(bad), str(good), "-o", f"{out}.diff.md"],
        ]

    write_result(bad, rich)
    for argv in commands():  # warm: what every command imports and builds once
        assert run(argv)[0] in (0, 1)
    rng = random.Random(SEED)
    outcomes: Counter[int] = Counter()
    refused_fields: set[str] = set()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    for _ in range(70):
        bad.write_text(_mutated(rich, rng), encoding="utf-8")
        for argv in commands():
            status, err = run(argv)
            assert status in (0, 1, 2), (argv, status)
            outcomes[status] += 1
            if status == 2:
                _one_line_naming(err, bad)
                refused_fields.add(err.split(": malformed result file: ")[-1].split(":")[0])
            else:
                assert err == "", err
            if argv[0] == "merge" and status == 0:
                # What merge wrote from an accepted file loads again: no garbage passed on.
                assert run(["report", f"{out}.json", "--markdown", f"{out}.md"])[0] == 0
    return {
        "elapsed": time.monotonic() - started,
        "grown_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before,
        "outcomes": dict(outcomes),
        "refused_fields": sorted(refused_fields),
    }


CHILD = """
import json, sys
from pathlib import Path
from test_result_fuzz import fuzz_result_files
print(json.dumps(fuzz_result_files(Path(sys.argv[1]))))
"""


def test_hostile_result_files_exit_0_to_2_with_one_line_bounded(tmp_path: Path) -> None:
    # In a fresh process: this session's own high-water mark would hide any growth below it.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    # The bombs alone took 2.1 GB, 10^8 expanded values 4 GB: the bound is far below either.
    grown_kib = result["grown_kib"]
    assert grown_kib < 150 << 10, f"peak RSS grew {grown_kib / 1024:.0f} MiB"
    # ~5 s here, 36 s beside two CPU hogs and a second test run: the bound catches a blow-up
    # (a quadratic path, a hang), not a busy machine; the speed target is benchmarks/'.
    assert result["elapsed"] < 120, result["elapsed"]
    # The fuzzer reached both sides: files refused, and mutated files still accepted.
    outcomes = {int(k): v for k, v in result["outcomes"].items()}
    assert outcomes.get(2, 0) > 100, outcomes
    assert outcomes.get(0, 0) + outcomes.get(1, 0) > 50, outcomes
    assert len(result["refused_fields"]) > 40, result["refused_fields"]


def _limited() -> None:  # in the child: 1 GiB of address space, 20 s of CPU
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (20, 20))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (("session", "metrics", "ttft", "hdr"), _BOMB_LIE),
        (("tests", 0, "metrics", "ttft", "hdr"), _BIG[0]),
        (("tests", 0, "metrics"), DEEP),
    ],
)
def test_the_console_script_refuses_in_a_memory_limited_process(
    rich: dict[str, Any], tmp_path: Path, field: tuple[Any, ...], value: Any
) -> None:
    """Through the installed entry point, as CI runs it, under a 1 GiB address-space limit that
    the old code broke (a 2.1 GB bomb, 4 GB of expanded values, a RecursionError traceback)."""
    data = json.loads(dumps(rich))
    node = data
    for step in field[:-1]:
        node = node[step]
    node[field[-1]] = value
    text = json.dumps(data).replace(json.dumps(DEEP), "[" * 100_000 + "]" * 100_000)
    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    bad.write_text(text)
    write_result(good, rich)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for command in (
        ["report", str(bad), "--markdown", str(tmp_path / "x.md")],
        ["merge", str(good), str(bad), "-o", str(tmp_path / "x.json")],
        ["compare", str(good), str(bad)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "pytest_latency.cli", *command],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            preexec_fn=_limited,
        )
        if field[-1] == "hdr" and field[0] == "tests":
            # A count of 10^8 is a valid histogram: compared from its counts, merged as is.
            assert done.returncode in (0, 1), done.stderr
            assert done.stderr == ""
            continue
        assert done.returncode == 2, (command, done.stderr)
        _one_line_naming(done.stderr, bad)
