"""Load: `@pytest.mark.latency(concurrency=..., rate=...)` runs a test's samples concurrently and on
an open-loop schedule. Each inner run writes every test's record (the plain data on its call
report) and the simulator's truth log to files, and the checks read them: the samples overlap as
many as asked and no more, every call lands in its own sample, an open loop keeps its schedule,
and a stalling server shows in the intended-start figures of an open loop while a closed loop
hides it. Bounds are loose where a busy machine moves them (thread and task start-up), exact where
nothing can (the count in flight, the schedule's own gaps)."""

from __future__ import annotations

import html
import itertools
import json
import math
import statistics
from typing import Any

import anthropic  # noqa: F401  (kept loaded across pytester's in-process runs: see test_plugin_sim)
import openai  # noqa: F401
import pytest

import pytest_latency.sim  # noqa: F401
from pytest_latency import units
from pytest_latency.budgets import BudgetError, parse_budget_file
from pytest_latency.load import LOAD_KEYS, Load, LoadError, Schedule, load_of, read_value
from pytest_latency.report._view import load_text

pytest_plugins = ["pytester"]

MS = 1_000_000  # ns

# The inner runs' conftest: a model whose streams take ~100 ms (20 tokens × 5 ms), its truth log
# written when the test ends (the fixture's teardown runs after every sample), and each test's
# record written from its call report.
INNER_CONFTEST = """
import json
import pathlib
import pytest

@pytest.fixture
def sim(llm_sim, request):
    llm_sim.set_model(llm_sim.model.replace(
        ttfb_ms=1.0, prefill_us_per_token=0.0, decode_ms_per_token=5.0, jitter=0.0,
        output_tokens=20))
    yield llm_sim
    truth = [[t.t_received_ns, t.t_done_ns] for t in llm_sim.truth()]
    name = request.node.name.replace("/", "_")
    pathlib.Path(f"truth-{name}.json").write_text(json.dumps(truth))

def _stream(client, token):
    return client.chat.completions.create(
        model="m", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": f"token={token}"}])

@pytest.fixture
def ask():
    # One streamed call, read to its end, with `token` in its prompt.
    def call(client, token="x"):
        for _ in _stream(client, token):
            pass
    return call

@pytest.fixture
def ask_async():
    async def call(client, token="x"):
        async for _ in await _stream(client, token):
            pass
    return call

def pytest_runtest_logreport(report):
    data = getattr(report, "pytest_latency", None)
    if report.when == "call" and data:
        name = report.nodeid.split("::")[-1].replace("/", "_")
        pathlib.Path(f"record-{name}.json").write_text(json.dumps(data))
"""


@pytest.fixture
def tester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(INNER_CONFTEST)
    return pytester


def _record(pytester: pytest.Pytester, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / f"record-{name}.json").read_text())
    return data


def _truth(pytester: pytest.Pytester, name: str) -> list[tuple[int, int]]:
    rows = json.loads((pytester.path / f"truth-{name}.json").read_text())
    return [(int(a), int(b)) for a, b in rows]


def _most_at_once(intervals: list[tuple[int, int]]) -> int:
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def _kept_spans(record: dict[str, Any]) -> list[list[int]]:
    return [s for s in record["spans"] if s[0] >= 0 and not s[1]]


def _check_attribution(record: dict[str, Any], samples: int, calls_per_sample: int) -> None:
    """Every call lies inside its own sample's span, and every call of a sample carries that
    sample's token (the body puts one token in all its prompts): nothing crossed over. Warmup
    samples (numbered -2, -3, ...) too."""
    assert sorted(s[0] for s in _kept_spans(record)) == list(range(samples))
    spans = {s[0]: s for s in record["spans"]}
    samples = len(spans)
    tokens: dict[int, set[str]] = {}
    counts: dict[int, int] = {}
    for call in record["calls"]:
        sample = call["sample"]
        first, last = call["attempts"][0], call["attempts"][-1]
        _, _, start, end, *_ = spans[sample]
        assert start <= first["t_start_ns"] and last["t_end_ns"] <= end, (sample, call)
        tokens.setdefault(sample, set()).add(first["prompt_text"].split("token=")[1][:32])
        counts[sample] = counts.get(sample, 0) + 1
    assert counts == dict.fromkeys(spans, calls_per_sample)
    assert all(len(found) == 1 for found in tokens.values()), tokens
    assert len({next(iter(found)) for found in tokens.values()}) == samples


