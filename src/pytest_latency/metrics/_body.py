"""Content-encoding decoding that keeps each decoded piece tied to the read that produced it.

Owns the step between the raw reads of a `WireRecord` and the parsers: identity passes through,
gzip and deflate are inflated incrementally (one `zlib.decompressobj` per layer, fed chunk by
chunk) so every decoded piece keeps its read's arrival stamp. Encodings we cannot decode with the
stdlib (br, zstd, anything unknown) make the body *opaque*: its content is never guessed at.
Stdlib only; imports nothing from the package.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field


@dataclass(slots=True)
class DecodedBody:
    # (read index, arrival_ns, decoded bytes); pieces may be empty when zlib held data back.
    pieces: list[tuple[int, int, bytes]] = field(default_factory=list)
    opaque: str | None = None  # why the content could not be read, e.g. "content-encoding br"

    @property
    def data(self) -> bytes:
        return b"".join(piece for _, _, piece in self.pieces)


class _Inflater:
    """One gzip or deflate layer, fed incrementally."""

    __slots__ = ("_decoder", "_deflate", "_prefix", "_wbits")

    def __init__(self, encoding: str) -> None:
        self._deflate = encoding == "deflate"
        # gzip: 16 + MAX_WBITS reads the gzip header. deflate per RFC 9110 is zlib-wrapped, but
        # some servers send raw deflate: try the zlib wrapper first and fall back (as httpx does).
        self._wbits = zlib.MAX_WBITS if self._deflate else 16 + zlib.MAX_WBITS
        self._decoder = zlib.decompressobj(self._wbits)
        self._prefix: bytes | None = b"" if self._deflate else None

    def feed(self, data: bytes) -> bytes:
        if self._prefix is not None:
            prefix = self._prefix = self._prefix + data
            try:
                out = self._decoder.decompress(data)
            except zlib.error:
                self._prefix = None
                self._wbits = -zlib.MAX_WBITS
                self._decoder = zlib.decompressobj(self._wbits)
                return self._inflate(prefix)
            if len(self._prefix) >= 2:
                self._prefix = None  # the zlib header was accepted
            return out + self._members()
        return self._inflate(data)

    def _inflate(self, data: bytes) -> bytes:
        return self._decoder.decompress(data) + self._members()

    def _members(self) -> bytes:
        # A gzip body may be several concatenated members (RFC 1952 §2.2).
        out = b""
        while self._decoder.eof and self._decoder.unused_data:
            rest = self._decoder.unused_data
            self._decoder = zlib.decompressobj(self._wbits)
            out += self._decoder.decompress(rest)
        return out

    def flush(self) -> bytes:
        return self._decoder.flush()


def decode_reads(reads: list[tuple[int, int, bytes]], content_encoding: str) -> DecodedBody:
    """Decode the reads' bytes per `content_encoding` (a comma list, applied in order)."""
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
    try:
        for index, (_, arrived, data) in enumerate(reads):
            for layer in layers:
                data = layer.feed(data)
            body.pieces.append((index, arrived, data))
        if reads:
            tail = b""
            for layer in layers:
                tail = layer.feed(tail) + layer.flush()
            if tail:
                body.pieces.append((len(reads) - 1, reads[-1][1], tail))
    except zlib.error as exc:
        return DecodedBody(opaque=f"{content_encoding} decode failed: {exc}")
    return body
