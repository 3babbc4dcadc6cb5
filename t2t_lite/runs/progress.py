"""A progress line for long runs: step, loss, learning rate, tokens/s and ETA."""

from __future__ import annotations

import time


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
