"""Unit tests of the simulator's pure parts: model validation, presets, CLI flags, tokens, cache,
schedule and truth records. No server, no sleeps."""

from __future__ import annotations

import argparse
import itertools
import json
import random
from typing import Any

import pytest

from pytest_latency.sim import (
    PRESETS,
    LatencyModel,
    SimSettingsError,
    TruthEvent,
    TruthRecord,
    add_sim_arguments,
    model_from_args,
)
from pytest_latency.sim._cache import CacheResult, PrefixCache
from pytest_latency.sim._schedule import Plan, build_plan
from pytest_latency.sim._tokens import (
    block_hashes,
    count_tokens,
    fingerprint,
    text_tokens,
    tool_argument_tokens,
)


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("ttfb_ms", -1.0, "ttfb_ms must be >= 0, got -1.0"),
        ("decode_ms_per_token", -0.5, "decode_ms_per_token must be >= 0"),
        ("tail_prob", 1.5, "tail_prob must be between 0 and 1, got 1.5"),
        ("fault_drop_prob", -0.1, "fault_drop_prob must be between 0 and 1"),
        ("tokens_per_chunk", 0, "tokens_per_chunk must be >= 1, got 0"),
        ("tokens_per_chunk", 1.5, "tokens_per_chunk must be an int"),
        ("jitter", float("nan"), "jitter must be finite"),
        ("fault", "teapot", "fault must be one of 429, 500, 529"),
        ("output_tokens", True, "output_tokens must be a int"),
    ],
)
def test_bad_settings_name_field_and_value(field: str, value: Any, needle: str) -> None:
    with pytest.raises(SimSettingsError, match=needle.replace("(", r"\(")) as info:
        LatencyModel(**{field: value})
    assert isinstance(info.value, ValueError)
    assert field in str(info.value)


def test_unknown_preset_lists_valid_ones() -> None:
    with pytest.raises(SimSettingsError) as info:
        LatencyModel.preset("warp")
    for name in PRESETS:
        assert name in str(info.value)


def test_presets_are_valid_and_instant_is_zero_time() -> None:
    for name in PRESETS:
        assert isinstance(LatencyModel.preset(name), LatencyModel)
    instant = LatencyModel.preset("instant")
    assert instant.ttfb_ms == instant.decode_ms_per_token == instant.prefill_us_per_token == 0
    assert instant.jitter == 0
    hosted = LatencyModel.preset("hosted")
    assert hosted.tail_prob > 0 and hosted.jitter > 0 and hosted.tokens_per_chunk > 1


def test_replace_validates_and_rejects_unknown_fields() -> None:
    m = LatencyModel()
    assert m.replace(ttfb_ms=7.0).ttfb_ms == 7.0
    assert m.ttfb_ms != 7.0  # frozen: replace returns a copy
    with pytest.raises(SimSettingsError, match="ttfb_ms must be >= 0"):
        m.replace(ttfb_ms=-3.0)
    with pytest.raises(SimSettingsError, match="unknown latency-model field 'ttfb'"):
        m.replace(ttfb=1.0)


def test_with_overrides_coerces_header_strings_and_applies_preset_first() -> None:
    m = LatencyModel().with_overrides(
        {"preset": "hosted", "decode-ms-per-token": "2.5", "tokens_per_chunk": "4", "fault": "429"}
    )
    assert m.decode_ms_per_token == 2.5
    assert m.tokens_per_chunk == 4
    assert m.fault == "429"
    assert m.ttfb_ms == PRESETS["hosted"]["ttfb_ms"]
    with pytest.raises(SimSettingsError, match="tokens_per_chunk must be a int, got 'many'"):
        LatencyModel().with_overrides({"tokens_per_chunk": "many"})


def test_cli_flags_override_the_preset_only_where_given() -> None:
    parser = argparse.ArgumentParser()
    add_sim_arguments(parser)
    ns = parser.parse_args(["--preset", "hosted", "--ttfb-ms", "5", "--port", "0"])
    m = model_from_args(ns)
    assert m.ttfb_ms == 5.0
    assert m.decode_ms_per_token == PRESETS["hosted"]["decode_ms_per_token"]
    assert ns.port == 0 and ns.host == "127.0.0.1"
    ns = parser.parse_args(["--model-json", json.dumps({"seed": 9}), "--seed", "3"])
    assert model_from_args(ns).seed == 3
    with pytest.raises(SimSettingsError, match="tail_prob must be between 0 and 1"):
        model_from_args(parser.parse_args(["--tail-prob", "2"]))
    with pytest.raises(SimSettingsError, match="unknown preset"):
        model_from_args(parser.parse_args(["--preset", "nope"]))