def test_concurrent_samples_overlap_as_asked_and_keep_their_calls(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(
        test_inner="""
        import asyncio
        import uuid
        import pytest

        @pytest.fixture
        def sim(sim):
            # Streams of ~300 ms: a busy machine starts a batch's tasks and threads up to
            # ~100 ms apart (beside two CPU hogs the server saw 6 of 8 at once with 100 ms).
            sim.set_model(sim.model.replace(decode_ms_per_token=15.0))
            return sim

        @pytest.mark.latency("ttft.p50 < 10s", samples=8, warmup=2, concurrency=4)
        def test_threads(openai_client, sim, ask):
            token = uuid.uuid4().hex
            ask(openai_client, token)
            ask(openai_client, token)

        @pytest.mark.asyncio
        @pytest.mark.latency("ttft.p50 < 10s", samples=8, warmup=2, concurrency=4)
        async def test_tasks(async_openai_client, sim, ask_async):
            token = uuid.uuid4().hex
            # Tasks the body starts itself inherit its sample (asyncio copies the context).
            await asyncio.gather(*(ask_async(async_openai_client, token) for _ in range(2)))

        @pytest.fixture
        def anyio_backend():
            return "asyncio"

        @pytest.mark.anyio
        @pytest.mark.latency("ttft.p50 < 10s", samples=6, concurrency=3)
        async def test_anyio(async_openai_client, sim, ask_async):
            token = uuid.uuid4().hex
            await ask_async(async_openai_client, token)
        """
    )
    result = tester.runpytest(
        "--latency-sim=instant", "--latency-capture-text=200", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=3)
    # (test, samples, calls per sample, of them at once, concurrency)
    for name, samples, per_sample, together, slots in (
        ("test_threads", 8, 2, 1, 4),
        ("test_tasks", 8, 2, 2, 4),
        ("test_anyio", 6, 1, 1, 3),
    ):
        record = _record(tester, name)
        assert record["samples"] == samples and record["load"]["concurrency"] == slots
        _check_attribution(record, samples, per_sample)
        # The cap holds exactly, and is reached: each sample streams for ≥ 300 ms, its
        # siblings start within tens of milliseconds.
        spans = [(s[2], s[3]) for s in _kept_spans(record)]
        assert _most_at_once(spans) == slots, name
        # The server saw as many streams at once (warmup ones run closed loop at the cap too).
        truth = _truth(tester, name)
        assert len(truth) == (samples + (2 if name != "test_anyio" else 0)) * per_sample
        assert _most_at_once(truth) == slots * together, name
        # Each sample's turn is its own run, not the batch's: about one sample's calls.
        turns = [(b - a) / MS for a, b in spans]
        assert statistics.median(turns) < 0.75 * (max(b for _, b in spans) - spans[0][0]) / MS


def test_an_open_loop_keeps_its_schedule_whether_or_not_samples_finished(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(
        test_inner="""
        import uuid
        import pytest

        @pytest.mark.latency("ttft.p50 < 10s", samples=12, rate="40/s", arrival="constant")
        def test_open(openai_client, sim, ask):
            ask(openai_client, uuid.uuid4().hex)
        """
    )
    result = tester.runpytest(
        "--latency-sim=instant",
        "--latency-capture-text=200",
        "-p",
        "no:randomly",
        "--latency-json=out.json",
    )
    result.assert_outcomes(passed=1)
    record = _record(tester, "test_open")
    _check_attribution(record, 12, 1)
    spans = sorted(_kept_spans(record), key=lambda s: s[4])
    intended = [s[4] for s in spans]
    # The schedule itself: one start every 25 ms exactly (constant arrivals).
    assert all(abs((b - a) - 25 * MS) <= 1 for a, b in itertools.pairwise(intended))
    # Kept: a sample starts within milliseconds of its intended start whatever is in flight
    # (each stream takes ≥ 100 ms, so 4 or more overlap). Loose bounds: a busy machine delays
    # a thread's start by a few ms, rarely by tens.
    lates = [(s[2] - s[4]) / MS for s in spans]
    assert min(lates) >= 0 and statistics.median(lates) < 15 and max(lates) < 150
    assert _most_at_once([(s[2], s[3]) for s in spans]) >= 3
    # The queue of each call is its sample's lateness and the body's work before the call.
    late_of = {s[0]: (s[2] - s[4]) / 1000 for s in spans}
    for call in record["calls"]:
        queued = call["attempts"][0]["queued_us"]
        assert queued >= late_of[call["sample"]]
    entry = json.loads((tester.path / "out.json").read_text())["tests"][0]
    assert entry["load"]["rate_per_s"] == 40.0 and entry["load"]["arrival"] == "constant"
    assert entry["load"]["in_flight_max"] >= 3
    schedule = entry["load"]["schedule"]
    assert schedule["samples"] == 12 and schedule["late_max_us"] == pytest.approx(
        max(lates) * 1000, rel=1e-6
    )
    assert {"queue", "ttft_intended", "e2e_intended"} <= set(entry["metrics"])


# One request of the run stalls for 1.5 s before its headers (a per-request override of the
# simulator's time to first byte); every other one answers in ~10 ms.
STALL_BODY = """
import itertools
import pytest

COUNT = itertools.count()

def ask(client):
    stall = next(COUNT) == 4
    headers = {"x-sim-ttfb-ms": "1500"} if stall else {}
    stream = client.chat.completions.create(
        model="m", stream=True, extra_headers=headers,
        messages=[{"role": "user", "content": "q"}])
    for _ in stream:
        pass

@pytest.fixture
def quick(llm_sim):
    llm_sim.set_model(llm_sim.model.replace(
        ttfb_ms=1.0, prefill_us_per_token=0.0, decode_ms_per_token=0.5, jitter=0.0,
        output_tokens=8))
"""


def test_a_stall_shows_in_the_open_loops_intended_figures_and_the_closed_loop_hides_it(
    tester: pytest.Pytester,
) -> None:
    """Coordinated omission: a closed loop waits out the stall and sends nothing meanwhile, so
    one slow call in 40 leaves its p95 clean; an open loop at 20/s through one connection (a cap
    of 1) keeps meaning to start samples during the stall, and their wait is in `queue` and the
    `*_intended` figures, while the per-call `ttft` stays as clean as the closed loop's."""
    tester.makepyfile(
        test_closed=STALL_BODY
        + """
@pytest.mark.latency(samples=40)
def test_closed(openai_client, quick):
    ask(openai_client)
""",
        test_open=STALL_BODY
        + """
@pytest.mark.latency(samples=40, rate="20/s", arrival="constant", concurrency=1)
def test_open(openai_client, quick):
    ask(openai_client)
""",
    )
    result = tester.runpytest(
        "--latency-sim=instant",
        "-p",
        "no:randomly",
        "--latency-json=o.json",
        "--latency-markdown=o.md",
        "--latency-report=o.html",
    )
    result.assert_outcomes(passed=2)
    entries = {
        e["nodeid"].split("::")[-1]: e
        for e in json.loads((tester.path / "o.json").read_text())["tests"]
    }
    closed, opened = entries["test_closed"], entries["test_open"]
    ms = 1000.0  # the result file's unit is µs
    # Both saw the stall once: the worst ttft.
    assert closed["metrics"]["ttft"]["max"] > 1400 * ms
    assert opened["metrics"]["ttft"]["max"] > 1400 * ms
    # The closed loop hides it: its p95 is a normal call's, and it has no intended-start view.
    assert closed["metrics"]["ttft"]["p95"] < 300 * ms
    assert "ttft_intended" not in closed["metrics"] and "load" not in closed
    # The open loop's per-call ttft hides it as well ...
    assert opened["metrics"]["ttft"]["p50"] < 300 * ms
    # ... but ~30 of its 40 samples were meant to start during the 1.5 s stall: from their
    # intended start, the median call waited hundreds of ms (0.75 s on average, less the
    # catch-up), and p95 most of the stall.
    assert opened["metrics"]["ttft_intended"]["p50"] > 300 * ms
    assert opened["metrics"]["ttft_intended"]["p95"] > 1000 * ms
    assert opened["metrics"]["queue"]["p50"] > 250 * ms
    assert opened["metrics"]["e2e_intended"]["p95"] > opened["metrics"]["e2e"]["p95"] + 500 * ms
    # And the run says why: the client could not keep the schedule.
    kinds = {f["kind"]: f for f in opened["findings"]}
    assert "schedule_slipped" in kinds
    assert kinds["schedule_slipped"]["evidence"]["slipped"] >= 20
    assert not any(f["kind"] == "schedule_slipped" for f in closed["findings"])
    # The summaries say it with the result file's numbers: the load sentence (read from the
    # entry once, `report.load_text`) and the intended-start figures beside the per-call ones.
    sentence = load_text(opened)
    assert sentence is not None and sentence.startswith("Open loop, 20/s constant, concurrency 1")
    assert f"{kinds['schedule_slipped']['evidence']['slipped']} of 40" in sentence
    markdown = (tester.path / "o.md").read_text()
    row = next(
        line
        for line in markdown.splitlines()
        if line.startswith("| test\\_open.py") and "loop" in line
    )
    for metric in ("queue", "ttft", "ttft_intended", "e2e_intended"):
        assert units.value("us", opened["metrics"][metric]["p95"]) in row
    assert load_text(closed) is None and "test\\_closed | Closed" not in markdown
    assert html.escape(sentence) in (tester.path / "o.html").read_text()


def test_sequential_sampling_draws_more_samples_in_concurrent_batches(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(
        test_inner="""
        import pytest

        # p90 needs ~30 values to pass with confidence: 8 samples are inconclusive, so the
        # sampler draws 8 → 16 → 32 (→ 64), each batch at the cap.
        @pytest.mark.latency(
            "ttft.p90 < 10s", samples=8, max_samples=64, concurrency=4, warmup=4)
        def test_more(openai_client, sim, ask):
            ask(openai_client)
        """
    )
    result = tester.runpytest("--latency-sim=instant", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    record = _record(tester, "test_more")
    assert record["samples"] in (32, 64)
    spans = _kept_spans(record)
    assert sorted(s[0] for s in spans) == list(range(record["samples"]))
    assert _most_at_once([(s[2], s[3]) for s in spans]) == 4
    assert _most_at_once(_truth(tester, "test_more")) == 4
    # Each batch warms the line again before its samples, as the first does: 4 warmups, and its
    # first sample starts once one of them has ended. Warmups are numbered -2, -3, ... and kept
    # samples 0, 1, ... in the order they start calling, batch after batch (8, 8, 16, 32 kept).
    # Before, the extra batches had no warmup: their first 4 samples started together, into an
    # empty server (session 27).
    kept = record["samples"]
    bounds = [0, 8, 16, 32, 64][: {32: 4, 64: 5}[kept]]
    warmups = sorted((s for s in record["spans"] if s[1]), key=lambda s: -s[0])
    assert len(warmups) == 4 * (len(bounds) - 1), len(warmups)
    by_index = {s[0]: s for s in spans}
    for batch, (low, high) in enumerate(itertools.pairwise(bounds)):
        warm = warmups[4 * batch : 4 * batch + 4]
        first_sample = min(by_index[i][2] for i in range(low, high))
        assert first_sample >= min(w[3] for w in warm), (batch, warm, first_sample)
        if batch:  # after the look: the last batch's samples had all ended
            assert min(w[2] for w in warm) >= max(
                by_index[i][3] for i in range(bounds[batch - 1], low)
            )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ("concurrency=0", "concurrency=0 must be an integer >= 1"),
        ("concurrency=2000", "over the limit of 1024"),
        ("rate='fast'", "rate='fast' must be a rate such as '20/s'"),
        ("rate=0", "rate=0 must be a positive, finite rate"),
        ("rate='20/s', arrival='bursty'", "arrival='bursty' must be one of 'poisson', 'constant'"),
        ("arrival='constant'", "arrival needs a rate"),
        ("rate='2/s', arrival='constant', burstiness=0.5", "constant arrivals have none"),
        ("rate='2/s', burstiness=-1", "burstiness=-1 must be a positive, finite number"),
        ("concurrency=2, sead=1", "unknown keyword argument(s) sead"),
    ],
)
def test_a_bad_load_in_the_marker_is_a_collection_error_naming_the_test(
    tester: pytest.Pytester, kwargs: str, message: str
) -> None:
    tester.makepyfile(
        test_bad=f"""
        import pytest

        @pytest.mark.latency(samples=2, {kwargs})
        def test_it():
            pass
        """
    )
    result = tester.runpytest("-p", "no:randomly")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*test_bad.py::test_it @pytest.mark.latency*{message}*"])


def test_budgets_toml_gives_the_load_and_the_marker_beats_it(tester: pytest.Pytester) -> None:
    tester.makefile(
        ".toml",
        budgets="""
        [defaults]
        samples = 6
        concurrency = 3

        [[budget]]
        select = "test_file.py::test_open*"
        expect = ["ttft.p99 < 10s"]
        rate = "30/s"
        arrival = "constant"
        """,
    )
    tester.makepyfile(
        test_file="""
        import pytest

        @pytest.mark.latency("ttft.p50 < 10s")
        def test_capped(openai_client, sim, ask):
            ask(openai_client)

        def test_open(openai_client, sim, ask):
            ask(openai_client)

        @pytest.mark.latency(concurrency=1, seed=3)
        def test_open_one_at_a_time(openai_client, sim, ask):
            ask(openai_client)
        """
    )
    result = tester.runpytest(
        "--latency-sim=instant", "--latency-budget=budgets.toml", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=3)
    capped = _record(tester, "test_capped")["load"]
    assert (capped["concurrency"], capped["rate"]) == (3, None)
    opened = _record(tester, "test_open")["load"]
    assert (opened["concurrency"], opened["rate"], opened["arrival"]) == (3, 30.0, "constant")
    one = _record(tester, "test_open_one_at_a_time")
    assert (one["load"]["concurrency"], one["load"]["rate"], one["load"]["seed"]) == (1, 30.0, 3)
    spans = _kept_spans(one)
    assert _most_at_once([(s[2], s[3]) for s in spans]) == 1


def test_a_bad_load_in_budgets_toml_names_the_file_and_line() -> None:
    text = '[defaults]\nsamples = 5\nconcurrency = 0\n\n[[budget]]\nselect = "t*"\n'
    text += 'expect = ["ttft.p50 < 1s"]\nrate = "20 per second"\n'
    with pytest.raises(BudgetError) as caught:
        parse_budget_file(text, path="budgets.toml")
    message = str(caught.value)
    assert "budgets.toml:3" in message and "concurrency=0 must be an integer >= 1" in message
    assert "budgets.toml:8" in message and "rate='20 per second'" in message
    loaded = parse_budget_file(
        '[defaults]\nconcurrency = 4\nrate = "90/min"\narrival = "poisson"\nburstiness = 0.5\n',
        path="b.toml",
    )
    assert dict(loaded.defaults.load) == {
        "concurrency": 4,
        "rate": "90/min",
        "arrival": "poisson",
        "burstiness": 0.5,
    }


def test_the_marker_takes_every_load_key() -> None:
    from pytest_latency.plugin import _sampling

    assert _sampling._LOAD_KWARGS == LOAD_KEYS


def test_rates_read_per_second_and_per_minute() -> None:
    assert read_value("rate", "20/s") == 20.0
    assert read_value("rate", "90/min") == 1.5
    assert read_value("rate", " 1.5 / s ") == 1.5
    assert read_value("rate", 4) == 4.0
    for bad in ("20", "/s", "-1/s", "1e999/s", True, "nan/s"):
        with pytest.raises(LoadError):
            read_value("rate", bad)


def test_the_schedule_repeats_from_its_seed_and_has_the_rate_and_shape_asked() -> None:
    def gaps(load: Load, n: int) -> list[float]:
        offsets = Schedule(load).next_offsets(n + 1)
        return [b - a for a, b in itertools.pairwise(offsets)]

    poisson = load_of({"rate": 50.0})
    first = gaps(poisson, 4000)
    assert first == gaps(poisson, 4000)  # the same seed, the same schedule
    assert first != gaps(load_of({"rate": 50.0, "seed": 1}), 4000)
    # Mean 1/rate; a Poisson process's gaps have a coefficient of variation of 1, gamma
    # arrivals of shape k one of 1/√k (vLLM's --burstiness).
    assert statistics.fmean(first) == pytest.approx(0.02, rel=0.06)
    assert statistics.stdev(first) / statistics.fmean(first) == pytest.approx(1.0, rel=0.08)
    bursty = gaps(load_of({"rate": 50.0, "burstiness": 0.25}), 4000)
    assert statistics.fmean(bursty) == pytest.approx(0.02, rel=0.12)
    assert statistics.stdev(bursty) / statistics.fmean(bursty) == pytest.approx(2.0, rel=0.12)
    constant = gaps(load_of({"rate": 50.0, "arrival": "constant"}), 10)
    assert constant == [pytest.approx(0.02)] * 10


def test_decode_slows_with_concurrency_as_the_simulators_model_says(
    tester: pytest.Pytester,
) -> None:
    """The simulator's `concurrency_slowdown` k makes each token take (1 + k·(streams − 1))
    times longer: at 4 samples in flight (steady state: a request arrives as one of 4 ends, so
    it shares the server with 3 others), k = 0.25 gives 1.75 × the lone stream's tpot."""
    tester.makepyfile(
        test_inner="""
        import pytest

        @pytest.fixture
        def slowing(sim):
            sim.set_model(sim.model.replace(concurrency_slowdown=0.25))

        @pytest.mark.latency(samples=16, warmup=1)
        def test_alone(openai_client, slowing, ask):
            ask(openai_client)

        @pytest.mark.latency(samples=16, warmup=1, concurrency=4)
        def test_four(openai_client, slowing, ask):
            ask(openai_client)
        """
    )
    result = tester.runpytest("--latency-sim=instant", "-p", "no:randomly", "--latency-json=o.json")
    result.assert_outcomes(passed=2)
    tpot = {
        e["nodeid"].split("::")[-1]: e["metrics"]["tpot"]["p50"]
        for e in json.loads((tester.path / "o.json").read_text())["tests"]
    }
    assert tpot["test_alone"] == pytest.approx(5000, rel=0.15)  # 5 ms a token, alone
    assert 1.45 < tpot["test_four"] / tpot["test_alone"] < 2.1


def test_threads_the_body_starts_keep_their_sample(tester: pytest.Pytester) -> None:
    """A thread started with the sample's context (`contextvars.copy_context().run`) keeps it
    under concurrency; a plain thread falls back to the sample begun last, which is its own
    when one sample runs at a time (an open loop at a cap of 1)."""
    tester.makepyfile(
        test_inner="""
        import contextvars
        import threading
        import uuid
        import pytest

        def in_thread(target, *args, context=None):
            run = target if context is None else context.run
            thread = threading.Thread(target=run, args=(target, *args) if context else args)
            thread.start()
            thread.join()

        @pytest.mark.latency(samples=8, concurrency=4)
        def test_copied(openai_client, sim, ask):
            token = uuid.uuid4().hex
            ask(openai_client, token)
            in_thread(ask, openai_client, token, context=contextvars.copy_context())

        @pytest.mark.latency(samples=6, rate="50/s", concurrency=1)
        def test_plain(openai_client, sim, ask):
            token = uuid.uuid4().hex
            ask(openai_client, token)
            in_thread(ask, openai_client, token)
        """
    )
    result = tester.runpytest(
        "--latency-sim=instant", "--latency-capture-text=200", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=2)
    _check_attribution(_record(tester, "test_copied"), 8, 2)
    _check_attribution(_record(tester, "test_plain"), 6, 2)


def test_a_sweep_runs_the_test_at_each_level_and_budgets_name_a_level(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(
        test_inner="""
        import pytest

        @pytest.mark.latency(
            "ttft.p50 < 10s", "ttft{concurrency=4}.p90 < 20s", samples=8, concurrency=[1, 4]
        )
        def test_users(openai_client, sim, ask):
            ask(openai_client)

        @pytest.mark.parametrize("model", ["a", "b"])
        @pytest.mark.latency(samples=4, rate=["20/s", "40/s"], arrival="constant")
        def test_rates(openai_client, sim, ask, model):
            ask(openai_client)
        """
    )
    result = tester.runpytest(
        "--latency-sim=instant", "-p", "no:randomly", "-v", "--latency-markdown=o.md"
    )
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        [
            "*test_users?concurrency=1? PASSED*",
            "*test_users?concurrency=4? PASSED*",
            "*test_rates?rate=20/s-a? PASSED*",
            "*test_rates?rate=40/s-b? PASSED*",
        ]
    )
    one, four = (
        _record(tester, "test_users[concurrency=1]"),
        _record(tester, "test_users[concurrency=4]"),
    )
    # Each level runs at its own load, and the level's budget is judged at that level only.
    for record, slots in ((one, 1), (four, 4)):
        assert record["load"]["concurrency"] == slots
        assert _most_at_once([(s[2], s[3]) for s in _kept_spans(record)]) == slots
        assert record["sweep"] == "test_inner.py::test_users[concurrency=*]"
    assert [b["expr"] for b in one["budgets"]] == ["ttft.p50 < 10s"]
    assert [b["expr"] for b in four["budgets"]] == [
        "ttft.p50 < 10s",
        "ttft{concurrency=4}.p90 < 20s",
    ]
    # The level filter chose the test; its calls are all the level's (n = every sample's call).
    assert four["budgets"][1]["n"] == 8
    rate = _record(tester, "test_rates[rate=40_s-b]")
    assert (rate["load"]["rate"], rate["sweep"]) == (40.0, "test_inner.py::test_rates[rate=*-b]")
    markdown = (tester.path / "o.md").read_text()
    table = markdown.split("### Sweep test\\_inner.py::test\\_users")[1].split("###")[0]
    rows = [line for line in table.splitlines() if line.startswith("| concurrency=")]
    assert [row.split(" | ")[0] for row in rows] == ["| concurrency=1", "| concurrency=4"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            "concurrency=[1, 2], rate=['1/s', '2/s']",
            "lists one of concurrency= and rate=, not both",
        ),
        ("concurrency=[]", "concurrency=[] lists no level"),
        ("concurrency=[2, 2]", "lists a level twice"),
        ("concurrency=[1, 0]", "concurrency=0 must be an integer >= 1"),
        (
            "'ttft{concurrency=3}.p50 < 1s', concurrency=[1, 2]",
            "which this test's sweep does not list",
        ),
        ("'ttft{rate=fast}.p50 < 1s', rate='2/s'", "rate='fast' must be a rate"),
    ],
)
def test_a_bad_sweep_is_a_collection_error_naming_the_test(
    tester: pytest.Pytester, kwargs: str, message: str
) -> None:
    tester.makepyfile(
        test_bad=f"""
        import pytest

        @pytest.mark.latency({kwargs}, samples=2)
        def test_it():
            pass
        """
    )
    result = tester.runpytest("-p", "no:randomly")
    assert result.ret != 0
    result.stdout.fnmatch_lines([f"*test_bad.py::test_it*@pytest.mark.latency*{message}*"])


