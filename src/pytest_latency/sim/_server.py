"""The simulated endpoint's HTTP server: aiohttp app, request pipeline, precise sends, runner.

Owns the request pipeline shared by every simulated API (overrides → parse → fault → cache → plan →
timed writes → truth record), the control endpoints (``/health``, ``/_sim/*``), the send clock
(absolute due times, coarse sleep plus a cooperative final spin), and `SimServer`, which runs the
app on its own event loop in a background thread. Imports the stdlib, aiohttp and the other sim
modules; never pytest and never the rest of pytest_latency.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import random
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Final

from aiohttp import web

from . import _apis
from ._admission import Admission
from ._cache import PrefixCache
from ._clock import SendClock
from ._faults import HTTP_FAULTS, choose_fault, fault_piece, message_for, retry_headers
from ._model import LatencyModel, SimSettingsError, parse_override_json
from ._schedule import Plan, build_plan
from ._tokens import block_hashes, count_tokens, fingerprint, text_tokens, tool_argument_tokens
from ._truth import TruthEvent, TruthLog, TruthRecord
from ._wire import Out, SimRequest, Usage, WireError, WireFormat, dumps

__all__ = ["SimServer", "serve"]

# Enough for hundreds of simultaneous connects from a benchmark or a fan-out test.
_BACKLOG = 2048

# An in-process server shares the GIL with the test's client. CPython hands the GIL to a waiting
# thread only every switch interval (5 ms by default), so a busy client could delay a due send by
# up to 5 ms; while a server runs, the interval is lowered to this (and restored on stop).
_SWITCH_INTERVAL_S = 0.0005

_OVERRIDE_HEADER = "x-sim-model"
_HEADER_PREFIX = "x-sim-"


# What `GET /v1/models` lists: real providers' model names (the ones the examples and docs use,
# so their costs are real prices), then every other name the server has answered with (it echoes
# the request's model), up to `_MAX_MODELS_LISTED`. Model name → the provider that makes it.
LISTED_MODELS: Final = {
    "claude-haiku-4-5": "anthropic",
    "claude-sonnet-4-5": "anthropic",
    "gpt-4.1-mini": "openai",
    "gpt-4o": "openai",
}
_MAX_MODELS_LISTED: Final = 100


class _Engine:
    """Mutable server state, touched from the loop thread (and, under locks, from others)."""

    def __init__(self, model: LatencyModel) -> None:
        self._model = model
        self._model_lock = threading.Lock()
        self.cache = PrefixCache()
        self.clock = SendClock()
        self.truth = TruthLog()
        self.active = 0
        # The concurrency limit's slots and line (loop thread only).
        self.admission = Admission()
        # Requests received but not yet in the truth log. A client can finish reading a response
        # before the server thread has appended its record; readers wait for this to reach 0.
        self.pending = 0
        self.settled = threading.Condition()
        self._ids = itertools.count(1)
        # How often each request fingerprint was seen: the n-th identical request gets the n-th
        # jitter/tail/fault draw, so repeats vary but the whole run replays from the seed.
        self._seen: dict[int, int] = {}
        self.prefix = f"{random.getrandbits(32):08x}"
        # The model names answered with, in first-seen order, and their maker (loop thread only).
        self.models: dict[str, str] = dict(LISTED_MODELS)

    def answered(self, model: str, api: str) -> None:
        if model and model not in self.models and len(self.models) < _MAX_MODELS_LISTED:
            self.models[model] = "anthropic" if api.startswith("anthropic") else "openai"

    @property
    def model(self) -> LatencyModel:
        with self._model_lock:
            return self._model

    @model.setter
    def model(self, model: LatencyModel) -> None:
        if not isinstance(model, LatencyModel):
            raise TypeError(f"expected a LatencyModel, got {type(model).__name__}")
        with self._model_lock:
            self._model = model

    def next_id(self) -> str:
        return f"sim{self.prefix}{next(self._ids):06d}"

    def begin(self) -> None:
        with self.settled:
            self.pending += 1

    def finish(self, record: TruthRecord) -> None:
        with self.settled:
            self.truth.append(record)
            self.pending -= 1
            self.settled.notify_all()

    def wait_settled(self, timeout_s: float) -> None:
        with self.settled:
            self.settled.wait_for(lambda: self.pending == 0, timeout=timeout_s)

    def occurrence(self, fp: int) -> int:
        n = self._seen.get(fp, 0)
        self._seen[fp] = n + 1
        return n


def _overrides(request: web.Request, body: Any) -> dict[str, Any]:
    """Per-request overrides: body ``sim``, then ``x-sim-model`` JSON, then ``x-sim-<field>``."""
    raw: dict[str, Any] = {}
    if isinstance(body, Mapping) and "sim" in body:
        sim = body["sim"]
        if not isinstance(sim, Mapping):
            raise SimSettingsError(f"body field 'sim' must be an object, got {sim!r}")
        raw.update(sim)
    header = request.headers.get(_OVERRIDE_HEADER)
    if header is not None:
        raw.update(parse_override_json(header, f"header {_OVERRIDE_HEADER}"))
    for name, value in request.headers.items():
        low = name.lower()
        if low.startswith(_HEADER_PREFIX) and low not in (_OVERRIDE_HEADER, "x-sim-request-id"):
            raw[low[len(_HEADER_PREFIX) :]] = value
    return raw


def _attempt(request: web.Request) -> int:
    try:
        return max(0, int(request.headers.get("x-stainless-retry-count", "0")))
    except ValueError:
        return 0


class _Exchange:
    """One request in flight: its timing origin, response headers and truth bookkeeping."""

    def __init__(self, engine: _Engine, api: str, request: web.Request) -> None:
        self.engine = engine
        self.api = api
        self.request = request
        self.t0 = time.perf_counter_ns()
        # The schedule's origin: when the request got a slot (t0 until it waits for one).
        self.start = self.t0
        self.t_slot: int | None = None  # when it got a slot (None: it never did)
        self.rejected = False
        self.rid = engine.next_id()
        self.stream = False
        self.model_name = ""
        self.service_tier: str | None = None  # the tier the answer names, once it is parsed
        self.status = 200
        self.t_headers: int | None = None
        self.t_done: int | None = None
        self.events: list[TruthEvent] = []
        self.usage: Usage | None = None
        self.fault: str | None = None
        self.tail = False
        self.prefill_ns = 0

    @property
    def headers(self) -> dict[str, str]:
        # request-id / x-request-id are what the Anthropic and OpenAI SDKs expose as _request_id.
        return {"x-sim-request-id": self.rid, "request-id": self.rid, "x-request-id": self.rid}

    def record(self) -> None:
        u = self.usage
        self.engine.finish(
            TruthRecord(
                request_id=self.rid,
                api=self.api,
                stream=self.stream,
                model=self.model_name,
                status=self.status,
                t_received_ns=self.t0,
                t_headers_ns=self.t_headers,
                events=tuple(self.events),
                input_tokens=None if u is None else u.input_tokens,
                output_tokens=None if u is None else u.output_tokens,
                cache_read_tokens=None if u is None else u.cache_read_tokens,
                cache_write_tokens=None if u is None else u.cache_write_tokens,
                cache_write_1h_tokens=None if u is None else u.cache_write_1h_tokens,
                service_tier=None if u is None else self.service_tier,
                fault=self.fault,
                attempt=_attempt(self.request),
                t_done_ns=self.t_done,
                tail=self.tail,
                prefill_ns=self.prefill_ns,
                queue_ns=self.start - self.t0,
                rejected=self.rejected,
                t_slot_ns=self.t_slot,
            )
        )

    async def sleep_until(self, due_ns: int) -> None:
        await self.engine.clock.sleep_until(due_ns)

    async def send_json(
        self, status: int, body: Mapping[str, Any], extra: Mapping[str, str] | None = None
    ) -> web.Response:
        """Send a whole JSON response now and stamp it (headers and body leave together)."""
        self.status = status
        resp = web.Response(
            status=status,
            body=dumps(body).encode(),
            content_type="application/json",
            headers={**self.headers, **(extra or {})},
        )
        await resp.prepare(self.request)
        await resp.write_eof()
        self.t_headers = self.t_done = time.perf_counter_ns()
        return resp


def _channels(
    model: LatencyModel, req: SimRequest, rng: random.Random
) -> tuple[list[tuple[str, list[str]]], str]:
    """The output to generate, per channel in send order, and how it finishes."""
    out: list[tuple[str, list[str]]] = []
    reasoning = 0
    if req.reasoning != "none":
        reasoning = model.reasoning_tokens
        if req.reasoning_budget is not None:
            reasoning = min(reasoning, req.reasoning_budget)
        if req.max_tokens is not None:
            reasoning = min(reasoning, max(0, req.max_tokens - 1))
        if reasoning:
            toks = text_tokens(rng, reasoning) if req.reasoning == "stream" else [""] * reasoning
            out.append(("reasoning" if req.reasoning == "stream" else "hidden", toks))
    if req.tool is not None:
        budget = max(1, model.output_tokens)
        out.append(("tool", tool_argument_tokens(rng, req.tool.schema, budget)))
        return out, "tool"
    n = model.output_tokens
    finish = "end"
    if req.max_tokens is not None and n > req.max_tokens - reasoning:
        n = max(1, req.max_tokens - reasoning)
        finish = "length"
    if n:
        out.append(("content", text_tokens(rng, n)))
    return out, finish


class _App:
    """The aiohttp application and its handlers."""

    def __init__(self, engine: _Engine) -> None:
        self.engine = engine
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        for wire in _apis.WIRE_FORMATS:  # read per app: a format registered before it is served
            app.router.add_post(wire.PATH, self._api(wire))
        app.router.add_get("/_sim/truth", self.get_truth)
        app.router.add_delete("/_sim/truth", self.clear_truth)
        app.router.add_post("/_sim/truth/clear", self.clear_truth)
        app.router.add_post("/_sim/cache/reset", self.reset_cache)
        app.router.add_get("/_sim/model", self.get_model)
        app.router.add_put("/_sim/model", self.put_model)
        self.app = app

    # --- control ------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        admission = self.engine.admission
        return web.json_response(
            {
                "status": "ok",
                "active": self.engine.active,
                "serving": admission.serving,
                "waiting": admission.waiting,
            }
        )

    async def models(self, request: web.Request) -> web.Response:
        """The model list in the asking SDK's shape: Anthropic's (its SDK sends
        `anthropic-version`; Claude models only) or OpenAI's (every model, with its maker)."""
        models = self.engine.models
        if "anthropic-version" in request.headers:
            names = [name for name, maker in models.items() if maker == "anthropic"]
            data: list[dict[str, Any]] = [
                {
                    "type": "model",
                    "id": name,
                    "display_name": name,
                    "created_at": "1970-01-01T00:00:00Z",
                }
                for name in names
            ]
            return web.json_response(
                {"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}
            )
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": maker}
            for name, maker in models.items()
        ]
        return web.json_response({"object": "list", "data": data})

    async def _settle(self) -> None:
        # Let handlers that already sent their last byte record it (see _Engine.pending).
        deadline = time.monotonic() + 1.0
        while self.engine.pending and time.monotonic() < deadline:
            await asyncio.sleep(0.001)

    async def get_truth(self, request: web.Request) -> web.Response:
        await self._settle()
        records = self.engine.truth.snapshot()
        wanted = request.query.get("request_id")
        if wanted is not None:
            records = [r for r in records if r.request_id == wanted]
        return web.json_response({"records": [r.to_json() for r in records]})

    async def clear_truth(self, request: web.Request) -> web.Response:
        await self._settle()
        self.engine.truth.clear()
        return web.json_response({"cleared": True})

    async def reset_cache(self, request: web.Request) -> web.Response:
        self.engine.cache.clear()
        return web.json_response({"reset": True})

    async def get_model(self, request: web.Request) -> web.Response:
        return web.json_response(self.engine.model.to_dict())

    async def put_model(self, request: web.Request) -> web.Response:
        try:
            raw = await request.json()
            if not isinstance(raw, dict):
                raise SimSettingsError("the model body must be a JSON object of field overrides")
            self.engine.model = self.engine.model.with_overrides(raw)
        except (SimSettingsError, json.JSONDecodeError) as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        return web.json_response(self.engine.model.to_dict())

    # --- the simulated APIs (one route per registered wire format) ----------------------------
    def _api(self, wire: WireFormat) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            ex = _Exchange(self.engine, wire.API, request)
            self.engine.begin()
            self.engine.active += 1
            try:
                return await self._handle(ex, wire)
            except ConnectionError:
                # The client went away before its answer began (it timed out waiting for a slot
                # or for the headers): nothing can be sent; truth keeps what happened.
                ex.status, ex.t_done = 499, time.perf_counter_ns()
                return web.StreamResponse()
            finally:
                self.engine.active -= 1
                ex.record()

        return handler

    async def _handle(self, ex: _Exchange, wire: WireFormat) -> web.StreamResponse:
        request = ex.request
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return await ex.send_json(400, wire.error_body(400, f"invalid JSON body: {exc}"))
        try:
            model = self.engine.model.with_overrides(_overrides(request, body))
        except SimSettingsError as exc:
            return await ex.send_json(400, wire.error_body(400, f"sim override: {exc}"))
        try:
            req = wire.parse(body, request.match_info)
        except WireError as exc:
            return await ex.send_json(exc.status, wire.error_body(exc.status, exc.message))
        ex.stream = req.stream
        ex.model_name = req.model
        self.engine.answered(req.model, wire.API)
        ex.service_tier = req.service_tier or None

        fp = fingerprint(wire.API, body if isinstance(body, Mapping) else {})
        nth = self.engine.occurrence(fp)
        fault = choose_fault(
            model, random.Random(f"{model.seed}:{fp}:{nth}:fault"), _attempt(request)
        )
        ex.fault = fault
        if fault in HTTP_FAULTS:
            status = HTTP_FAULTS[fault]
            await ex.sleep_until(ex.t0 + round(model.ttfb_ms * 1e6))
            extra = retry_headers(model) if status in (429, 529) else None
            return await ex.send_json(status, wire.error_body(status, message_for(status)), extra)

        admission = self.engine.admission
        if admission.try_enter(model.max_concurrency):
            ex.t_slot = time.perf_counter_ns()
        else:
            if not await admission.wait(model.max_queue, model.max_concurrency):
                return await self._reject(ex, wire, model)
            # Its schedule starts in the slot: the wait is added to every time it reports.
            ex.start = ex.t_slot = time.perf_counter_ns()
            transport = ex.request.transport
            if transport is None or transport.is_closing():
                # Its client gave up waiting: the slot goes to the next in line at once, as a
                # server that aborts a disconnected request frees its batch place.
                admission.leave()
                ex.status, ex.t_done = 499, ex.start
                return web.StreamResponse()
        try:
            return await self._serve(ex, wire, model, req, body, fault, fp, nth)
        finally:
            admission.leave()

    async def _reject(
        self, ex: _Exchange, wire: WireFormat, model: LatencyModel
    ) -> web.StreamResponse:
        """Every slot taken and the line full: a 429 with retry-after, as a provider's rate
        limiter answers, after `ttfb_ms` like the other HTTP errors."""
        ex.rejected = True
        await ex.sleep_until(ex.t0 + round(model.ttfb_ms * 1e6))
        message = (
            f"Too many concurrent requests (simulated): {model.max_concurrency} being served "
            f"and {model.max_queue} waiting."
        )
        return await ex.send_json(429, wire.error_body(429, message), retry_headers(model))

    async def _serve(
        self,
        ex: _Exchange,
        wire: WireFormat,
        model: LatencyModel,
        req: SimRequest,
        body: Any,
        fault: str | None,
        fp: int,
        nth: int,
    ) -> web.StreamResponse:
        """The answer, in a slot: cache, plan (from when the slot was granted), timed writes."""
        total = max(1, count_tokens(req.prompt_text))
        cacheable = min(total, req.cacheable_chars // 4)
        blocks = block_hashes(req.prompt_text, model.cache_block_tokens, cacheable)
        hit = self.engine.cache.access(
            blocks,
            block_tokens=model.cache_block_tokens,
            min_tokens=model.cache_min_tokens,
            ttl_s=model.cache_ttl_s,
            capacity_tokens=model.cache_capacity_tokens,
            now_s=time.monotonic(),
            long_blocks=min(cacheable, req.long_cacheable_chars // 4) // model.cache_block_tokens,
            long_ttl_s=model.cache_long_ttl_s,
        )
        reports = wire.REPORTS_CACHE_WRITES
        write = hit.write_tokens if reports else 0
        channels, finish = _channels(model, req, random.Random(f"{model.seed}:{fp}:text"))
        n_pieces = sum(-(-len(t) // model.tokens_per_chunk) for c, t in channels if c != "hidden")
        at = fault_piece(model, n_pieces)
        plan = build_plan(
            model,
            random.Random(f"{model.seed}:{fp}:{nth}:time"),
            uncached_tokens=total - hit.read_tokens,
            channels=channels,
            active_streams=self.engine.admission.serving,
            stall_before=at if fault == "stall" else None,
        )
        ex.tail, ex.prefill_ns = plan.tail, plan.prefill_ns
        reasoning = sum(len(t) for c, t in channels if c in ("reasoning", "hidden"))
        usage = Usage(
            input_tokens=total,
            output_tokens=sum(len(t) for _, t in channels),
            cache_read_tokens=hit.read_tokens,
            cache_write_tokens=write,
            reasoning_tokens=reasoning,
            cache_write_1h_tokens=hit.long_write_tokens if reports else None,
        )
        created = int(time.time())
        if not req.stream:
            return await self._respond_whole(ex, wire, req, plan, usage, created, finish, fault)
        outs = wire.stream_events(req, plan, usage, ex.rid, created, finish)
        return await self._respond_stream(ex, wire, plan, outs, usage, fault, at)

    async def _respond_whole(
        self,
        ex: _Exchange,
        wire: WireFormat,
        req: SimRequest,
        plan: Plan,
        usage: Usage,
        created: int,
        finish: str,
        fault: str | None,
    ) -> web.StreamResponse:
        due = ex.start + plan.end_ns
        await ex.sleep_until(due)
        if fault == "drop":
            return self._abort(ex)
        if fault == "sse_error":
            # No stream to put an error event in: the non-streamed equivalent is a late 500.
            return await ex.send_json(500, wire.error_body(500, message_for(500)))
        ex.usage = usage
        resp = await ex.send_json(200, wire.json_body(req, plan, usage, ex.rid, created, finish))
        kind = "tool" if req.tool is not None else "content"
        ex.events.append(TruthEvent(ex.t_done or 0, kind, usage.output_tokens, due))
        return resp

    def _abort(self, ex: _Exchange) -> web.StreamResponse:
        transport = ex.request.transport
        if transport is not None:
            transport.abort()
        ex.t_done = time.perf_counter_ns()
        ex.status = 0
        return web.StreamResponse()

    async def _respond_stream(
        self,
        ex: _Exchange,
        wire: WireFormat,
        plan: Plan,
        outs: list[Out],
        usage: Usage,
        fault: str | None,
        at: int,
    ) -> web.StreamResponse:
        await ex.sleep_until(ex.start + plan.headers_ns)
        resp = web.StreamResponse(
            status=200,
            headers={
                **ex.headers,
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
            },
        )
        resp.enable_chunked_encoding()
        await resp.prepare(ex.request)
        ex.t_headers = time.perf_counter_ns()
        writer = ex.request.writer
        try:
            for seq, out in enumerate(outs):
                due = ex.start + out.due_ns
                if out.carries(at) and fault in ("sse_error", "drop"):
                    await ex.sleep_until(due)
                    if fault == "drop":
                        return self._abort(ex)
                    began = time.perf_counter_ns()
                    await resp.write(wire.stream_error(message_for(529), seq))
                    await writer.drain()
                    ex.events.append(TruthEvent(time.perf_counter_ns(), "error", 0, due, began))
                    break
                await ex.sleep_until(due)
                began = time.perf_counter_ns()
                await resp.write(out.payload)
                await writer.drain()
                sent = time.perf_counter_ns()
                ex.events.append(TruthEvent(sent, out.kind, out.tokens, due, began))
            else:
                ex.usage = usage
            await resp.write_eof()
        except ConnectionError:
            # The client went away mid-stream (closed early, timed out): truth keeps what was sent.
            ex.status = 499
        ex.t_done = time.perf_counter_ns()
        return resp


class _SwitchInterval:
    """Reference-counted lowering of sys.setswitchinterval while any in-process server runs."""

    _lock = threading.Lock()
    _users = 0
    _saved = 0.005

    @classmethod
    def acquire(cls) -> None:
        with cls._lock:
            if cls._users == 0:
                cls._saved = sys.getswitchinterval()
                sys.setswitchinterval(min(cls._saved, _SWITCH_INTERVAL_S))
            cls._users += 1

    @classmethod
    def release(cls) -> None:
        with cls._lock:
            cls._users -= 1
            if cls._users == 0:
                sys.setswitchinterval(cls._saved)


class SimServer:
    """The simulated LLM endpoint, served from a background thread with its own event loop.

    ``SimServer(model).start()`` returns once the socket is listening; ``stop()`` (or leaving the
    ``with`` block) shuts it down. Port 0 picks a free port; read it back from `port`/`base_url`.
    """

    def __init__(
        self, model: LatencyModel | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self._engine = _Engine(model if model is not None else LatencyModel())
        self.host = host
        self._requested_port = port
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> SimServer:
        if self._thread is not None:
            raise RuntimeError("SimServer is already running")
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._startup())
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._loop = loop
        _SwitchInterval.acquire()
        self._thread = threading.Thread(target=run, name="pytest-latency-sim", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = self._loop = None
            _SwitchInterval.release()
            raise failure[0]
        return self

    async def _startup(self) -> None:
        runner = web.AppRunner(
            _App(self._engine).app, access_log=None, shutdown_timeout=0.5, handle_signals=False
        )
        await runner.setup()
        site = web.TCPSite(
            runner, self.host, self._requested_port, backlog=_BACKLOG, reuse_address=True
        )
        await site.start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])

    def stop(self) -> None:
        """Stop serving and join the thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._runner is not None:
            fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop)
            try:
                fut.result(timeout=10)
            finally:
                self._runner = None
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._loop = self._thread = None
        self._port = None
        _SwitchInterval.release()

    def __enter__(self) -> SimServer:
        return self.start() if self._thread is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- addresses ----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("SimServer is not running; call start() first")
        return self._port

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url

    @property
    def gemini_base_url(self) -> str:
        """For google-genai's `HttpOptions(base_url=...)`: it adds `/v1beta/models/...`."""
        return self.base_url

    # --- model, truth, cache ------------------------------------------------------------------
    @property
    def model(self) -> LatencyModel:
        return self._engine.model

    def set_model(self, model: LatencyModel) -> None:
        """Use `model` for requests received from now on (thread-safe)."""
        self._engine.model = model

    def truth(self, wait_s: float = 1.0) -> list[TruthRecord]:
        """Every request answered so far (oldest first), including errors and faults.

        Waits up to `wait_s` for requests still in flight to be recorded: a client can finish
        reading a response a moment before the server thread appends its record.
        """
        self._engine.wait_settled(wait_s)
        return self._engine.truth.snapshot()

    def clear_truth(self, wait_s: float = 1.0) -> None:
        """Forget every record so far, after waiting (like `truth`) for in-flight ones."""
        self._engine.wait_settled(wait_s)
        self._engine.truth.clear()

    def reset_cache(self) -> None:
        self._engine.cache.clear()

    @property
    def active_requests(self) -> int:
        return self._engine.active


def serve(model: LatencyModel, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve in the foreground until Ctrl-C (or SIGTERM), printing the URLs to use."""
    # A dedicated server process: move everything allocated so far out of the collector's reach
    # and collect less often, so a full collection cannot stall every open stream at once.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    server = SimServer(model, host=host, port=port).start()
    stop = threading.Event()
    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"pytest-latency sim listening on {server.base_url}", flush=True)
    print(f"  OpenAI:    base_url={server.openai_base_url}", flush=True)
    print(f"  Anthropic: base_url={server.anthropic_base_url}", flush=True)
    print(f"  Gemini:    base_url={server.gemini_base_url}", flush=True)
    print(f"  truth:     {server.base_url}/_sim/truth   (Ctrl-C to stop)", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)
        print("pytest-latency sim stopped", flush=True)
