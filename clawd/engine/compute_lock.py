"""The one compute lock on the loaded weights: llama-cpp-python objects are not thread-safe, and
the serving context (engine.py) and the judge's background context (background.py) share them."""

from __future__ import annotations

import threading
from contextlib import contextmanager


class PriorityLock:
    """A mutex where user requests overtake background work.

    Background holders call `should_yield()` between tokens and release when it is true; a user
    waiter then gets the lock within one decoding step. Users are served in arrival order.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held = False
        self._users_waiting = 0
        # how often each kind of holder took the lock: lets a test assert that a refused request
        # never reached the engine, without timing anything
        self.taken = {"user": 0, "background": 0}

    @contextmanager
    def user(self):
        with self._cond:
            self._users_waiting += 1
            while self._held:
                self._cond.wait()
            self._users_waiting -= 1
            self._held = True
            self.taken["user"] += 1
        try:
            yield
        finally:
            self._release()

    @contextmanager
    def background(self):
        with self._cond:
            while self._held or self._users_waiting:
                self._cond.wait()
            self._held = True
            self.taken["background"] += 1
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def should_yield(self) -> bool:
        return self._users_waiting > 0