def test_token_count_is_four_chars_rounded_up() -> None:
    assert count_tokens("") == 0
    assert count_tokens("abc") == 1
    assert count_tokens("abcd") == 1
    assert count_tokens("abcde") == 2
    assert count_tokens("x" * 4000) == 1000


def test_block_hashes_chain_so_an_early_change_changes_every_block() -> None:
    text = "".join(f"line {i} of the long prompt\n" for i in range(400))
    a = block_hashes(text, 64, 10_000)
    assert len(a) == count_tokens(text) // 64
    b = block_hashes("X" + text[1:], 64, 10_000)
    assert not set(a) & set(b)
    c = block_hashes(text[:-10] + "0123456789", 64, 10_000)
    assert a[:-1] == c[:-1]
    assert len(block_hashes(text, 64, 100)) == 1


def test_generated_text_is_seeded() -> None:
    assert text_tokens(random.Random(1), 20) == text_tokens(random.Random(1), 20)
    assert text_tokens(random.Random(1), 20) != text_tokens(random.Random(2), 20)
    toks = text_tokens(random.Random(1), 5)
    assert len(toks) == 5 and not toks[0].startswith(" ") and all(t[0] == " " for t in toks[1:])


def test_tool_arguments_parse_as_json_with_schema_keys() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "x": {}},
    }
    toks = tool_argument_tokens(random.Random(0), schema, 30)
    args = json.loads("".join(toks))
    assert set(args) == {"city", "days", "x"}
    assert isinstance(args["days"], int)
    assert json.loads("".join(tool_argument_tokens(random.Random(0), {}, 5))).keys() == {"input"}


def test_fingerprint_ignores_transport_fields() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert fingerprint("a", body) == fingerprint("a", {**body, "stream": True, "sim": {"seed": 1}})
    assert fingerprint("a", body) != fingerprint("b", body)
    assert fingerprint("a", body) != fingerprint("a", {**body, "model": "n"})


def _access(
    cache: PrefixCache,
    blocks: list[bytes],
    now: float = 0.0,
    capacity_tokens: int = 10_000,
    long_blocks: int = 0,
) -> CacheResult:
    return cache.access(
        blocks,
        now_s=now,
        block_tokens=64,
        min_tokens=128,
        ttl_s=10.0,
        capacity_tokens=capacity_tokens,
        long_blocks=long_blocks,
        long_ttl_s=100.0,
    )


def test_cache_reads_longest_prefix_then_writes_the_rest() -> None:
    cache = PrefixCache()
    text = "abcdefgh" * 400  # 800 tokens -> 12 blocks
    blocks = block_hashes(text, 64, 10_000)
    first = _access(cache, blocks)
    assert (first.read_tokens, first.write_tokens) == (0, 12 * 64)
    second = _access(cache, blocks, now=1.0)
    assert (second.read_tokens, second.write_tokens) == (12 * 64, 0)
    longer = block_hashes(text + "zzzz" * 200, 64, 10_000)
    third = _access(cache, longer, now=2.0)
    assert third.read_tokens == 12 * 64 and third.write_tokens == (len(longer) - 12) * 64


def test_cache_minimum_ttl_and_lru_capacity() -> None:
    cache = PrefixCache()
    short = block_hashes("q" * 4 * 64, 64, 10_000)  # one block < min 128 tokens
    assert _access(cache, short).write_tokens == 0 and len(cache) == 0
    blocks = block_hashes("p" * 4 * 64 * 4, 64, 10_000)
    _access(cache, blocks, now=0.0)
    assert _access(cache, blocks, now=11.0).read_tokens == 0  # expired after ttl 10 s
    other = block_hashes("o" * 4 * 64 * 4, 64, 10_000)
    _access(cache, other, now=12.0, capacity_tokens=4 * 64)  # evicts the older blocks
    assert len(cache) == 4
    assert _access(cache, other, now=13.0, capacity_tokens=4 * 64).read_tokens == 4 * 64
    cache.clear()
    assert len(cache) == 0


