#!/bin/bash
set -euo pipefail
cd /app
cat > intervals.py <<'PY'
"""Meeting-room scheduling helpers.

An interval is a tuple ``(start, end)`` of integer minutes with ``start < end``; it covers
the half-open range [start, end). Intervals that overlap **or touch** belong together.
"""


def merge(intervals):
    """Return the union of ``intervals`` as a sorted list of disjoint, non-touching intervals.

    The input may be in any order and is not modified.
    """
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def free_slots(busy, day_start, day_end, min_len=1):
    """Return the free intervals within [day_start, day_end) given the ``busy`` intervals.

    Busy intervals may extend beyond the day; only the part inside the day matters. Only
    free intervals at least ``min_len`` minutes long are returned, in order.
    """
    free = []
    cursor = day_start
    for start, end in merge(busy):
        start, end = max(start, day_start), min(end, day_end)
        if start >= end:
            continue
        if start - cursor >= min_len:
            free.append((cursor, start))
        cursor = max(cursor, end)
    if day_end - cursor >= min_len:
        free.append((cursor, day_end))
    return free
PY
python3 -m unittest discover -s tests
