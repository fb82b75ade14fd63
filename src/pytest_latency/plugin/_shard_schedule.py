"""The pytest-xdist scheduler of a run with split tests: each shard on a worker of its own.

Owns `ShardScheduler`, the plugin object (registered on the controller of a `--dist load` run)
whose `pytest_xdist_make_scheduler` returns `ShardFirst`: pytest-xdist's own load scheduling,
except that the first tests each worker is sent are the split tests' shards, shard k of every
split test to worker k, so the shards of a test reach their meeting at about the same time
(`_split.meet`) and none waits behind another shard of its own test. The tests split into the
most shards go first (in collection order among equals): then every worker a test's shards run
on has run the same tests before them, where a sweep's level of 2 shards ahead of its level of
4 would keep workers 3 and 4 waiting at the meeting for as long as that level ran. The rest of
the collection is then sent as pytest-xdist sends it. A run with no split test is
scheduled exactly as pytest-xdist would. It also names the run's meeting place for the workers
(`_split.MEETING_INPUT` in each one's `workerinput`) and removes it at the end. Imports xdist
(only this module, only on a controller of a distributed run); may import `_split`.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Generator
from typing import Any

import pytest
from xdist.scheduler import LoadScheduling  # type: ignore[import-untyped]

from pytest_latency.plugin import _split


class ShardFirst(LoadScheduling):  # type: ignore[misc]
    # LoadScheduling's state, as this class reads it (pytest-xdist ships no type hints).
    collection: list[str] | None
    maxschedchunk: int | None
    pending: list[int]
    node2pending: dict[Any, list[int]]
    node2collection: dict[Any, list[str]]

    def schedule(self) -> None:
        if self.collection is not None or not self.collection_is_completed:
            super().schedule()
            return
        collection = next(iter(self.node2collection.values()), [])
        first = {
            i: shard
            for i, nodeid in enumerate(collection)
            if (shard := _split.shard_in(nodeid)) is not None
        }
        if not first or not self._check_nodes_have_same_collection():
            super().schedule()
            return
        self.collection = list(collection)
        self.pending[:] = [i for i in range(len(collection)) if i not in first]
        if self.maxschedchunk is None:
            self.maxschedchunk = len(collection)
        nodes = self.nodes
        # sorted() is stable: among tests of as many shards, collection order.
        for index in sorted(first, key=lambda i: -first[i].count):
            node = nodes[first[index].index % len(nodes)]
            self.node2pending[node].append(index)
            node.send_runtest_some([index])
        # The rest as pytest-xdist's load scheduling sends a collection: a first chunk to each
        # worker (a worker runs a test once it knows the next one, or is told to shut down).
        if self.pending:
            chunk = max(2, min(len(collection) // len(nodes) // 4, self.maxschedchunk))
            for node in nodes:
                self._send_tests(node, chunk)
        if not self.pending:
            for node in nodes:
                node.shutdown()


class ShardScheduler:
    """Registered on the controller of a `--dist load` run: its scheduler is `ShardFirst`
    where it would have been pytest-xdist's own `LoadScheduling` (a conftest's or another
    plugin's scheduler stays theirs), and each worker is told the run's meeting place."""

    def __init__(self) -> None:
        # New for every run: a shard never meets another run's (a reused --testrunuid) or a
        # stopped run's files.
        self.meeting = uuid.uuid4().hex

    @pytest.hookimpl(wrapper=True)
    def pytest_xdist_make_scheduler(
        self, config: pytest.Config, log: Any
    ) -> Generator[None, object, object]:
        scheduler = yield
        if type(scheduler) is LoadScheduling:
            return ShardFirst(config, log)
        return scheduler

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[_split.MEETING_INPUT] = self.meeting

    def pytest_unconfigure(self) -> None:
        # Every worker is done with it by now.
        shutil.rmtree(_split.meeting_folder(self.meeting), ignore_errors=True)


__all__ = ["ShardFirst", "ShardScheduler"]
