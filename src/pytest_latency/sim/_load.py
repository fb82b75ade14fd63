"""What the latency model predicts under load: the expected times at C concurrent clients.

Owns `expected_under_load` and `LoadPrediction`: for C clients in a closed loop (each sends its
next request as soon as its last one has ended, as `asyncio.gather` over C workers does), the
streams served at once, the steady line for a slot and its wait (Little's law), and the expected
ttft and e2e that follow from the model's own timing (`_schedule`'s prefill and decode costs,
`concurrency_slowdown` at the streams served). So a test can check that measured figures rise
with concurrency as the model says. Imports only the stdlib, `_model` and `_schedule`.
"""

from __future__ import annotations

from typing import NamedTuple

from ._model import LatencyModel, SimSettingsError
from ._schedule import decode_ns_per_token, prefill_ns

__all__ = ["LoadPrediction", "expected_under_load"]


class LoadPrediction(NamedTuple):
    """Expected figures of one request in the steady state at `concurrency` clients (ms)."""

    concurrency: int
    served: int  # requests being served at once: min(C, max_concurrency)
    queued: int  # requests waiting for a slot: min(C − served, max_queue)
    rejected: int  # clients beyond the line: their tries get 429s while it is full
    queue_ms: float  # wait for a slot: service_ms × queued / served
    service_ms: float  # a slot held: headers, tail, prefill, every token's decode
    ttft_ms: float  # queue_ms + headers + tail + prefill + the first event's tokens
    e2e_ms: float  # queue_ms + service_ms


def expected_under_load(
    model: LatencyModel,
    concurrency: int,
    *,
    prompt_tokens: int,
    output_tokens: int | None = None,
) -> LoadPrediction:
    """Means at `concurrency` closed-loop clients sending `prompt_tokens` (uncached) and getting
    `output_tokens` (default: the model's) streamed back, without reasoning.

    With ``jitter=0`` and ``tail_prob=0`` every request of the steady state takes these times, so
    they are its p50 and p95 too; jitter is mean-one, so the means hold with it; a tail adds
    ``tail_prob × tail_ms`` to the mean. Not the first round of a burst: the requests that start
    together find an empty line (and fewer streams served), so discard each client's first.
    """
    if concurrency < 1:
        raise SimSettingsError(f"concurrency must be >= 1, got {concurrency!r}")
    if prompt_tokens < 0:
        raise SimSettingsError(f"prompt_tokens must be >= 0, got {prompt_tokens!r}")
    n = model.output_tokens if output_tokens is None else output_tokens
    if n < 1:
        raise SimSettingsError(f"output_tokens must be >= 1, got {n!r}")
    limit = model.max_concurrency
    served = min(concurrency, limit) if limit else concurrency
    queued = min(concurrency - served, model.max_queue)
    rejected = concurrency - served - queued
    per_token = decode_ns_per_token(model, served) / 1e6
    before_first = (
        model.ttfb_ms + model.tail_prob * model.tail_ms + prefill_ns(model, prompt_tokens) / 1e6
    )
    service = before_first + n * per_token
    # Little's law over the served + queued clients cycling through `served` slots: each cycle
    # takes (served + queued) / served service times, of which one is served.
    queue = service * queued / served
    return LoadPrediction(
        concurrency=concurrency,
        served=served,
        queued=queued,
        rejected=rejected,
        queue_ms=queue,
        service_ms=service,
        ttft_ms=queue + before_first + min(model.tokens_per_chunk, n) * per_token,
        e2e_ms=queue + service,
    )