def test_a_level_filter_has_no_place_in_the_session_budgets() -> None:
    text = '[session]\nexpect = ["ttft.p50 < 1s", "ttft{concurrency=4}.p95 < 2s"]\n'
    with pytest.raises(BudgetError, match=r"budgets.toml:2: .*level filter .*\[session\]"):
        parse_budget_file(text, path="budgets.toml")


def test_the_sweepable_keys_are_the_level_filter_keys() -> None:
    from pytest_latency.budgets import LEVEL_FILTER_KEYS
    from pytest_latency.plugin import _sweep

    assert _sweep.SWEPT == LEVEL_FILTER_KEYS


def test_every_metric_takes_a_level_filter_and_turn_still_no_call_filter() -> None:
    from pytest_latency.budgets import parse_expectation

    turn = parse_expectation("turn{concurrency=4}.p90 < 1s", source="t")
    assert turn.filters == (("concurrency", "4"),)
    assert parse_expectation("calls{rate=20/s}.max <= 3", source="t").filters == (("rate", "20/s"),)
    with pytest.raises(BudgetError, match="takes no filter"):
        parse_expectation("turn{concurrency=4, model=m}.p90 < 1s", source="t")


def test_a_concurrency_sweeps_ttft_rises_as_the_simulators_model_predicts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #17's first check, through the marker: at concurrency 1, 4 and 16 against a provider
    of 4 slots, the ttft p95 of each level rises as `sim.expected_under_load` predicts for as
    many closed-loop clients (the decode's slowdown at 4, the line's wait at 16): not below the
    prediction by more than 15 % + 1 ms, and above it by no more than the simulator's own log
    shows it was late plus 25 % + 15 ms of delivery (a simulator starved of CPU beside two hogs
    sent its first tokens late: p95 59 ms at 4 against 23 predicted; its log is the truth the
    plugin is held to, the model only where nothing starved). A level whose calls the plugin
    flagged (over a tenth: cpu_starved, client_saturated, gc_paused) is held to the rise alone:
    its client did not keep the loop closed, and the report says so. The simulator runs in its
    own process."""
    from remote_sim import FOUR_SLOTS, flags_of, remote_simulator, truth_log

    from pytest_latency.sim import expected_under_load

    # FOUR_SLOTS at 6 ms a token (remote_sim says why): 298-300 ms against 302 in 6 runs of 6,
    # and 293-296 in 2 of 3 beside two busy loops (the third flagged 46 of 48; session 26).
    provider = FOUR_SLOTS
    monkeypatch.setenv("OPENAI_API_KEY", "sim-key")
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_inner="""
        import pytest

        @pytest.mark.asyncio
        @pytest.mark.latency(samples=48, warmup=16, concurrency=[1, 4, 16])
        async def test_users(async_openai_client):
            stream = await async_openai_client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "Say something short."}],
                stream=True)
            async for _ in stream:
                pass
        """
    )
    with remote_simulator(*flags_of(provider)) as base_url:
        # A process of its own: inside the whole suite's process (after ~1,500 other tests and
        # their inner runs) the level of 16 measured ttft p50 72 ms, p95 101 ms against 155,
        # no call flagged, as if its samples ran in waves (session 9); the client's own cost,
        # above, is the likelier cause.
        result = pytester.runpytest_subprocess(
            f"--latency-openai-base-url={base_url}/v1",
            "-p",
            "asyncio",
            "--asyncio-mode=strict",
            "-p",
            "no:randomly",
            "--latency-json=out.json",
        )
        # The levels run one after another, each 16 warmup calls then 48 samples.
        truths = sorted(truth_log(base_url), key=lambda t: t.t_received_ns)
    result.assert_outcomes(passed=3)
    assert len(truths) == 3 * 64
    tests = {t["nodeid"]: t for t in json.loads((pytester.path / "out.json").read_text())["tests"]}
    figures = []
    for index, level in enumerate((1, 4, 16)):
        entry = tests[f"test_inner.py::test_users[concurrency={level}]"]
        block = entry["metrics"]["ttft"]
        predicted = expected_under_load(provider, level, prompt_tokens=7).ttft_ms
        p95 = block["p95"] / 1000
        served = truths[index * 64 + 16 : (index + 1) * 64]
        sent = sorted((t.ttft_ns or 0) / 1e6 for t in served)
        sent_p95 = sent[math.ceil(0.95 * len(sent)) - 1]
        flagged = entry["flagged_count"]
        figures.append((level, predicted, p95, sent_p95, block["count"], flagged))
        assert block["count"] == 48, figures
        # A client starved of CPU sends its next requests late and keeps a shorter line than a
        # closed loop's (beside two CPU hogs, 31 of 48 calls flagged at 16: p95 100 ms against
        # 155), and stamps its own calls late (30 of 48 flagged at 4: p95 63 ms against the
        # simulator's 30, session 18); so does one busy with its own work (above): the plugin
        # says so, and the level is held to the rise alone.
        if flagged <= block["count"] // 10:
            assert p95 <= max(predicted, sent_p95) * 1.25 + 15, figures
            assert predicted * 0.85 - 1 <= p95, figures
            # Every sample met the line: the warmups and samples are one closed loop, so none
            # started into a line still forming. As two batches the server drained between
            # them: the level of 4's smallest was 32 ms against 44 (its first samples' decode
            # not yet slowed by the others), and the level of 16's first samples waited 0-2
            # services where the rest waited 3.
            assert predicted * 0.85 - 1 <= block["min"] / 1000, figures
    assert figures[0][2] < figures[1][2] < figures[2][2], figures
    assert figures[2][2] > 2 * figures[1][2], figures  # the line's wait, not the slowdown alone