def test_cache_keeps_the_1h_part_of_a_prefix_for_its_own_ttl() -> None:
    """The first `long_blocks` blocks (Anthropic's 1-hour breakpoint precedes its 5-minute
    ones) are written for `long_ttl_s` and counted apart; a hit never shortens a block's TTL."""
    cache = PrefixCache()
    blocks = block_hashes("l" * 4 * 64 * 6, 64, 10_000)  # 6 blocks

    def access(now: float, long_blocks: int) -> CacheResult:
        return _access(cache, blocks, now, long_blocks=long_blocks)  # long_ttl_s 100 s

    first = access(0.0, long_blocks=4)
    assert (first.read_tokens, first.write_tokens, first.long_write_tokens) == (0, 384, 256)
    # At 50 s the 5-minute-like blocks have expired and the long ones have not: the read stops
    # at the long part, the rest is written again, all of it short-lived this time.
    again = access(50.0, long_blocks=0)
    assert (again.read_tokens, again.write_tokens, again.long_write_tokens) == (256, 128, 0)
    # That short-lived read did not cut the long blocks' TTL to 10 s.
    late = access(95.0, long_blocks=0)
    assert (late.read_tokens, late.write_tokens) == (256, 128)
    assert access(201.0, long_blocks=9).long_write_tokens == 384  # capped at the prefix


def _plan(model: LatencyModel, seed: int = 0, **kw: Any) -> Plan:
    channels = kw.pop("channels", [("content", ["a"] * 10)])
    return build_plan(model, random.Random(seed), channels=channels, **kw)


def test_plan_is_absolute_and_follows_the_model() -> None:
    m = LatencyModel(ttfb_ms=2, prefill_us_per_token=10, decode_ms_per_token=3, tokens_per_chunk=4)
    plan = _plan(m, uncached_tokens=1000)
    assert plan.headers_ns == 2_000_000
    assert plan.prefill_ns == 10_000_000
    assert [p.tokens for p in plan.pieces] == [4, 4, 2]
    assert [p.due_ns for p in plan.pieces] == [24_000_000, 36_000_000, 42_000_000]
    assert plan.tokens("content") == 10


def test_plan_quadratic_prefill_slowdown_tail_stall_and_hidden_reasoning() -> None:
    m = LatencyModel(ttfb_ms=0, prefill_us_per_token=0, prefill_us_per_token_sq=0.01)
    assert _plan(m, uncached_tokens=1000).prefill_ns == 10_000_000
    slow = LatencyModel(ttfb_ms=0, prefill_us_per_token=0, concurrency_slowdown=0.5)
    assert _plan(slow, uncached_tokens=0, active_streams=3).pieces[0].due_ns == 2_000_000
    tail = LatencyModel(ttfb_ms=0, prefill_us_per_token=0, tail_prob=1.0, tail_ms=50)
    plan = _plan(tail, uncached_tokens=0)
    assert plan.tail and plan.pieces[0].due_ns == 51_000_000
    stall = LatencyModel(ttfb_ms=0, prefill_us_per_token=0, stall_ms=40)
    dues = [p.due_ns for p in _plan(stall, uncached_tokens=0, stall_before=5).pieces]
    gaps = [later - earlier for earlier, later in itertools.pairwise(dues)]
    assert max(gaps) == 41_000_000 and gaps.index(max(gaps)) == 4
    hidden = _plan(LatencyModel(ttfb_ms=0, prefill_us_per_token=0), uncached_tokens=0,
                   channels=[("hidden", [""] * 8), ("content", ["a"] * 2)])  # fmt: skip
    assert hidden.hidden_tokens == 8 and hidden.pieces[0].due_ns == 9_000_000


def test_plan_jitter_is_seeded_and_mean_one() -> None:
    m = LatencyModel(ttfb_ms=0, prefill_us_per_token=0, decode_ms_per_token=1, jitter=0.3)
    many = [("content", ["a"] * 2000)]
    a = _plan(m, seed=5, uncached_tokens=0, channels=many)
    b = _plan(m, seed=5, uncached_tokens=0, channels=many)
    c = _plan(m, seed=6, uncached_tokens=0, channels=many)
    assert a == b and a != c
    assert 0.95 < a.end_ns / 2000e6 < 1.05  # lognormal factor with mean one


def test_truth_record_metrics_and_json_round_trip() -> None:
    ev = (
        TruthEvent(1_100, "other", 0, 1_000),
        TruthEvent(1_500, "reasoning", 2, 1_400),
        TruthEvent(1_900, "content", 1, 1_900),
        TruthEvent(2_600, "content", 1, 2_500),
        TruthEvent(2_700, "other", 0, 2_500),
    )
    rec = TruthRecord(
        request_id="r1", api="openai.chat", stream=True, model="m", status=200,
        t_received_ns=1_000, t_headers_ns=1_050, events=ev, input_tokens=10, output_tokens=4,
        cache_read_tokens=0, cache_write_tokens=0, fault=None,
    )  # fmt: skip
    assert rec.ttfb_ns == 50
    assert rec.ttft_ns == 500
    assert rec.ttfo_ns == 900
    assert rec.e2e_ns == 1_600
    assert rec.itl_ns == (400, 700)
    assert rec.lateness_ns == (100, 100, 0, 100, 200)
    assert TruthRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec
