"""Reading and writing result files, and the one writer every output file goes through.

Owns strict JSON (no NaN or Infinity, which other parsers reject), `write_atomic` (a reader, or a
run killed mid-write, never sees half a file; the data and then the rename are fsynced, so a
machine that crashes after the run exited keeps the new file or the old one, never an empty one;
the file gets the permissions any file written with the user's umask would; a symlink's target is
replaced and the link kept; a device, FIFO or socket is written in place and `/dev/stdout`
through the descriptor, as a shell redirect would; any failure is one `WriteError` naming the
path, and leaves no temporary file), and `load_result` (read, parse and validate against the
whole schema, `_validate`; any problem is one `ResultError` naming the file). The plugin's HTML
and Markdown outputs and the CLI write through `write_atomic` too. May import its siblings
`_schema` and `_validate`; never pytest.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import sys
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


class WriteError(Exception):
    """An output file that could not be written: its path and the reason, as one line."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: cannot write: {reason}")
        self.path = path
        self.reason = reason


# Paths that name one of this process's file descriptors. Written through a duplicate of the
# descriptor: it shares the offset with the process's own output (reopening `/dev/stdout` when
# stdout is redirected to a file would truncate it, or write over what follows).
_FD_PATH = re.compile(r"/dev/(?:fd/(?P<fd>\d+)|(?P<std>stdout|stderr))|/proc/self/fd/(?P<pfd>\d+)")
_STD_FDS = {"stdout": 1, "stderr": 2}


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to `path`: a regular file atomically (a temporary file beside it, then a
    rename; through a symlink, beside its target); a device, FIFO or socket in place;
    `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` through that descriptor. Raises `WriteError`."""
    name = os.fspath(path)
    try:
        fd = _descriptor(name)
        if fd is not None:
            _flush_std(fd)
            with os.fdopen(os.dup(fd), "w", encoding="utf-8") as handle:
                handle.write(text)
        elif _special(name):
            with open(name, "w", encoding="utf-8") as handle:
                handle.write(text)
        else:
            _replace(Path(os.path.realpath(name)), text)
    except OSError as exc:
        raise WriteError(name, exc.strerror or str(exc)) from None


def _descriptor(name: str) -> int | None:
    """The file descriptor `name` (or a symlink it leads through) names, if any."""
    for hop in _link_chain(name):
        match = _FD_PATH.fullmatch(hop)
        if match is not None:
            std = match["std"]
            return _STD_FDS[std] if std else int(match["fd"] or match["pfd"])
    return None


def _flush_std(fd: int) -> None:
    # What the process printed before this file must come before it.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            if stream.fileno() == fd:
                stream.flush()


def _special(name: str) -> bool:
    try:
        mode = os.stat(name).st_mode  # follows symlinks: a link to /dev/null is /dev/null
    except FileNotFoundError:
        return False  # a new file, or a dangling link: created where it points
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _link_chain(name: str) -> list[str]:
    """The absolute path and each path its symlinks lead through, in order."""
    chain = [os.path.abspath(name)]
    for _ in range(40):  # the kernel's own limit on links followed (ELOOP)
        try:
            link = os.readlink(chain[-1])
        except OSError:
            break
        chain.append(os.path.abspath(os.path.join(os.path.dirname(chain[-1]), link)))
    return chain


def _replace(target: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        # mkstemp makes the file private (0600); the outputs are ordinary artifacts, readable as
        # any file written with the user's umask would be.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        # A full disk or RLIMIT_FSIZE raises in the write or the flush, before the rename, so
        # the old file stays whole. fsync before the rename: after a crash (power, kernel) the
        # name must never point at a file whose data never reached the disk, a zero-length file
        # where the old one was.
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(target.parent)


# What a directory that cannot be synced answers (some filesystems; Windows cannot open one).
_NO_DIRECTORY_SYNC = {errno.EINVAL, errno.ENOTSUP, errno.EBADF, errno.EACCES, errno.EPERM}


def _fsync_directory(directory: Path) -> None:
    """The rename itself made durable: the directory's entry now names the new file."""
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        if exc.errno in _NO_DIRECTORY_SYNC:
            return
        raise
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _NO_DIRECTORY_SYNC:
            raise
    finally:
        os.close(fd)


def write_result(path: str | os.PathLike[str], result: Mapping[str, Any]) -> None:
    """Write a result file atomically, as strict JSON (`write_atomic`)."""
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


__all__ = ["WriteError", "dumps", "load_result", "write_atomic", "write_result"]
