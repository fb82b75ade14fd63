"""Content-encoding decoding that keeps each decoded piece tied to the read that produced it.

Owns the step between the raw reads of a `WireRecord` and the parsers: identity passes through,
gzip and deflate are inflated incrementally (one `zlib.decompressobj` per layer, fed chunk by
chunk) so every decoded piece keeps its read's arrival stamp. Encodings we cannot decode with the
stdlib (br, zstd, anything unknown) make the body *opaque*: its content is never guessed at.
Inflating stops at `wire.DECODED_LIMIT` decoded bytes a call (a gzip bomb): the body is then
`capped`, and what was left undecoded is counted. Stdlib and `pytest_latency.wire` only.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from pytest_latency.wire import DECODED_LIMIT


@dataclass(slots=True)
class DecodedBody:
    # (read index, arrival_ns, decoded bytes); pieces may be empty when zlib held data back.
    pieces: list[tuple[int, int, bytes]] = field(default_factory=list)
    opaque: str | None = None  # why the content could not be read, e.g. "content-encoding br"
    # Inflating stopped at the decoded limit: how many received bytes were left undecoded (the
    # rest of the read that reached it, as the outermost layer saw it, and every later read).
    capped: bool = False
    undecoded_bytes: int = 0

    @property
    def data(self) -> bytes:
        return b"".join(piece for _, _, piece in self.pieces)

    def head(self, size: int) -> bytes:
        """The first `size` decoded bytes, joining only the pieces they come from."""
        out: list[bytes] = []
        have = 0
        for _, _, piece in self.pieces:
            if have >= size:
                break
            out.append(piece)
            have += len(piece)
        return b"".join(out)[:size]


class _Inflater:
    """One gzip or deflate layer, fed incrementally, never producing more than it is allowed."""

    __slots__ = ("_decoder", "_deflate", "_prefix", "_wbits", "left")

    def __init__(self, encoding: str) -> None:
        self._deflate = encoding == "deflate"
        # gzip: 16 + MAX_WBITS reads the gzip header. deflate per RFC 9110 is zlib-wrapped, but
        # some servers send raw deflate: try the zlib wrapper first and fall back (as httpx does).
        self._wbits = zlib.MAX_WBITS if self._deflate else 16 + zlib.MAX_WBITS
        self._decoder = zlib.decompressobj(self._wbits)
        self._prefix: bytes | None = b"" if self._deflate else None
        self.left = 0  # input bytes not inflated because the output reached its limit

    def feed(self, data: bytes, limit: int) -> bytes:
        """Inflate `data` to at most `limit` bytes; what did not fit is counted in `left`."""
        if self._prefix is not None:
            prefix = self._prefix = self._prefix + data
            try:
                out = self._decompress(data, limit)
            except zlib.error:
                self._prefix = None
                self._wbits = -zlib.MAX_WBITS
                self._decoder = zlib.decompressobj(self._wbits)
                self.left = 0
                return self._inflate(prefix, limit)
            if len(self._prefix) >= 2:
                self._prefix = None  # the zlib header was accepted
            return self._then_members(out, limit)
        return self._inflate(data, limit)

    def _decompress(self, data: bytes, limit: int) -> bytes:
        if limit <= 0:  # zlib reads a max_length of 0 as "no limit"
            self.left += len(data)
            return b""
        out = self._decoder.decompress(data, limit)
        self.left += len(self._decoder.unconsumed_tail)
        return out

    def _inflate(self, data: bytes, limit: int) -> bytes:
        return self._then_members(self._decompress(data, limit), limit)

    def _then_members(self, out: bytes, limit: int) -> bytes:
        more = self._members(limit - len(out))
        return out + more if more else out  # a bomb's 64 MiB piece is not copied for nothing

    def _members(self, limit: int) -> bytes:
        # A gzip body may be several concatenated members (RFC 1952 §2.2).
        out = b""
        while self._decoder.eof and self._decoder.unused_data:
            rest = self._decoder.unused_data
            if limit - len(out) <= 0:
                self.left += len(rest)
                break
            self._decoder = zlib.decompressobj(self._wbits)
            out += self._decompress(rest, limit - len(out))
        return out

    def flush(self, limit: int) -> bytes:
        # flush() would inflate an unconsumed tail whole (its argument is a buffer size, not a
        # limit): with a tail left, or no room, nothing more is inflated.
        if limit <= 0 or self.left:
            return b""
        return self._decoder.flush()


def decode_reads(
    reads: list[tuple[int, int, bytes]], content_encoding: str, limit: int = DECODED_LIMIT
) -> DecodedBody:
    """Decode the reads' bytes per `content_encoding` (a comma list, applied in order), inflating
    to at most `limit` bytes (then `capped`; identity bodies are bounded by capture's own limit)."""
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    unknown = [c for c in codings if c not in ("gzip", "x-gzip", "deflate")]
    if unknown:
        return DecodedBody(opaque=f"content-encoding {', '.join(unknown)}")
    if not codings:
        return DecodedBody(pieces=[(i, t, data) for i, (_, t, data) in enumerate(reads)])
    # The last coding applied by the server is the first to undo.
    layers = [_Inflater("deflate" if c == "deflate" else "gzip") for c in reversed(codings)]
    body = DecodedBody()
    room = limit
    try:
        for index, (_, arrived, data) in enumerate(reads):
            for layer in layers:
                data = layer.feed(data, room)
            room -= len(data)
            body.pieces.append((index, arrived, data))
            if any(layer.left for layer in layers):
                # The decoded limit is reached: what is left is neither inflated nor kept.
                body.capped = True
                body.undecoded_bytes = layers[0].left + sum(len(r[2]) for r in reads[index + 1 :])
                return body
        if reads:
            tail = b""
            for layer in layers:
                tail = layer.feed(tail, room) + layer.flush(room - len(tail))
            if tail:
                body.pieces.append((len(reads) - 1, reads[-1][1], tail))
            if any(layer.left for layer in layers):
                body.capped = True
    except zlib.error as exc:
        return DecodedBody(opaque=f"{content_encoding} decode failed: {exc}")
    return body
