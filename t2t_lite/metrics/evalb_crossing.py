"""Counting EVALB's crossing brackets in O(n log n) of the sentence length.

A test bracket (s, e) crosses a gold bracket (gs, ge) when gs < s < ge < e or
s < gs < e < ge. Checking every pair costs gold x test comparisons, which grows with the
square of a tree's depth (a 20,000-deep tree has 20,000 brackets on each side). Instead:
- the first case asks whether some gold bracket ending strictly inside (s, e) starts
  before s: the smallest start among gold brackets ending at s+1 .. e-1 is below s;
- the second asks whether some gold bracket starting strictly inside (s, e) ends after e:
  the largest end among gold brackets starting at s+1 .. e-1 is above e.
Both are range-minimum and range-maximum queries over word positions, answered by sparse
tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class _RangeQuery:
    """`query(lo, hi)` = op(values[lo..hi]) in O(1) after O(n log n) preparation."""

    def __init__(self, values: list, op: Callable):
        self.op = op
        self.levels = [values]
        width = 1
        while 2 * width <= len(values):
            below = self.levels[-1]
            self.levels.append(
                [op(below[i], below[i + width]) for i in range(len(values) - 2 * width + 1)]
            )
            width *= 2

    def query(self, lo: int, hi: int):
        level = (hi - lo + 1).bit_length() - 1
        row = self.levels[level]
        return self.op(row[lo], row[hi - (1 << level) + 1])


def count_crossing(gold_brackets: Sequence, test_brackets: Sequence) -> int:
    """The number of test brackets `(label, start, end)` that cross any gold bracket."""
    if not gold_brackets or not test_brackets:
        return 0
    size = 1 + max(max(end for _, _, end in gold_brackets), max(e for _, _, e in test_brackets))
    smallest_start = [size] * size  # by end position
    largest_end = [-1] * size  # by start position
    for _, start, end in gold_brackets:
        smallest_start[end] = min(smallest_start[end], start)
        largest_end[start] = max(largest_end[start], end)
    starts, ends = _RangeQuery(smallest_start, min), _RangeQuery(largest_end, max)
    return sum(
        end - start >= 2
        and (starts.query(start + 1, end - 1) < start or ends.query(start + 1, end - 1) > end)
        for _, start, end in test_brackets
    )
