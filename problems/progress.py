"""Progress lines of datagen: what stage it is in, how far it got, how fast, how long to go.

Every line starts `datagen: <stage>: ` and goes to the `t2t_lite.datagen` logger at
INFO, which the datagen command shows on stderr:

    datagen: vocabulary sample: started
    datagen: vocabulary sample: 1,200,000 / 9,000,000 sentences (13%), 410,000/s, ETA 19 s
    datagen: vocabulary sample: done in 22.0 s: 2,000,000 of 9,000,000 sentences sampled

A stage reports at most once per `interval` seconds while it runs (callers may update
it per chunk: the clock is read, nothing more, until the interval has passed), once
when it starts and once when it is done, with its counts.
"""

from __future__ import annotations

import contextlib
import logging
import time

LOGGER = logging.getLogger("t2t_lite.datagen")


class Progress:
    """Reports datagen's stages to `LOGGER`.

    Args:
        interval: seconds between two lines of one running stage.
    """

    def __init__(self, interval: float = 5.0):
        self.interval = interval

    def say(self, text: str) -> None:
        LOGGER.info("datagen: %s", text)

    @contextlib.contextmanager
    def stage(self, name: str, unit: str = "pairs", total: int | None = None, note: str = ""):
        """Context of one stage; yields its `Stage`, whose `summary` the done line shows."""
        stage = Stage(self, name, unit, total)
        self.say(f"{name}: started{f' ({note})' if note else ''}")
        yield stage
        seconds = time.perf_counter() - stage.start
        self.say(f"{name}: done in {seconds:.1f} s{f': {stage.summary}' if stage.summary else ''}")


class Stage:
    """One running stage: `update(done)` as work completes; `summary` for the done line."""

    def __init__(self, progress: Progress, name: str, unit: str, total: int | None):
        self.progress = progress
        self.name = name
        self.unit = unit
        self.total = total
        self.summary = ""
        self.start = self._last = time.perf_counter()

    def update(self, done: int, detail: str = "") -> None:
        """Reports `done` units (and `detail`) if `interval` seconds passed since the last line."""
        now = time.perf_counter()
        if now - self._last < self.progress.interval:
            return
        self._last = now
        rate = done / max(now - self.start, 1e-9)
        text = f"{done:,}"
        if self.total:
            text += f" / {self.total:,} {self.unit} ({100 * done / self.total:.0f}%)"
        else:
            text += f" {self.unit}"
        if detail:
            text += f", {detail}"
        text += f", {rate:,.0f}/s"
        if self.total and rate > 0:
            text += f", ETA {duration(max(self.total - done, 0) / rate)}"
        self.progress.say(f"{self.name}: {text}")


def duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s` or `1 h 02 min`."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
