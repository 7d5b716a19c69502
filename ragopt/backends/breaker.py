"""A circuit breaker: a backend (a generator, a tool) that fails `failures` times in a row opens it; while open,
calls fail at once; after `reset_s` one trial call is let through (half-open): success closes it, failure opens
it again. The service guards its generators with it (ragopt.serve.guards.Guarded), the tool stage each tool."""

from __future__ import annotations

import threading
import time


class CircuitBreaker:
    CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

    def __init__(self, name: str, failures: int = 3, reset_s: float = 5.0):
        self.name = name
        self.failures_to_open = failures
        self.reset_s = reset_s
        self.state = self.CLOSED
        self.consecutive_failures = 0
        self.opened_at = 0.0
        self.trial_in_flight = False
        self.transitions: list[str] = []  # "closed->open", ... (metrics and tests read them)
        self._lock = threading.Lock()

    def _move(self, to: str) -> None:
        if to != self.state:
            self.transitions.append(f"{self.state}->{to}")
            self.state = to

    def allow(self) -> bool:
        with self._lock:
            if self.state == self.OPEN and time.monotonic() - self.opened_at >= self.reset_s:
                self._move(self.HALF_OPEN)
            if self.state == self.HALF_OPEN:
                if self.trial_in_flight:
                    return False
                self.trial_in_flight = True
                return True
            return self.state == self.CLOSED

    def refusing(self) -> bool:
        """Open and not yet due for a trial call; unlike `allow`, asking takes no trial."""
        with self._lock:
            return self.state == self.OPEN and time.monotonic() - self.opened_at < self.reset_s

    def success(self) -> None:
        with self._lock:
            self.consecutive_failures = 0
            self.trial_in_flight = False
            self._move(self.CLOSED)

    def neutral(self) -> None:
        """The call was refused under load (ragopt.errors.Refused): it says nothing about the backend's health,
        so nothing changes but that a half-open trial may be taken again."""
        with self._lock:
            self.trial_in_flight = False

    def failure(self) -> None:
        with self._lock:
            self.consecutive_failures += 1
            self.trial_in_flight = False
            if self.state == self.HALF_OPEN or self.consecutive_failures >= self.failures_to_open:
                self.opened_at = time.monotonic()
                self._move(self.OPEN)
