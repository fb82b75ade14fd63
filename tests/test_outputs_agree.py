"""Every output tells one story: a suite whose tests show prefill/decode, cache and serial-call
findings runs once through the plugin (real SDK clients, the built-in simulator), and the terminal
summary, the result file, the HTML report and the Markdown summary must give the same value and
verdict for every figure they share, and no output may contradict a finding."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

# Loaded once, outside pytester's in-process run (it unloads what a run imports first).
import anthropic  # noqa: F401
import openai  # noqa: F401
import pytest

import pytest_latency.sim  # noqa: F401
from pytest_latency import units
from pytest_latency.results import cost_of_block
from pytest_latency.spend import cost_cell, saved_cell

pytest_plugins = ["pytester"]

SUITE = """
import pytest

LONG = " ".join(f"fact {i} is stable" for i in range(700))


@pytest.fixture
def sim(llm_sim):
    llm_sim.set_model(llm_sim.model.replace(
        ttfb_ms=1.0, prefill_us_per_token=40.0, decode_ms_per_token=0.5, jitter=0.0,
        output_tokens=8, cache_min_tokens=256, cache_block_tokens=16))
    llm_sim.reset_cache()
    return llm_sim


def stream(client, system, user="q", tokens=8):
    with client.messages.stream(model="claude-sim", max_tokens=tokens, system=system,
                                messages=[{"role": "user", "content": user}]) as s:
        return "".join(s.text_stream)


SIZES = iter([1500, 2600, 3700, 4800, 5900, 7000] * 10)


