"""SIGTERM as an interrupt (`plugin._signals`): installed only over the default handler and only
on the main thread, raising a KeyboardInterrupt once, and put back. The end-to-end behaviour, a
real pytest process terminated mid-test, is in test_plugin_outputs."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from pytest_latency.plugin._signals import Terminated, interrupt_on_sigterm


@pytest.fixture
def default_sigterm() -> Iterator[None]:
    # This very session may have replaced it (the plugin is active here too).
    outer = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, outer)


@pytest.mark.usefixtures("default_sigterm")
def test_sigterm_raises_a_keyboard_interrupt_once_then_terminates_as_before() -> None:
    restore = interrupt_on_sigterm()
    assert restore is not None
    with pytest.raises(KeyboardInterrupt) as info:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs in the main thread, between two bytecodes
    assert isinstance(info.value, Terminated) and str(info.value) == "received SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    restore()  # harmless once the handler is gone
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.usefixtures("default_sigterm")
def test_restore_puts_the_default_back() -> None:
    restore = interrupt_on_sigterm()
    assert restore is not None and signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    restore()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.usefixtures("default_sigterm")
def test_a_handler_someone_else_installed_is_left_alone() -> None:
    def theirs(signum: int, frame: object) -> None:
        pass

    signal.signal(signal.SIGTERM, theirs)
    assert interrupt_on_sigterm() is None
    assert signal.getsignal(signal.SIGTERM) is theirs
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    assert interrupt_on_sigterm() is None
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


@pytest.mark.usefixtures("default_sigterm")
def test_nothing_is_installed_off_the_main_thread() -> None:
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(interrupt_on_sigterm()))
    worker.start()
    worker.join()
    assert results == [None] and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
