"""What each call costs (issue #18): prices from genai-prices' bundled table through real SDK
clients against the simulator, checked against `genai_prices.calc_price` run here on the usage
the simulator logged; cache reads and writes priced apart; a model without a price; a price
override in budgets.toml; the `usd`/`$` units and the `sum` statistic; merge adding costs up."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

# Imported here so they stay loaded across pytester's in-process runs (see test_plugin_sim.py).
import anthropic  # noqa: F401
import openai  # noqa: F401
import pytest
from genai_prices import Usage, calc_price

from pytest_latency import units
from pytest_latency.budgets import BudgetError, parse_budget_file, parse_expectation
from pytest_latency.metrics import CallMetrics
from pytest_latency.pools import CostTotals
from pytest_latency.pricing import Prices
from pytest_latency.results import (
    ResultError,
    cost_of_block,
    load_result,
    merge_results,
    write_result,
)
from pytest_latency.spend import cost_cell, price_text, saved_cell, spend_line

pytest_plugins = ["pytester"]

CLAUDE, GPT = "claude-haiku-4-5", "gpt-4.1-mini"

CONFTEST = """
import json
import pytest

@pytest.fixture
def sim(llm_sim):
    llm_sim.set_model(llm_sim.model.replace(
        ttfb_ms=0.5, prefill_us_per_token=0.0, decode_ms_per_token=0.2, jitter=0.0,
        output_tokens=40, cache_min_tokens=256, cache_block_tokens=16))
    llm_sim.reset_cache()
    yield llm_sim
    # The usage the server reported for every request this test made, for the outer test.
    with open("truth.jsonl", "a") as f:
        for t in llm_sim.truth():
            f.write(json.dumps({"model": t.model, "api": t.api, "input": t.input_tokens,
                "output": t.output_tokens, "read": t.cache_read_tokens,
                "write": t.cache_write_tokens}) + "\\n")
    llm_sim.clear_truth()
"""

INNER = """
import pytest

HANDBOOK = " ".join(f"Section {i}: the rule number {i} applies." for i in range(200))

@pytest.mark.latency("cost.max < $1", samples=3)
def test_claude_cached(anthropic_client, sim):
    anthropic_client.messages.create(
        model="MODEL_A", max_tokens=40,
        system=[{"type": "text", "text": HANDBOOK, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "Which rule applies?"}])

@pytest.mark.latency("cost.sum < 1usd", "output_tokens.sum < 50000", samples=3)
def test_gpt_cached(openai_client, sim):
    for _ in openai_client.chat.completions.create(
            model="MODEL_B", max_tokens=40, stream=True, stream_options={"include_usage": True},
            messages=[{"role": "system", "content": HANDBOOK},
                      {"role": "user", "content": "Which rule applies?"}]):
        pass
"""


@pytest.fixture
def tester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(CONFTEST)
    return pytester


class _Tables(HTMLParser):
    """The rows of one `<table class=...>` of the report, as {header: cell text}."""

    def __init__(self, css: str) -> None:
        super().__init__()
        self.css, self.inside, self.headers = css, False, list[str]()
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.inside = dict(attrs).get("class") == self.css
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.inside = False
        elif self.inside and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def _html_table(page: str, css: str) -> list[dict[str, str]]:
    parser = _Tables(css)
    parser.feed(page)
    header, *rows = parser.rows
    assert rows, f"no rows in table.{css}"
    return [dict(zip(header, row, strict=True)) for row in rows]


def _detail(page: str, test: str) -> str:
    """A test's details section of the report."""
    start = page.index(f'<span class="id">test_inner.py::{test}</span>')
    return page[start : page.index("</details>", start)]


