"""Seconds per phase of one gold batch (the progress line, the run's report and the bench)."""

from __future__ import annotations

import time


class PhaseClock:
    """`lap(phase)` adds the seconds since the last lap to `phases[phase]` and records the
    phase's span in wall-clock time (`spans`: phase, start, end, epoch seconds), so what ran in
    it (Spark jobs, scans) can be matched to it afterwards."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.spans: list[tuple[str, float, float]] = []
        self._last = time.monotonic()
        self._last_wall = time.time()

    def lap(self, phase: str) -> None:
        now, wall = time.monotonic(), time.time()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self._last
        self.spans.append((phase, self._last_wall, wall))
        self._last, self._last_wall = now, wall
