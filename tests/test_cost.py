"""What each call costs (issue #18): prices from genai-prices' bundled table through real SDK
clients against the simulator, checked against `genai_prices.calc_price` run here on the usage
the simulator logged; cache reads and writes priced apart; a model without a price; a price
override in budgets.toml; the `usd`/`$` units and the `sum` statistic; merge adding costs up."""

from __future__ import annotations

import json
import re
import subprocess
import sys
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
from pytest_latency.spend import cost_cell, spend_line

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
        "--latency-sim=instant", "--latency-json=out.json", "--latency-markdown=out.md"
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
    assert entry["cost"]["calls_priced"] == 0
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
