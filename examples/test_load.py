"""Latency under load: what a fan-out of concurrent requests meets at a provider that serves only
so many at once, and two cures: a bound on concurrency, and hedging the slow tail.

The simulator plays a provider with a concurrency limit (`max_concurrency` streams served at
once, `max_queue` more waiting for a slot, a 429 with `retry-after` beyond that) and with a slow
tail (`tail_prob` of the requests wait `tail_ms` before their first token): docs/simulator.md.

- Fan-out: twelve requests at once meet 429s, SDK retries and waits for a slot; the same twelve
  through an `asyncio.Semaphore` of the provider's size meet none. Budgets: the markers.
- A sweep: the same provider with room in line for everyone, at 1, 4 and 16 users at once
  (`concurrency=[1, 4, 16]`); the report draws ttft, tpot and goodput against the load and marks
  the knee where the line starts.
- Hedging: a duplicate sent when the first token is later than the p95 cuts the p99 to what the
  plugin's hedging what-if (`diagnose.hedge`, the report's figures) predicted from the unhedged
  run; the test measures both and compares them (docs/load.md, "Bounded concurrency, 429s and
  hedging").

Against a real provider these lessons need its own limits and tail, so they run on the simulator
only (skipped otherwise).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from pytest_latency import diagnose, stats

QUESTIONS = [f"In one line: what is step {i} of making tea?" for i in range(12)]
# The provider's capacity: 4 streams at once, 4 more waiting; a 429 asks to come back in 50 ms.
CAPACITY = {"max_concurrency": 4, "max_queue": 4, "retry_after_ms": 50.0}
# 3 % of requests wait 120 ms before their first token (a cold replica, a long queue elsewhere):
# the p95 is still fast, the p99 is the tail.
TAIL = {"tail_prob": 0.03, "tail_ms": 120.0}


def on_simulator(sim, client):
    if not str(client.base_url).startswith(sim.base_url):
        pytest.skip("shows the simulator's concurrency limit and tail; a provider has its own")


@pytest.fixture
def limited(llm_sim, async_openai_client):
    on_simulator(llm_sim, async_openai_client)
    # No slow tail here: every wait these tests see is the line's. (`llm_sim` restores the model.)
    llm_sim.set_model(llm_sim.model.replace(**CAPACITY, tail_prob=0.0))
    return llm_sim


@pytest.fixture
def tail(llm_sim, async_anthropic_client):
    on_simulator(llm_sim, async_anthropic_client)
    llm_sim.set_model(llm_sim.model.replace(**TAIL))
    return llm_sim


# The fan-out's answers are long enough (~150 ms each here) that all twelve requests are out
# before the first four are answered, even from a client starved of CPU: at 16 tokens (~75 ms), a
# run beside a test suite and two busy loops issued them so slowly that never more than the 8 the
# provider holds were in flight, and nothing was turned away.
FAN_OUT_TOKENS = 64


async def ask(client, model: str, question: str, max_tokens: int = 16) -> str:
    stream = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": question}],
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},  # the usage prices the call
    )
    return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


# Twelve requests at once against 4 slots and 4 places in line: 4 are served, 4 wait a whole
# answer for a slot (inside their ttft), 4 get a 429 and the SDK retries them 50 ms later. Every
# answer arrives, so the body passes; these budgets say what it cost, the opposite of the bounded
# fan-out's below: the SDK retried, and the slowest calls' first token took over 50 ms.
@pytest.mark.latency("retries > 0", "ttft.p95 > 50ms", samples=3, max_samples=3)
async def test_unbounded_fan_out(limited, async_openai_client, openai_model):
    answers = await asyncio.gather(
        *(ask(async_openai_client, openai_model, q, FAN_OUT_TOKENS) for q in QUESTIONS)
    )
    assert all(answers)


# The same twelve through a semaphore sized to the provider's concurrency: never more in flight
# than it serves, so nothing waits at the provider and nothing is turned away. The turn (the whole
# fan-out) is no shorter: the waiting moved into the test's own code, where it costs no retries.
# 12 samples are 144 calls: enough for the p95's interval to clear 50 ms (at 8, a busy machine's
# 39 ms p95 had an upper bound of 51.5 ms: inconclusive).
@pytest.mark.latency("ttft.p95 < 50ms", "retries < 1", samples=12, max_samples=12)
async def test_bounded_fan_out(limited, async_openai_client, openai_model):
    bound = asyncio.Semaphore(CAPACITY["max_concurrency"])

    async def bounded(question: str) -> str:
        async with bound:
            return await ask(async_openai_client, openai_model, question, FAN_OUT_TOKENS)

    answers = await asyncio.gather(*(bounded(q) for q in QUESTIONS))
    assert all(answers)


# --- a sweep: where the provider stops being good ------------------------------------------------

# The provider of the fan-out above, with room in line for everyone (no 429s): past 4 streams at
# once the others wait their turn, inside their ttft.
ROOMY = {**CAPACITY, "max_queue": 64}


@pytest.fixture
def roomy(llm_sim, async_openai_client):
    on_simulator(llm_sim, async_openai_client)
    llm_sim.set_model(llm_sim.model.replace(**ROOMY, tail_prob=0.0))
    return llm_sim


# One user a sample, 1, 4 and 16 of them at once: the test runs at each level, and the report draws
# ttft, tpot and this goodput against the load, with the knee (the last level whose ttft p95 is
# within 1.5x the lowest load's: 4, the provider's size). At 16 twelve wait their turn: ttft p95
# rises ~6x (~140 ms here), still inside the 250 ms the product promises its users, so goodput
# holds while the headroom goes. A closed loop's goodput is a step: every request of a level's
# steady state waits about as long, so it stays at ~100 % until the line passes the promise, then
# falls to ~0. 64 samples: enough for a p95 to pass with confidence (59).
@pytest.mark.latency(
    "good(ttft < 250ms) >= 90%", "ttft{concurrency=16}.p95 < 250ms", samples=64, max_samples=64,
    concurrency=[1, 4, 16],
)  # fmt: skip
async def test_users_at_each_concurrency(roomy, async_openai_client, openai_model):
    assert await ask(async_openai_client, openai_model, QUESTIONS[0])


# --- hedging -------------------------------------------------------------------------------------

REQUESTS = 300  # per phase; a p99 rests on the slowest few of them
AT_ONCE = 4  # independent requests in flight (the provider has no limit here)
# Measured hedged p99 against the what-if's, relative: over ten seeds they differed by 0-16 %
# (the caller's own clock adds the SDK's work, ~1 ms an attempt, to every value).
TOLERANCE = 0.25


class Attempt:
    """One streamed request, read in a task of its own: `first` resolves to the time its first
    token came (perf_counter), or None if it never did. `cancel()` stops it at its next event and
    closes its stream."""

    def __init__(self, client, model: str, question: str) -> None:
        self.first = asyncio.get_running_loop().create_future()
        self._cancelled = False
        self.task = asyncio.ensure_future(self._run(client, model, question))
        self.task.add_done_callback(lambda _: self.first.done() or self.first.set_result(None))

    async def _run(self, client, model: str, question: str) -> None:
        stream = await client.messages.create(
            model=model,
            max_tokens=6,
            messages=[{"role": "user", "content": question}],
            stream=True,
        )
        async with stream:
            async for event in stream:
                # Stopped at its next event and closed (cancelling its task would do as well:
                # either way the call is incomplete, not failed); Anthropic's first event carries
                # the usage that prices it.
                if self._cancelled:
                    break
                if not self.first.done() and event.type == "content_block_delta":
                    self.first.set_result(time.perf_counter())

    def cancel(self) -> None:
        self._cancelled = True


async def plain(client, model: str, question: str) -> None:
    await Attempt(client, model, question).task


async def hedged(client, model: str, question: str, delay_s: float) -> float:
    """The hedge: a second, identical request if the first has not produced its first token
    within `delay_s`; the first to produce one is read to its end, the other cancelled. Returns
    the time to the first token as the caller saw it (s)."""
    start = time.perf_counter()
    attempts = [Attempt(client, model, question)]
    done, _ = await asyncio.wait({attempts[0].first}, timeout=delay_s)
    if not done:
        attempts.append(Attempt(client, model, question))
        firsts = {a.first for a in attempts}
        done, _ = await asyncio.wait(firsts, return_when=asyncio.FIRST_COMPLETED)
    winner = next(iter(done))
    for attempt in attempts:
        if attempt.first is not winner:
            attempt.cancel()
    await asyncio.gather(*(a.task for a in attempts))
    return winner.result() - start


async def in_parallel(jobs, limit: int):
    bound = asyncio.Semaphore(limit)

    async def one(job):
        async with bound:
            return await job()

    return await asyncio.gather(*(one(job) for job in jobs))


async def test_hedging_at_p95_cuts_p99_as_predicted(
    tail, async_anthropic_client, claude_model, latency
):
    client, model = async_anthropic_client, claude_model

    def requests(n: int, how, *args):
        return in_parallel(
            [lambda i=i: how(client, model, f"Name a colour, {i}.", *args) for i in range(n)],
            AT_ONCE,
        )

    # The body marks its own samples: first a warmup (cold connections), left out of everything.
    with latency.sample(warmup=True):
        await requests(AT_ONCE, plain)

    # 1. Unhedged: the plugin measures each call's ttft, and its what-if says what a duplicate
    #    sent at the p95 would make of them (the report shows it too, over both samples).
    with latency.sample():
        await requests(REQUESTS, plain)
    baseline = latency.calls
    predicted = diagnose.hedge([c.value("ttft") for c in baseline], 95)  # µs

    # 2. Hedged at that p95: the time to the first token as the caller sees it.
    with latency.sample():
        seen = await requests(REQUESTS, hedged, predicted.delay / 1e6)
    measured_p99 = stats.percentile(sorted(s * 1e6 for s in seen), 99)
    hedges = len(latency.calls) - len(baseline) - REQUESTS

    figures = (
        f"ttft p99 unhedged {predicted.baseline_p99 / 1000:.1f} ms; hedged at its p95 "
        f"({predicted.delay / 1000:.1f} ms): predicted {predicted.p99 / 1000:.1f} ms, "
        f"measured {measured_p99 / 1000:.1f} ms; duplicates predicted "
        f"{predicted.extra_load:.1%}, sent {hedges / REQUESTS:.1%}"
    )
    print(figures)  # shown with -s
    assert not any(c.failed for c in latency.calls)  # a loser closed early is not a failure
    assert predicted.p99 < predicted.baseline_p99 / 2, figures  # the tail is worth hedging
    assert abs(measured_p99 - predicted.p99) <= TOLERANCE * predicted.p99, figures
