"""Concurrency: calls from many threads and many tasks in one test are all recorded and all
attributed to that test, and none leak into the next one."""

from __future__ import annotations

import anthropic  # noqa: F401  (kept loaded across pytester's in-process runs: see test_plugin_sim)
import openai  # noqa: F401
import pytest

import pytest_latency.sim  # noqa: F401

pytest_plugins = ["pytester"]


def test_threads_and_tasks_lose_no_record_and_attribute_each_to_its_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_inner_concurrency="""
        import asyncio
        import threading
        import pytest

        PROMPT = [{"role": "user", "content": "q"}]

        def test_a_threads(openai_client, latency):
            def worker():
                for _ in range(50):
                    openai_client.chat.completions.create(model="m", messages=PROMPT)
            threads = [threading.Thread(target=worker) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(latency.calls) == 400
            assert all(c.final.error is None for c in latency.calls)

        @pytest.mark.asyncio
        async def test_b_tasks(async_openai_client, latency):
            async def one(i):
                stream = await async_openai_client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"q{i}"}], stream=True)
                async for _ in stream:
                    pass
            await asyncio.gather(*(one(i) for i in range(500)))
            assert len(latency.calls) == 500
            assert sum(c.final.error is None for c in latency.calls) == 500

        def test_c_next_test_starts_empty(openai_client, latency):
            openai_client.chat.completions.create(model="m", messages=PROMPT)
            assert len(latency.calls) == 1
        """
    )
    result = pytester.runpytest(
        "--latency-sim=instant", "-p", "no:randomly", "-W", "error::ResourceWarning"
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_a_threads * 400 *0*",
            "*test_b_tasks * 500 *0*",
            "*test_c_next_test_starts_empty * 1 *0*",
        ]
    )
