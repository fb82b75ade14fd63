"""A corpus of malformed budgets files, each rejected with one clear usage error, and a fuzzer.

Every `tests/budget_corpus/*.toml` is a budgets file that must not load. Its first lines are TOML
comments saying what the error must contain (`# expect: <fragment>`) and which line it must name
(`# line: <n>`); files that are not UTF-8 carry the same lines in a sidecar `<name>.toml.expect`.
An optional `# gap: <why>` marks a file whose message does not (yet) name the right line: the
line check is then a strict xfail, so fixing the loader flips it. Single cases in
test_budgets.py check individual messages; this corpus is the systematic check, through
`load_budget_file` and through the plugin (`--latency-budget`, pytest's usage-error exit code).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_latency.budgets import BudgetError, BudgetFile, load_budget_file

pytest_plugins = ["pytester"]

CORPUS = Path(__file__).parent / "budget_corpus"


@dataclass(frozen=True)
class Case:
    path: Path
    fragment: str
    line: int
    gap: str

    @property
    def id(self) -> str:
        return self.path.stem


def _case(path: Path) -> Case:
    sidecar = path.with_name(path.name + ".expect")
    header = sidecar.read_bytes() if sidecar.exists() else path.read_bytes()
    fields: dict[str, str] = {}
    for line in header.decode("utf-8-sig").splitlines():  # a BOM is ignored, as the loader does
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(": ")
        fields[key] = value
    return Case(path, fields["expect"], int(fields["line"]), fields.get("gap", ""))


CASES = [_case(p) for p in sorted(CORPUS.glob("*.toml"))]


def _params(*, gaps_xfail: bool) -> list[object]:
    return [
        pytest.param(
            case,
            id=case.id,
            marks=[pytest.mark.xfail(strict=True, reason=case.gap)]
            if gaps_xfail and case.gap
            else [],
        )
        for case in CASES
    ]


def test_the_corpus_is_big_enough() -> None:
    assert len(CASES) >= 30
    assert all(c.fragment for c in CASES)


@pytest.mark.parametrize("case", _params(gaps_xfail=False))
def test_loading_raises_one_budget_error_naming_the_file(case: Case) -> None:
    with pytest.raises(BudgetError) as info:
        load_budget_file(case.path)
    assert type(info.value) is BudgetError
    message = str(info.value)
    first = message.splitlines()[0]
    assert first.startswith(f"{case.path}:"), message
    assert message.count(str(case.path)) == 1, message  # one error, not several
    assert case.fragment in message, (case.fragment, message)


@pytest.mark.parametrize("case", _params(gaps_xfail=True))
def test_the_error_names_the_line(case: Case) -> None:
    with pytest.raises(BudgetError) as info:
        load_budget_file(case.path)
    assert str(info.value).startswith(f"{case.path}:{case.line}: "), str(info.value)


@pytest.mark.parametrize("case", _params(gaps_xfail=False))
def test_the_plugin_exits_with_a_usage_error(pytester: pytest.Pytester, case: Case) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile("def test_never_runs():\n    raise AssertionError('ran')\n")
    result = pytester.runpytest(f"--latency-budget={case.path}")
    output = result.stdout.str() + "\n" + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert f"pytest-latency: {case.path}" in result.stderr.str(), output
    assert case.fragment in result.stderr.str(), output
    assert "Traceback" not in output and "ran" not in result.stdout.str(), output


# ---- fuzzing -------------------------------------------------------------------------------------

VALID = b"""\
# budgets for the chat suite
[defaults]
samples = 20
warmup = 1
max_samples = 200

[[budget]]
select = "tests/chat/*"
expect = ["ttft.p95 < 400ms", "tpot.p50 < 40ms", "ttft{model=claude-haiku-4-5}.p99 <= 1.5s"]

[[budget]]
marker = "agent"
expect = [
    "calls.max <= 8",
    "good(ttft < 1s, e2e < 5 s) >= 90%",
]

[session]
expect = ["error_rate < 1%", "cache_read_ratio > 0.5", "e2e.mean < 2000000us"]
"""

_flip = st.tuples(st.just("flip"), st.integers(0, len(VALID) - 1), st.integers(0, 255))
_delete = st.tuples(st.just("delete"), st.integers(0, 19), st.just(0))
_duplicate = st.tuples(st.just("duplicate"), st.integers(0, 19), st.just(0))
_insert = st.tuples(st.just("insert"), st.integers(0, len(VALID)), st.integers(0, 255))


def _mutate(data: bytes, edits: list[tuple[str, int, int]]) -> bytes:
    for kind, at, byte in edits:
        if kind in ("flip", "insert"):
            at = min(at, len(data) - (kind == "flip"))
            if at < 0:
                continue
            rest = data[at + 1 :] if kind == "flip" else data[at:]
            data = data[:at] + bytes([byte]) + rest
        else:
            lines = data.splitlines(keepends=True)
            if not lines:
                continue
            i = at % len(lines)
            lines[i : i + 1] = [] if kind == "delete" else [lines[i], lines[i]]
            data = b"".join(lines)
    return data


def test_the_fuzz_seed_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "budgets.toml"
    path.write_bytes(VALID)
    loaded = load_budget_file(path)
    assert len(loaded.rules) == 2 and len(loaded.session) == 3


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(edits=st.lists(st.one_of(_flip, _delete, _duplicate, _insert), min_size=1, max_size=4))
def test_mutations_give_a_budget_file_or_a_budget_error(
    tmp_path: Path, edits: list[tuple[str, int, int]]
) -> None:
    path = tmp_path / "budgets.toml"
    path.write_bytes(_mutate(VALID, edits))
    try:
        loaded = load_budget_file(path)
    except BudgetError as exc:
        assert str(exc).startswith(str(path)), str(exc)
    else:
        assert isinstance(loaded, BudgetFile)
