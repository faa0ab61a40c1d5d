"""Seconds per phase of one gold batch (the progress line, the run's report and the bench)."""

from __future__ import annotations

import time


class PhaseClock:
    """`lap(phase)` adds the seconds since the last lap to `phases[phase]`."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self._last
        self._last = now