@pytest.mark.latency("ttft.p50 < 10s", "e2e.p90 < 30s", samples=6)
def test_long_prompts(sim, anthropic_client):
    # Uncached, growing prompts and short answers: prefill-bound, with a fitted cost.
    n = next(SIZES)
    stream(anthropic_client, f"case {n} " + "context " * (n // 2))


@pytest.mark.latency("cache_read_ratio > 0.3", "ttft.p95 < 10s", samples=6)
def test_cached_system_prompt(sim, anthropic_client):
    system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    stream(anthropic_client, system)


@pytest.mark.latency("e2e.p50 < 1ms", samples=5)
def test_three_independent_steps(sim, anthropic_client):
    # Three calls one after another, none carrying another's output: serial, independent.
    for topic in ("weather in Paris", "the price of tea", "a haiku about rivers"):
        stream(anthropic_client, "You answer briefly.", user=f"Tell me about {topic}.", tokens=40)
"""


class _Rows(HTMLParser):
    """The cells of every row of the report's test table (`table.tests`)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in_table = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and ("class", "tests") in attrs:
            self._in_table = True
        elif self._in_table and tag == "tr":
            self.rows.append([])
        elif self._in_table and tag == "td":
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_table = False
        elif tag == "td" and self._cell is not None and self.rows:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _terminal_rows(lines: list[str], nodeids: list[str]) -> dict[str, list[str]]:
    start = next(i for i, line in enumerate(lines) if "latency summary" in line)
    header = lines[start + 1].split()
    assert header[:4] == ["test", "n", "calls", "err"], header
    rows = {}
    for line in lines[start + 2 : start + 2 + len(nodeids)]:
        nodeid, *cells = re.split(r"\s{2,}", line.strip())
        rows[nodeid] = cells
    return rows


def _markdown_rows(text: str) -> dict[str, list[str]]:
    section = text.split("### Tests", 1)[1]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| test "):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0].replace("\\", "")] = cells[1:]
    return rows


def _status(test: dict[str, Any]) -> str:
    statuses = {b["status"] for b in test["budgets"]}
    return next((s for s in ("fail", "inconclusive", "pass") if s in statuses), "-")


def test_terminal_file_html_and_markdown_agree(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_suite=SUITE)
    # The simulator's model has a price here (budgets.toml's override): a real cost to agree on.
    Path(pytester.path, "budgets.toml").write_text(
        '[prices."claude-sim"]\ninput = 1\noutput = 5\ncache_read = 0.1\ncache_write = 1.25\n'
    )
    result = pytester.runpytest(
        "--latency-sim=instant",
        "--latency-budget=budgets.toml",
        "--latency-json=out.json",
        "--latency-report=out.html",
        "--latency-markdown=out.md",
    )
    result.assert_outcomes(passed=2, failed=1)  # e2e.p50 < 1ms cannot pass
    data = json.loads(Path(pytester.path, "out.json").read_text(encoding="utf-8"))
    tests = {t["nodeid"]: t for t in data["tests"]}
    nodeids = list(tests)
    assert len(nodeids) == 3

    kinds = {n: {f["kind"] for f in t["findings"]} for n, t in tests.items()}
    long, cached, steps = nodeids
    # The suite shows what it was built to show: otherwise there is nothing to agree on.
    assert "prefill_bound" in kinds[long], kinds
    assert tests[cached]["cache_read_ratio"]["value"] > 0.3
    assert "serial_independent_calls" in kinds[steps], kinds

    terminal = _terminal_rows(result.outlines, nodeids)
    parser = _Rows()
    page = Path(pytester.path, "out.html").read_text(encoding="utf-8")
    parser.feed(page)
    html_rows = {row[0]: row for row in parser.rows if row}
    markdown = _markdown_rows(Path(pytester.path, "out.md").read_text(encoding="utf-8"))

    for nodeid, test in tests.items():
        metrics = test["metrics"]
        figures = {
            "samples": str(test["samples"]),
            "ttft p50": units.duration(metrics["ttft"]["p50"]),
            "ttft p95": units.duration(metrics["ttft"]["p95"]),
            "tpot p50": units.duration(metrics["tpot"]["p50"]),
            "e2e p95": units.duration(metrics["e2e"]["p95"]),
            "turn p95": units.duration(metrics["turn"]["p95"]),
            "cache": units.ratio(test["cache_read_ratio"]["value"]),
            "cost": cost_cell(cost_of_block(test["cost"])),
            "verdict": _status(test),
        }
        assert figures["cost"].startswith("$"), figures  # a priced model: a real cost to agree on
        # terminal: n calls err ttft50 ttft95 tpot50 e2e95 turn95 cache cost verdict
        t = terminal[nodeid]
        assert [t[0], *t[3:11]] == list(figures.values()), (nodeid, t, figures)
        assert t[1] == str(test["call_count"]) and t[2] == str(test["error_count"])
        # HTML: nodeid outcome samples calls errors ttft50 ttft95 tpot50 e2e95 turn95 prefill
        # cache cost saved flagged findings verdict
        saved = saved_cell(cost_of_block(test["cost"]))
        h = html_rows[nodeid]
        shown = [h[2], h[5], h[6], h[7], h[8], h[9], h[11], h[12], h[16]]
        assert shown == list(figures.values()), (nodeid, h)
        assert h[10] == units.ratio(test["phase"]["prefill_share"]) and h[13] == saved
        # Markdown: n ttft50 ttft95 tpot50 e2e95 turn95 cache cost saved verdict
        m = [c.replace("\\$", "$") for c in markdown[nodeid]]  # `$` escaped: no TeX on GitHub
        assert m == [*list(figures.values())[:-1], saved, figures["verdict"]], (nodeid, m)

    # No output contradicts a finding.
    def detail(nodeid: str) -> str:
        index = page.index(f'<span class="id">{html.escape(nodeid)}</span>')
        return page[index : page.index("</details>", index)]

    prefill = next(f for f in tests[long]["findings"] if f["kind"] == "prefill_bound")
    long_detail = detail(long)
    assert tests[long]["phase"]["leaning"] == "prefill"
    assert "<b>Mostly before the first token.</b>" in long_detail
    assert "<b>Mostly streaming.</b>" not in long_detail
    fit = prefill["evidence"]["prefill_fit"]
    if fit["ms_per_1k_uncached_tokens"] is None:
        assert "Fitted prefill cost" not in long_detail
    else:  # the report's fitted cost is the finding's
        slope = tests[long]["prefill"]["slope_us_per_token"]
        assert slope == fit["ms_per_1k_uncached_tokens"]
        assert f"Fitted prefill cost: {units.duration(slope * 1000)}" in long_detail
    steps_detail = detail(steps)
    assert "independent ones could run concurrently" in steps_detail
    assert "<b>Serial calls.</b>" in steps_detail and "<b>Fan-out.</b>" not in steps_detail
    assert tests[steps]["concurrency"]["parallel"] is False
    # The cache statement reads the file's ratio.
    ratio = tests[cached]["cache_read_ratio"]
    assert f"{units.ratio(ratio['value'])} of input tokens were read" in detail(cached)
    assert "Cache: unknown" not in detail(cached)
    # The failing budget is failing everywhere it is shown.
    miss = next(b for b in tests[steps]["budgets"] if b["expr"] == "e2e.p50 < 1ms")
    assert miss["status"] == "fail" and data["summary"]["fail"] == 1
    total = sum(data["summary"].values())
    assert total == sum(len(t["budgets"]) for t in tests.values()) == 5
    assert f"1 of {total} latency budgets failed" in page
    assert f"1 of {total} latency budgets failed" in Path(pytester.path, "out.md").read_text()
    result.stdout.fnmatch_lines([f"*{steps}: {miss['message']}*"])