def _truth(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _price(t: dict[str, Any], provider: str, *, plain_reads: bool = False) -> float:
    """µ$ for one logged request, priced here by genai-prices itself."""
    usage = Usage(
        input_tokens=t["input"],
        output_tokens=t["output"],
        cache_read_tokens=0 if plain_reads else t["read"] or 0,
        cache_write_tokens=t["write"] or 0,
    )
    return float(calc_price(usage, t["model"], provider_id=provider).total_price) * 1e6


def test_calls_are_priced_as_genai_prices_prices_the_simulators_usage(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(test_inner=INNER.replace("MODEL_A", CLAUDE).replace("MODEL_B", GPT))
    result = tester.runpytest(
        "--latency-sim=instant",
        "--latency-json=out.json",
        "--latency-markdown=out.md",
        "--latency-report=out.html",
    )
    result.assert_outcomes(passed=2)
    truth = _truth(tester.path / "truth.jsonl")
    claude = [t for t in truth if t["model"] == CLAUDE]
    gpt = [t for t in truth if t["model"] == GPT]
    assert len(claude) == len(gpt) == 3
    # The first call writes the cache, the next two read it: priced apart.
    assert claude[0]["write"] and not claude[0]["read"] and all(t["read"] for t in claude[1:])
    assert all(t["read"] for t in gpt[1:])

    data = json.loads((tester.path / "out.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    for name, logged, provider in (
        ("test_claude_cached", claude, "anthropic"),
        ("test_gpt_cached", gpt, "openai"),
    ):
        entry = tests[name]
        prices = sorted(_price(t, provider) for t in logged)
        block = entry["metrics"]["cost"]
        assert block["unit"] == "microusd" and block["count"] == 3
        # Per call: the cheapest and dearest calls, and the mean, to a millionth of a cent.
        assert block["min"] == pytest.approx(prices[0], abs=1e-2)
        assert block["max"] == pytest.approx(prices[-1], abs=1e-2)
        assert block["mean"] == pytest.approx(sum(prices) / 3, abs=1e-2)
        cost = entry["cost"]
        assert cost["total"] == pytest.approx(sum(prices), abs=1e-2)
        assert cost["calls_priced"] == 3 and cost["unpriced_models"] == {}
        saved = sum(_price(t, provider, plain_reads=True) - _price(t, provider) for t in logged)
        assert cost["cache_saved"] == pytest.approx(saved, abs=1e-2) and saved > 0
        assert [b["status"] for b in entry["budgets"]] == ["pass"] * len(entry["budgets"])
    # Anthropic's 5-minute write costs 1.25x input: the extra is a quarter of the written input.
    written = claude[0]["write"]
    rate = calc_price(Usage(input_tokens=10**6, output_tokens=0), CLAUDE, provider_id="anthropic")
    extra = tests["test_claude_cached"]["cost"]["cache_extra"]
    assert extra == pytest.approx(written * float(rate.total_price) * 0.25, rel=1e-9)
    assert tests["test_gpt_cached"]["cost"]["cache_extra"] == 0  # OpenAI writes cost nothing

    session = data["session"]["cost"]
    every = [_price(t, "anthropic") for t in claude] + [_price(t, "openai") for t in gpt]
    assert session["total"] == pytest.approx(sum(every), abs=1e-2)
    assert data["groups"][f"model={CLAUDE}"]["cost"]["total"] == pytest.approx(
        sum(every[:3]), abs=1e-2
    )
    stamp = data["run"]["prices"]
    assert stamp["source"] == "genai-prices" and stamp["version"] and stamp["overrides"] == {}
    # One text, in the terminal and the Markdown alike.
    line = spend_line(CostTotals(sum(every), session["cache_saved"], extra, 6, {}, 0))
    assert line is not None and units.money(sum(every)) in line
    result.stdout.fnmatch_lines([f"*{line}*"])
    markdown = (tester.path / "out.md").read_text()
    assert (line[0].upper() + line[1:]).replace("$", "\\$") in markdown

    # The HTML report: per test and per model, the cost and what caching saved, as the result
    # file has them (each checked above against genai-prices' own prices); the session's spend.
    page = (tester.path / "out.html").read_text()
    rows = {r["test"].split("::")[1]: r for r in _html_table(page, "tests")}
    groups = {(r["model"], r["endpoint"]): r for r in _html_table(page, "groups")}
    for name, model, api in (
        ("test_claude_cached", CLAUDE, "anthropic.messages"),
        ("test_gpt_cached", GPT, "openai.chat"),
    ):
        cost = tests[name]["cost"]
        assert rows[name]["cost"] == units.money(cost["total"])
        assert rows[name]["cache saved"] == units.money(cost["net_saved"]) != units.money(0)
        group = data["groups"][f"model={model},endpoint={api}"]["cost"]
        assert group["total"] == pytest.approx(cost["total"], rel=1e-12)
        assert groups[(model, api)]["cost"] == units.money(group["total"])
        assert groups[(model, api)]["cache saved"] == units.money(group["net_saved"])
        # The test's details say what it spent and what caching saved and cost extra.
        spent = spend_line(cost_of_block(cost), label=False)
        assert spent is not None and f"<b>Cost.</b> {spent}." in _detail(page, name)
    net = units.money(session["net_saved"])
    assert (
        f"<b>Cost.</b> {units.money(session['total'])} over 6 priced calls; prompt caching "
        f"saved {units.money(session['cache_saved'])} on reads and cost "
        f"{units.money(session['cache_extra'])} extra on writes: net {net}."
    ) in page


def test_a_model_without_a_price_has_no_cost_a_finding_and_an_inconclusive_budget(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(test_inner=INNER.replace("MODEL_A", "house-model-7b").replace("MODEL_B", GPT))
    result = tester.runpytest(
        "--latency-sim=instant", "--latency-json=out.json", "--latency-inconclusive=fail"
    )
    result.assert_outcomes(passed=1, failed=1)
    data = json.loads((tester.path / "out.json").read_text())
    entry = next(t for t in data["tests"] if t["nodeid"].endswith("test_claude_cached"))
    assert "cost" not in entry["metrics"]  # absent, never 0
    assert entry["cost"]["calls_priced"] == 0 and entry["cost"]["total"] is None
    assert entry["cost"]["unpriced_models"] == {"house-model-7b": 3}
    (budget,) = entry["budgets"]
    assert (budget["verdict"], budget["status"]) == ("inconclusive", "fail")  # policy: fail
    assert "3 of 3 calls have no cost" in budget["message"]
    (finding,) = [f for f in entry["findings"] if f["kind"] == "unpriced_model"]
    assert "'house-model-7b' (3 calls)" in finding["message"]
    assert finding["evidence"] == {"models": {"house-model-7b": 3}, "calls": 3}
    result.stdout.fnmatch_lines(["*unpriced_model: no price for 'house-model-7b' (3 calls)*"])
    result.stdout.fnmatch_lines(["*no price: 'house-model-7b' (3 calls)*"])


def test_a_price_override_in_budgets_toml_is_used_and_stamped(tester: pytest.Pytester) -> None:
    tester.makepyfile(test_inner=INNER.replace("MODEL_A", "house-model-7b").replace("MODEL_B", GPT))
    (tester.path / "budgets.toml").write_text(
        '[prices."house-model-7b"]\ninput = 0.5\noutput = 1.5\ncache_read = 0.05\n'
    )
    result = tester.runpytest(
        "--latency-sim=instant", "--latency-json=out.json", "--latency-budget=budgets.toml"
    )
    result.assert_outcomes(passed=2)
    data = json.loads((tester.path / "out.json").read_text())
    assert data["run"]["prices"]["overrides"] == {"house-model-7b": "budgets.toml:1"}
    entry = next(t for t in data["tests"] if t["nodeid"].endswith("test_claude_cached"))
    truth = [t for t in _truth(tester.path / "truth.jsonl") if t["model"] == "house-model-7b"]
    # By hand: uncached input at 0.5, reads at 0.05, writes (no cache_write given) at input's
    # price, output at 1.5, per million tokens.
    expected = sum(
        (t["input"] - (t["read"] or 0)) * 0.5 + (t["read"] or 0) * 0.05 + t["output"] * 1.5
        for t in truth
    )
    assert entry["cost"]["total"] == pytest.approx(expected, rel=1e-12)
    assert entry["cost"]["cache_extra"] == 0  # a write at the input price costs nothing extra
    assert [b["status"] for b in entry["budgets"]] == ["pass"]


def test_a_sum_budget_over_the_run_fails_on_what_the_calls_cost(tester: pytest.Pytester) -> None:
    tester.makepyfile(test_inner=INNER.replace("MODEL_A", CLAUDE).replace("MODEL_B", GPT))
    (tester.path / "budgets.toml").write_text(
        '[session]\nexpect = ["cost.sum < $0.001", "output_tokens.sum < 1000"]\n'
    )
    result = tester.runpytest(
        "--latency-sim=instant", "--latency-json=out.json", "--latency-budget=budgets.toml"
    )
    assert result.ret == 1
    data = json.loads((tester.path / "out.json").read_text())
    cost, tokens = data["session"]["budgets"]
    assert cost["status"] == "fail" and cost["estimate"] == pytest.approx(
        data["session"]["cost"]["total"], rel=1e-12
    )
    assert cost["evidence"]["kind"] == "sum" and cost["evidence"]["n"] == 6
    assert tokens["status"] == "pass" and tokens["estimate"] == 6 * 40


# ---- the pieces, without a run -------------------------------------------------------------------


def _call(**fields: Any) -> CallMetrics:
    base: dict[str, Any] = {
        "api": "anthropic.messages",
        "model": CLAUDE,
        "endpoint": "/v1/messages",
        "host": "127.0.0.1:9",
        "stream": True,
        "status": 200,
        "input_tokens": 5000,
        "output_tokens": 200,
    }
    return CallMetrics.from_dict({**base, **fields})


def test_a_call_without_usage_or_before_any_is_not_priced() -> None:
    prices = Prices()
    assert prices.stamp(_call(output_tokens=None)).price_source == "no usage"
    refused = _call(error="http_429", input_tokens=None, output_tokens=None)
    assert prices.stamp(refused) == refused  # a 429 costs nothing and says nothing
    priced = prices.stamp(_call(cache_read_tokens=4000, cache_write_tokens=500))
    # Haiku 4.5: 500 uncached at $1, 4000 read at $0.10, 500 written at $1.25, 200 out at $5.
    assert priced.cost == pytest.approx(500 + 400 + 625 + 1000)
    assert priced.cost_cache_saved == pytest.approx(4000 * 0.9)
    assert priced.cost_cache_extra == pytest.approx(500 * 0.25)
    assert priced.price_source == "genai-prices"


def test_a_providers_own_host_picks_its_prices() -> None:
    prices = Prices()
    hosted = prices.stamp(_call(api="openai.chat", model="gpt-4o", host="api.openai.com"))
    local = prices.stamp(_call(api="openai.chat", model="gpt-4o", host="127.0.0.1:8000"))
    assert hosted.cost == local.cost == pytest.approx(5000 * 2.5 + 200 * 10)


def test_money_in_the_budget_language() -> None:
    e = parse_expectation("cost.p95 < $0.01", source="t")
    assert (e.metric, e.stat, e.threshold, e.format_value(1234.5)) == (
        "cost",
        "p95",
        1e4,
        "$0.00123",
    )
    e = parse_expectation("cost.sum <= 1.5 usd", source="t")
    assert (e.stat, e.threshold, e.format_value(e.threshold)) == ("sum", 1.5e6, "1.5 usd")
    assert parse_expectation("output_tokens.sum < 50000", source="t").threshold == 50000
    for bad, why in (
        ("cost.mean < 0.002", "cost is money; give the threshold a unit"),
        ("ttft.sum < 1s", "sum adds up tokens or cost, not ttft"),
        ("ttft.p95 < $1", "'$' does not fit ttft"),
        ("cost.mean < $1usd", "not both"),
        ("cost.mean < 2ms", "'ms' does not fit cost"),
    ):
        with pytest.raises(BudgetError, match=re.escape(why)):
            parse_expectation(bad, source="t")


def test_price_overrides_are_validated_in_file_order() -> None:
    with pytest.raises(BudgetError) as info:
        parse_budget_file('[prices."m"]\ninput = -1\noutptu = 2\n', path="b.toml")
    text = str(info.value)
    assert text.index("b.toml:1") < text.index("b.toml:2") < text.index("b.toml:3")
    assert "needs 'output'" in text and "did you mean 'output'" in text


def test_cost_cells_and_spend_lines_read_the_same_everywhere() -> None:
    assert units.money(350.0) == "$0.000350" and units.money(1.234e6) == "$1.23"
    assert units.money(0.0) == "$0" and units.money(None) == units.ABSENT
    assert cost_cell(CostTotals(0.0, 0.0, 0.0, 0, {}, 0)) == units.ABSENT
    assert cost_cell(CostTotals(0.0, 0.0, 0.0, 0, {"m": 2}, 0)) == "?"
    assert cost_cell(CostTotals(12300.0, 0.0, 0.0, 3, {"m": 2}, 0)) == "$0.0123+?"
    # What caching saved, net of what its writes cost extra: negative when writes outweigh.
    assert saved_cell(CostTotals(12300.0, 4000.0, 500.0, 3, {}, 0)) == "$0.00350"
    assert saved_cell(CostTotals(12300.0, 0.0, 500.0, 3, {}, 0)) == "-$0.000500"
    assert saved_cell(CostTotals(12300.0, 0.0, 0.0, 3, {}, 0)) == "$0"  # priced, no cache
    assert saved_cell(CostTotals(0.0, 0.0, 0.0, 0, {"m": 1}, 0)) == "?"
    assert units.calls_by_model({"a": 1, "b": 2}) == "'a' (1 call), 'b' (2 calls)"
    line = spend_line(CostTotals(12300.0, 4000.0, 500.0, 3, {}, 0))
    assert line == (
        "cost: $0.0123 over 3 priced calls; prompt caching saved $0.00400 on reads and cost "
        "$0.000500 extra on writes: net $0.00350"
    )


def test_merge_adds_the_shards_costs(tmp_path: Path, tester: pytest.Pytester) -> None:
    tester.makepyfile(test_inner=INNER.replace("MODEL_A", CLAUDE).replace("MODEL_B", GPT))
    shards = []
    for name in ("test_claude_cached", "test_gpt_cached"):
        out = tmp_path / f"{name}.json"
        tester.runpytest("--latency-sim=instant", f"--latency-json={out}", "-k", name)
        shards.append(json.loads(out.read_text())["session"]["cost"]["total"])
    merged = tmp_path / "merged.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_latency.cli",
            "merge",
            *map(str, tmp_path.glob("test_*.json")),
            "-o",
            str(merged),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(merged.read_text())
    assert data["session"]["cost"]["total"] == pytest.approx(sum(shards), rel=1e-12)
    assert data["session"]["cost"]["calls_priced"] == 6
    assert data["run"]["prices"]["source"] == "genai-prices"


def test_the_service_tier_and_the_one_hour_cache_are_priced_as_the_table_prices_them() -> None:
    prices = Prices()
    call = {"api": "openai.chat", "model": "gpt-5", "host": "api.openai.com"}

    def table(tier: str | None) -> float:
        context = {"service_tier": tier} if tier else None
        usage = Usage(input_tokens=5000, output_tokens=200)
        found = calc_price(usage, "gpt-5", provider_id="openai", price_context=context)
        return float(found.total_price) * 1e6

    for tier, priced_as in (("flex", "flex"), ("priority", "priority"), ("auto", None)):
        stamped = prices.stamp(_call(**call, service_tier=tier))
        assert stamped.cost == pytest.approx(table(priced_as)), tier
    assert table("flex") < table(None) < table("priority")  # the tiers do differ
    # Anthropic's 1-hour cache write is 2x input, the 5-minute one 1.25x.
    five = prices.stamp(_call(cache_write_tokens=1000))
    hour = prices.stamp(_call(cache_write_tokens=1000, cache_write_1h_tokens=1000))
    assert hour.cost is not None and five.cost is not None
    assert hour.cost - five.cost == pytest.approx(1000 * (2.0 - 1.25))
    assert hour.cost_cache_extra == pytest.approx(1000 * 1.0)


def test_the_docs_budgets_files_load() -> None:
    """Every budgets.toml the docs show (docs/ci.md's money gate, docs/budgets.md's examples) is
    one a user can paste: it loads, and its price overrides are what it says."""
    import re

    from pytest_latency.budgets import parse_budget_file

    docs = Path(__file__).parent.parent / "docs"
    blocks = {
        name: re.findall(r"```toml\n(.*?)```", (docs / name).read_text(), flags=re.DOTALL)
        for name in ("ci.md", "budgets.md")
    }
    assert blocks["ci.md"], "docs/ci.md lost its money gate"
    for name, texts in blocks.items():
        for text in texts:
            parse_budget_file(text, path=f"docs/{name}")
    (gate,) = [t for t in blocks["ci.md"] if "[prices." in t]
    loaded = parse_budget_file(gate, path="docs/ci.md")
    assert [e.text for e in loaded.session] == ["cost.sum < $2", "output_tokens.sum < 200000"]
    (price,) = loaded.prices
    assert (price.model, price.input, price.cache_read) == ("my-finetune", 0.50, 0.05)


# ---- genai-prices: never its updater, never the network; the snapshot stamped as it was -------

NO_NETWORK = """
import socket, sys, threading

def refuse(*args, **kwargs):
    raise AssertionError("pricing started a thread, opened a connection or the updater")

socket.socket.connect = socket.socket.connect_ex = socket.create_connection = refuse
socket.getaddrinfo = refuse
threading.Thread.start = refuse
import genai_prices.data_snapshot as data_snapshot
import genai_prices.update_prices as update_prices

update_prices.UpdatePrices.start = update_prices.UpdatePrices.fetch = refuse
update_prices.UpdatePrices.__enter__ = refuse
update_prices._SharedUpdater.acquire = update_prices._SharedUpdater._run = refuse
update_prices.wait_prices_updated_sync = refuse
data_snapshot.set_custom_snapshot = refuse

from pytest_latency import pricing
from pytest_latency.budgets import parse_budget_file
from pytest_latency.metrics import CallMetrics

pricing.warm()
overrides = parse_budget_file('[prices."mine"]\\ninput = 1\\noutput = 2\\n', path="b.toml").prices
prices = pricing.Prices(overrides)
base = {"endpoint": "/v1/x", "stream": True, "status": 200, "input_tokens": 900,
        "output_tokens": 50, "cache_read_tokens": 400, "cache_write_tokens": 100}
for api, model, host, tier in (
    ("anthropic.messages", "claude-haiku-4-5", "127.0.0.1:9", None),
    ("anthropic.messages", "claude-sonnet-4-5", "api.anthropic.com", "standard"),
    ("openai.chat", "gpt-4.1-mini", "api.openai.com", "flex"),
    ("openai.responses", "gpt-5", "proxy.example.com", "priority"),
    ("openai.chat", "no-such-model-anywhere", "127.0.0.1:9", None),
    ("openai.chat", "mine", "127.0.0.1:9", None),
):
    call = CallMetrics.from_dict({**base, "api": api, "model": model, "host": host,
                                   "service_tier": tier})
    stamped = prices.stamp(call)
    assert stamped.price_source, stamped
print(prices.table().to_dict())
assert threading.active_count() == 1, threading.enumerate()
"""


def test_pricing_never_starts_the_updater_a_thread_or_a_connection() -> None:
    """In a fresh process (nothing imported, nothing cached), with genai-prices' update
    machinery, thread starts and socket connections made to raise: loading the table and pricing
    calls of every kind (by provider id, by a provider's own host, an unknown host, service
    tiers, an unknown model, an override) never reaches any of them."""
    done = subprocess.run(
        [sys.executable, "-c", NO_NETWORK], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "'snapshot': 'bundled'" in done.stdout


def _fetched_snapshot(input_mtok: float) -> Any:
    """A snapshot as genai-prices' UpdatePrices sets one after a fetch (`from_auto_update`),
    with gpt-4o's price changed so that a call priced by it shows which table priced it."""
    import dataclasses
    from decimal import Decimal

    from genai_prices import data
    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import ModelPrice

    price = ModelPrice(input_mtok=Decimal(str(input_mtok)), output_mtok=Decimal("1"))
    providers = [
        dataclasses.replace(
            p,
            models=[
                dataclasses.replace(m, prices=price) if m.id == "gpt-4o" else m for m in p.models
            ],
        )
        if p.id == "openai"
        else p
        for p in data.providers
    ]
    return DataSnapshot(providers=providers, from_auto_update=True)


def test_the_stamp_names_the_snapshot_genai_prices_priced_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from genai_prices import data_snapshot

    gpt = {"api": "openai.chat", "model": "gpt-4o", "input_tokens": 1000, "output_tokens": 0}
    prices = Prices()
    bundled = prices.stamp(_call(**gpt)).cost
    assert bundled == pytest.approx(1000 * 2.5)
    table = prices.table()
    assert (table.snapshot, table.fetched) == ("bundled", None)
    assert table.version == __import__("genai_prices").__version__

    # User code started the updater and it fetched: the next calls are priced by the fetched
    # table (not a lookup cached from the bundled one), and the stamp says both were used.
    fetched = _fetched_snapshot(100.0)
    # Where genai-prices' set_custom_snapshot (which UpdatePrices calls) keeps it; restored after.
    monkeypatch.setattr(data_snapshot, "_custom_snapshot", fetched)
    assert prices.stamp(_call(**gpt)).cost == pytest.approx(1000 * 100.0)
    table = prices.table()
    assert table.snapshot == "bundled+auto-update"
    assert table.fetched == fetched.timestamp.isoformat(timespec="seconds")
    only_fetched = Prices()
    only_fetched.stamp(_call(**gpt))
    assert only_fetched.table().to_dict()["snapshot"] == "auto-update"
    # A snapshot the user set by hand (not fetched, not the package's own providers).
    by_hand = _fetched_snapshot(7.0)
    by_hand.from_auto_update = False
    monkeypatch.setattr(data_snapshot, "_custom_snapshot", by_hand)
    custom = Prices()
    assert custom.stamp(_call(**gpt)).cost == pytest.approx(1000 * 7.0)
    assert (custom.table().snapshot, custom.table().fetched) == ("custom", None)
    # Nothing priced by the table: the stamp says which snapshot would price a call now.
    assert Prices().table().snapshot == "custom"


# ---- a `sum` in a [[budget]] rule; the price stamp in every output; unpriced calls in scope ---

RULED = f"""
HANDBOOK = " ".join(f"Section {{i}}: the rule number {{i}} applies." for i in range(200))

def _ask(client):
    for _ in client.chat.completions.create(
            model="{GPT}", max_tokens=40, stream=True, stream_options={{"include_usage": True}},
            messages=[{{"role": "system", "content": HANDBOOK}},
                      {{"role": "user", "content": "Which rule applies?"}}]):
        pass

def test_selected(openai_client, sim):
    _ask(openai_client)
    _ask(openai_client)

def test_not_selected(openai_client, sim):
    _ask(openai_client)
"""


def test_a_sum_budget_in_a_budget_rule_fails_the_test_it_selects(tester: pytest.Pytester) -> None:
    tester.makepyfile(test_ruled=RULED)
    (tester.path / "budgets.toml").write_text(
        '[[budget]]\nselect = "test_ruled.py::test_selected"\n'
        'expect = ["cost.sum < 0.0000001usd", "output_tokens.sum < 1000"]\n'
    )
    result = tester.runpytest(
        "--latency-sim=instant", "--latency-json=out.json", "--latency-budget=budgets.toml"
    )
    result.assert_outcomes(passed=1, failed=1)
    data = json.loads((tester.path / "out.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    cost, tokens = tests["test_selected"]["budgets"]
    assert (cost["expr"], cost["status"]) == ("cost.sum < 0.0000001usd", "fail")
    total = tests["test_selected"]["cost"]["total"]
    truth = _truth(tester.path / "truth.jsonl")
    assert total == pytest.approx(sum(_price(t, "openai") for t in truth[:2]), abs=1e-2)
    assert cost["estimate"] == pytest.approx(total, rel=1e-12) and cost["n"] == 2
    assert (tokens["status"], tokens["estimate"]) == ("pass", 2 * 40)
    assert tests["test_not_selected"]["budgets"] == []
    result.stdout.fnmatch_lines(["*test_selected: cost.sum = * usd > 0.0000001 usd (n=2)"])


STAMPED = """
import pytest

@pytest.fixture(autouse=True, scope="session")
def prices_fetched():
    # What genai-prices' UpdatePrices does once it has fetched: a snapshot from_auto_update.
    from genai_prices import data, data_snapshot

    data_snapshot.set_custom_snapshot(
        data_snapshot.DataSnapshot(providers=data.providers, from_auto_update=True))
    yield
    data_snapshot.set_custom_snapshot(None)
"""


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["in-process", "xdist"])
def test_the_price_stamp_is_the_snapshot_used_in_every_output(
    tester: pytest.Pytester, workers: list[str]
) -> None:
    """User code started genai-prices' updater (here: the snapshot it sets after a fetch): the
    result file, the terminal, the Markdown summary and the HTML report say the calls were priced
    by an auto-updated snapshot, with the budgets.toml override and its line, in one text; under
    pytest-xdist the workers priced the calls and tell the controller."""
    tester.makepyfile(
        conftest_stamp=STAMPED,
        test_inner=INNER.replace("MODEL_A", "house-model-7b").replace("MODEL_B", GPT),
    )
    tester.makeconftest(CONFTEST + "\nfrom conftest_stamp import prices_fetched\n")
    (tester.path / "budgets.toml").write_text(
        '[prices."house-model-7b"]\ninput = 0.5\noutput = 1.5\n'
    )
    result = tester.runpytest(
        *workers,
        "--latency-sim=instant",
        "--latency-budget=budgets.toml",
        "--latency-json=out.json",
        "--latency-markdown=out.md",
        "--latency-report=out.html",
    )
    result.assert_outcomes(passed=2)
    stamp = json.loads((tester.path / "out.json").read_text())["run"]["prices"]
    assert stamp["snapshot"] == "auto-update" and stamp["fetched"]
    assert stamp["version"] == __import__("genai_prices").__version__
    assert stamp["overrides"] == {"house-model-7b": "budgets.toml:1"}
    text = price_text(stamp)
    assert text == (
        f"genai-prices {stamp['version']} (auto-update snapshot fetched {stamp['fetched']}); "
        "overrides: house-model-7b (budgets.toml:1)"
    )
    result.stdout.fnmatch_lines([f"prices: {text}"])
    assert (
        f"Prices: {text}".replace("(", "\\(").replace(")", "\\)")
        in (tester.path / "out.md").read_text()
    )
    assert f"<dt>prices</dt><dd>{text}</dd>" in (tester.path / "out.html").read_text()


def test_a_session_cost_sum_over_unpriced_calls_is_inconclusive_and_names_the_models(
    tester: pytest.Pytester, tmp_path: Path
) -> None:
    """`cost.sum < $1` over calls some of which have no price: the priced calls' sum is a floor
    of the run's cost, so the budget is inconclusive, names the model, and the default policy
    does not pass it on the floor; only `pass`, chosen, does. A cost block with no call priced
    has null sums (absent, never 0), in the file, after a merge, and validated both ways."""
    tester.makepyfile(test_inner=INNER.replace("MODEL_A", "house-model-7b").replace("MODEL_B", GPT))
    (tester.path / "budgets.toml").write_text('[session]\nexpect = ["cost.sum < $1"]\n')
    args = ("--latency-sim=instant", "--latency-budget=budgets.toml", "--latency-json=out.json")
    result = tester.runpytest(*args)
    assert result.ret == 1
    data = load_result(tester.path / "out.json")  # validated
    stamp = data["run"]["prices"]
    assert stamp is not None and (stamp["snapshot"], stamp["fetched"]) == ("bundled", None)
    (budget,) = data["session"]["budgets"]
    assert budget["verdict"] == "inconclusive" and not budget["passed"]
    assert budget["status"] == "fail"
    assert "3 of 6 calls have no cost (no price for 'house-model-7b' (3 calls)" in budget["message"]
    assert "policy 'estimate': fail" in budget["message"]
    assert budget["evidence"]["unknown_models"] == {"house-model-7b": 3}
    result.stdout.fnmatch_lines(["FAIL cost.sum < $1: inconclusive *'house-model-7b' (3 calls)*"])
    entry = next(t for t in data["tests"] if t["nodeid"].endswith("test_claude_cached"))
    unpriced = {"total": None, "cache_saved": None, "cache_extra": None, "net_saved": None}
    assert entry["cost"].items() >= unpriced.items()
    assert data["groups"]["model=house-model-7b"]["cost"].items() >= unpriced.items()
    assert data["session"]["cost"]["total"] == pytest.approx(
        next(t for t in data["tests"] if t["nodeid"].endswith("test_gpt_cached"))["cost"]["total"]
    )

    # Two shards of it, merged: the budget judged again over both still names the model, and
    # the stamp names every snapshot the shards priced with.
    fetched = {**data["run"], "prices": {**stamp, "snapshot": "auto-update", "fetched": "T"}}
    merged = merge_results([data, {**data, "run": fetched}])
    assert merged["run"]["prices"] == {**stamp, "snapshot": "bundled+auto-update", "fetched": "T"}
    (again,) = merged["session"]["budgets"]
    assert again["status"] == "fail" and "6 of 12 calls" in again["message"]
    assert "'house-model-7b' (6 calls)" in again["message"]
    assert merged["groups"]["model=house-model-7b"]["cost"]["total"] is None
    write_result(tmp_path / "merged.json", merged)
    load_result(tmp_path / "merged.json")  # validates
    # A cost block that says 0 for calls none of which was priced is not a valid file.
    entry["cost"]["total"] = 0.0
    (tmp_path / "zero.json").write_text(json.dumps(data))
    with pytest.raises(ResultError, match=r"cost.*total.*null exactly when calls_priced is 0"):
        load_result(tmp_path / "zero.json")

    # Only the policy that passes whatever is not a confident miss passes it, and says so.
    result = tester.runpytest(*args, "--latency-inconclusive=pass")
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    (budget,) = load_result(tester.path / "out.json")["session"]["budgets"]
    assert budget["passed"] and budget["message"].endswith("[inconclusive; policy 'pass': pass]")
