"""SIGTERM and SIGINT (what cron, systemd, Airflow and Ctrl-C send): the first asks a run to
stop between batches, the second stops it at once. Either is safe: a batch lands in one Delta
commit or not at all, and the next run goes on from the last one."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_log = logging.getLogger(__name__)


class Stopper:
    """SIGTERM/SIGINT handling: the first asks for a stop between batches, the second raises
    KeyboardInterrupt at once."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal_name = ""
        self.at_once = False  # the second signal came

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    @contextmanager
    def installed(self) -> Iterator["Stopper"]:
        """Handle the signals for the length of the block, then as before (a one-shot run in a
        process that goes on, a test). Outside the main thread no handler can be set: nothing changes."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        self.install()
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.event.is_set():
            self.at_once = True  # (Py4J may turn the interrupt into an error of its own: the follower checks this)
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        _log.info("%s received: stopping after the batch in flight (again: stop at once)", self.signal_name)
        self.event.set()

    def __call__(self) -> bool:
        return self.event.is_set()

    def raise_if_at_once(self) -> None:
        """The stop at once, even where the interrupt surfaced as another error: a JVM call
        interrupted in mid-answer fails the next one with Py4JNetworkError."""
        if self.at_once:
            raise KeyboardInterrupt

    def wait(self, seconds: float) -> None:
        self.event.wait(max(seconds, 0.0))
