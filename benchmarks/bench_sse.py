"""One huge SSE line: the parser before issue #15 (re-join and re-scan the open line on every
read) against the linear one, side by side in one run, plus what `call_metrics` takes for the
whole call now.

    PYTHONPATH=src python benchmarks/bench_sse.py          # 5 / 10 / 30 MB, 64 KiB reads
    PYTHONPATH=src python benchmarks/bench_sse.py --quick  # 1 / 2 MB
    PYTHONPATH=src python benchmarks/bench_sse.py --read-size 4096 --sizes 1 2

The old parser is copied here (its `feed` and `finish`) so the comparison needs no checkout.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import UTC, datetime

from _common import load

from pytest_latency.metrics import call_metrics
from pytest_latency.metrics._sse import SseEvent, SseParser
from pytest_latency.wire import WireRecord

_EOL = re.compile(rb"\r\n|\r|\n")


class QuadraticParser(SseParser):
    """`SseParser.feed`/`finish` as they were at dc23f70: the open line is joined to each new
    chunk and the whole buffer scanned again."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        super().__init__()
        self._buf = b""

    def feed(self, chunk: bytes, t_ns: int, read: int) -> list[SseEvent]:
        out: list[SseEvent] = []
        if not chunk:
            return out
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf = self._buf + chunk if self._buf else chunk
        pos = 0
        for match in _EOL.finditer(buf):
            self._line(buf[pos : match.start()], t_ns, read, out)
            pos = match.end()
        if pos and buf[pos - 1 : pos] == b"\r":
            self._skip_lf = True
        self._buf = buf[pos:]
        return out

    def finish(self, t_ns: int, read: int) -> list[SseEvent]:
        out: list[SseEvent] = []
        if self._buf:
            self._line(self._buf, t_ns, read, out)
            self._buf = b""
        self._line(b"", t_ns, read, out)
        return out


def body(size: int) -> bytes:
    return (
        b'data: {"choices":[{"index":0,"delta":{"content":"'
        + b"x" * size
        + b'"}}]}\n\ndata: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}\n\n'
        + b"data: [DONE]\n\n"
    )


def parse(parser: SseParser, reads: list[bytes]) -> float:
    start = time.perf_counter()
    out: list[SseEvent] = []
    for index, data in enumerate(reads):
        out.extend(parser.feed(data, index, index))
    out.extend(parser.finish(len(reads) - 1, len(reads) - 1))
    assert len(out) == 3
    return time.perf_counter() - start


def metrics_time(data: bytes, reads: list[bytes]) -> float:
    record = WireRecord(
        "POST",
        "http://h/v1/chat/completions",
        b'{"model":"m","stream":true}',
        0,
        t_headers_ns=1,
        status=200,
        content_type="text/event-stream",
        reads=[(i, i, r) for i, r in enumerate(reads)],
        t_eof_ns=len(reads) + 1,
    )
    start = time.perf_counter()
    m = call_metrics(record)
    assert m.content_events == 1 and not m.capped
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=float, nargs="+", default=[5, 10, 30], help="MB")
    parser.add_argument("--read-size", type=int, default=65_536)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = [1.0, 2.0] if args.quick else args.sizes
    print(f"# {' '.join(sys.argv)}  {datetime.now(UTC):%Y-%m-%d %H:%M} UTC  load {load()}")
    print(f"# one data line, {args.read_size:,}-byte reads; new: best of 3")
    print("| line | old parser s | new parser s | old/new | call_metrics s (new) |")
    print("|---|---|---|---|---|")
    for mb in sizes:
        data = body(int(mb * 1_000_000))
        reads = [data[i : i + args.read_size] for i in range(0, len(data), args.read_size)]
        new = min(parse(SseParser(), reads) for _ in range(3))
        old = parse(QuadraticParser(), reads)
        whole = metrics_time(data, reads)
        print(f"| {mb:g} MB | {old:.2f} | {new:.4f} | {old / new:,.0f} | {whole:.2f} |", flush=True)
    print(f"# load after: {load()}")


if __name__ == "__main__":
    main()
