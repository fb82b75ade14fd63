"""Reading and writing result files, and the one atomic writer every output file goes through.

Owns strict JSON (no NaN or Infinity, which other parsers reject), `write_atomic` (a reader, or a
run that crashed mid-write, never sees half a file; the file gets the permissions any file
written with the user's umask would), and `load_result` (read, parse and validate against the
whole schema, `_validate`; any problem is one `ResultError` naming the file). The plugin's HTML
and Markdown outputs and the CLI write through `write_atomic` too. May import its siblings
`_schema` and `_validate`; never pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_latency.results._schema import ResultError, ResultFile
from pytest_latency.results._validate import validate


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def dumps(result: Mapping[str, Any]) -> str:
    """Strict JSON (no NaN or Infinity, which other parsers reject)."""
    return json.dumps(result, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to `path` atomically: through a temporary file beside it, then a rename."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    try:
        # mkstemp makes the file private (0600); the outputs are ordinary artifacts, readable as
        # any file written with the user's umask would be.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_result(path: str | os.PathLike[str], result: Mapping[str, Any]) -> None:
    """Write a result file atomically, as strict JSON."""
    write_atomic(path, dumps(result))


def load_result(path: str | os.PathLike[str]) -> ResultFile:
    """Read and validate a result file; any problem is one `ResultError` naming the file."""
    name = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultError(f"{name}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultError(f"{name}: cannot read: {exc}") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ResultError(f"{name}: not valid JSON: {exc}") from None
    except RecursionError:  # the parser's own depth limit, long before validate's MAX_DEPTH
        raise ResultError(f"{name}: not valid JSON: nested too deeply") from None
    return validate(data, name)


__all__ = ["dumps", "load_result", "write_atomic", "write_result"]
