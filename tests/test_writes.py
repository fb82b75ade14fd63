"""Writing output files (`results.write_atomic`, the one writer of the plugin and the CLI): a
regular file is replaced atomically, a symlink's target is replaced and the link kept, a device
or FIFO is written in place, `/dev/stdout` through the descriptor; a failure (a full disk, a file
size limit) names the path, keeps the old file whole and leaves no temporary file."""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from latency_data import build, sample_tests

from pytest_latency.results import WriteError, write_atomic, write_result


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def _limit_file_size(limit: int) -> None:
    # In the child only: RLIMIT_FSIZE makes a write past `limit` bytes fail with EFBIG (Python
    # ignores SIGXFSZ), as a full disk makes it fail with ENOSPC.
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_regular_file_is_replaced_and_nothing_is_left_beside_it(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    write_atomic(target, "new")
    assert target.read_text() == "new" and _leftovers(tmp_path) == []


def test_a_symlink_is_followed_and_kept(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "r.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new"
    assert _leftovers(tmp_path) == [] and _leftovers(tmp_path / "real") == []
    # A dangling link: its target is created, the link stays a link.
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "real" / "later.json")
    write_atomic(dangling, "made")
    assert dangling.is_symlink() and (tmp_path / "real" / "later.json").read_text() == "made"


def test_a_link_to_dev_null_and_a_device_node_are_written_in_place(tmp_path: Path) -> None:
    link = tmp_path / "null.json"
    link.symlink_to("/dev/null")
    write_atomic(link, "discarded")
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    node = tmp_path / "null-node"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    write_atomic(node, "discarded")
    assert stat.S_ISCHR(node.lstat().st_mode) and _leftovers(tmp_path) == []


def test_a_fifo_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    write_atomic(fifo, "through the pipe")
    reader.join(timeout=10)
    assert received == ["through the pipe"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and _leftovers(tmp_path) == []


def test_a_full_device_is_a_write_error_naming_the_path(tmp_path: Path) -> None:
    link = tmp_path / "full.json"  # a link, so a regression replaces the link, not /dev/full
    link.symlink_to("/dev/full")
    with pytest.raises(WriteError) as info:
        write_result(link, build(sample_tests()))
    assert str(info.value) == f"{link}: cannot write: No space left on device"
    assert link.is_symlink()


def test_dev_stdout_redirected_to_a_file_is_written_through_the_descriptor(
    tmp_path: Path,
) -> None:
    """Reopening /dev/stdout would truncate the redirect's file or write over what follows."""
    link = tmp_path / "stdout.json"
    link.symlink_to("/dev/stdout")
    script = (
        "import sys\n"
        "from pytest_latency.results import write_atomic\n"
        "print('before')\n"
        f"write_atomic({str(link)!r}, 'THE FILE\\n')\n"
        "write_atomic('/dev/fd/1', 'AGAIN\\n')\n"
        "print('after')\n"
    )
    out = tmp_path / "out.txt"
    with out.open("w") as handle:
        subprocess.run([sys.executable, "-c", script], stdout=handle, check=True, timeout=60)
    assert out.read_text() == "before\nTHE FILE\nAGAIN\nafter\n"
    assert link.is_symlink()


def test_a_file_size_limit_keeps_the_old_file_and_leaves_no_temporary_file(
    tmp_path: Path,
) -> None:
    target = tmp_path / "r.html"
    target.write_text("the old report")
    script = (
        "import sys\n"
        "from pytest_latency.results import WriteError, write_atomic\n"
        "try:\n"
        f"    write_atomic({str(target)!r}, 'x' * 50_000)\n"
        "except WriteError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(7)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        preexec_fn=lambda: _limit_file_size(20_000),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 7, done.stderr
    assert done.stdout == f"{target}: cannot write: File too large\n"
    assert target.read_text() == "the old report" and _leftovers(tmp_path) == []


def test_the_data_is_synced_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine that crashes after the run exited must not find an empty file under the name:
    the new file's data reach the disk before the rename points the name at it, and the rename
    itself is made durable by syncing the directory."""
    target = tmp_path / "r.json"
    target.write_text("old")
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        what = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else str(fd)
        events.append(("fsync", what))
        real_fsync(fd)

    def replace(src: str, dst: str | os.PathLike[str]) -> None:
        events.append(("replace", os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert [kind for kind, _ in events] == ["fsync", "replace", "fsync"], events
    if os.path.exists("/proc/self/fd"):
        assert events[0][1].endswith(".tmp") and Path(events[0][1]).parent == tmp_path
        assert events[2][1] == str(tmp_path)


def test_a_failed_sync_is_a_write_error_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")

    def fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(WriteError, match=r"r\.json: cannot write: Input/output error"):
        write_atomic(target, "new")
    assert target.read_text() == "old" and _leftovers(tmp_path) == []
