"""A progress line for long runs: step, loss, learning rate, tokens/s and ETA."""

from __future__ import annotations

import time
from collections.abc import Callable


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"


class Progress:
    """Measures throughput between reports and estimates the time left.

    Args:
        total_steps: the step at which training ends.
        start_step: the step training starts (or resumes) at.
        printer: where lines go (print by default).
        deadline: `time.monotonic()` value at which a time budget ends training, or None;
            the ETA is then the sooner of the two ends.
    """

    def __init__(self, total_steps: int, start_step: int, printer=print, deadline=None):
        self.total_steps = total_steps
        self.start_step = start_step
        self.printer = printer
        self.deadline = deadline
        self._time = time.monotonic()
        self._step = start_step
        self._tokens = 0.0

    def add_tokens(self, tokens) -> None:
        """Adds an update's target tokens: a number, or a scalar tensor read only at reports."""
        self._tokens += tokens

    def report(self, step: int, values: dict) -> float:
        """Prints one line for `step` with `values`; returns target tokens/s since last call."""
        now = time.monotonic()
        elapsed = max(now - self._time, 1e-9)
        rate = float(self._tokens) / elapsed
        steps_per_second = (step - self._step) / elapsed
        left = (self.total_steps - step) / steps_per_second if steps_per_second > 0 else 0.0
        if self.deadline is not None:
            left = min(left, self.deadline - now) if steps_per_second > 0 else self.deadline - now
        parts = [f"step {step}/{self.total_steps}"]
        parts += [f"{name} {value:.4g}" for name, value in values.items()]
        parts += [f"{rate:,.0f} tok/s", f"ETA {format_duration(left)}"]
        self.printer(" | ".join(parts))
        self._time, self._step, self._tokens = now, step, 0.0
        return rate


class ItemProgress:
    """Prints items done (e.g. decoded sentences), items/s, target tokens/s and the ETA
    every `every` s."""

    def __init__(
        self,
        total: int,
        printer: Callable,
        every: float,
        done_word: str = "decoded",
        unit: str = "sentences",
    ):
        self.total, self.printer, self.every = total, printer, every
        self.done_word, self.unit = done_word, unit
        self.start = self.last = time.monotonic()
        self.done = self.tokens = 0

    def add(self, sentences: int, tokens: int) -> None:
        self.done += sentences
        self.tokens += tokens
        now = time.monotonic()
        if now - self.last >= self.every or self.done == self.total:
            self.last = now
            self.printer(self.line(now - self.start))

    def line(self, elapsed: float) -> str:
        elapsed = max(elapsed, 1e-9)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        return (
            f"{self.done_word} {self.done:,}/{self.total:,} {self.unit} | "
            f"{rate:.2f} {self.unit}/s | "
            f"{self.tokens / elapsed:,.1f} tokens/s | ETA {format_duration(left)}"
        )
