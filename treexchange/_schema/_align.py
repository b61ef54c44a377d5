"""Aligning two sequences of children (tuple/vector items) when their lengths differ.

When a layer is removed from the middle of a ``layers`` tuple, comparing position by position would
blame every later layer. Instead, the longest common subsequence of *matching* items anchors the
alignment; items between anchors are paired position by position, and what is left over on either
side is reported as missing (schema side) or extra (data side) at its own position.
"""

from __future__ import annotations

from collections.abc import Callable


def align(
    n_expected: int, n_actual: int, matches: Callable[[int, int], bool], *, max_cells: int
) -> list[tuple[int | None, int | None]]:
    """Pairs of 0-based indices ``(expected, actual)``; ``None`` on one side marks missing/extra.

    Above ``max_cells`` pairs (``Limits.max_align_cells``) the quadratic table, and the
    ``matches`` call per cell, are not spent: the items are paired by position.

    Example:
        >>> align(3, 2, lambda i, j: "ABC"[i] == "AC"[j], max_cells=100)
        [(0, 0), (1, None), (2, 1)]
        >>> align(2, 3, lambda i, j: "AC"[i] == "ABC"[j], max_cells=100)
        [(0, 0), (None, 1), (1, 2)]
        >>> align(2, 2, lambda i, j: False, max_cells=100)
        [(0, 0), (1, 1)]
        >>> align(3, 2, lambda i, j: "ABC"[i] == "AC"[j], max_cells=5)
        [(0, 0), (1, 1), (2, None)]
    """
    if n_expected * n_actual > max_cells:
        return _positional(0, n_expected, 0, n_actual)
    eq = [[matches(i, j) for j in range(n_actual)] for i in range(n_expected)]
    # lcs[i][j] = LCS length of expected[i:] and actual[j:]
    lcs = [[0] * (n_actual + 1) for _ in range(n_expected + 1)]
    for i in range(n_expected - 1, -1, -1):
        row, below = lcs[i], lcs[i + 1]
        for j in range(n_actual - 1, -1, -1):
            row[j] = below[j + 1] + 1 if eq[i][j] else max(below[j], row[j + 1])
    anchors: list[tuple[int, int]] = []
    i = j = 0
    while i < n_expected and j < n_actual:
        if eq[i][j] and lcs[i][j] == lcs[i + 1][j + 1] + 1:
            anchors.append((i, j))
            i, j = i + 1, j + 1
        elif lcs[i + 1][j] >= lcs[i][j + 1]:
            i += 1
        else:
            j += 1
    out: list[tuple[int | None, int | None]] = []
    prev_i = prev_j = 0
    for ai, aj in [*anchors, (n_expected, n_actual)]:
        out.extend(_positional(prev_i, ai, prev_j, aj))
        if ai < n_expected and aj < n_actual:
            out.append((ai, aj))
        prev_i, prev_j = ai + 1, aj + 1
    return out


def _positional(i0: int, i1: int, j0: int, j1: int) -> list[tuple[int | None, int | None]]:
    """Pair ``expected[i0:i1]`` with ``actual[j0:j1]`` in order; the longer side's tail is unpaired."""
    out: list[tuple[int | None, int | None]] = []
    common = min(i1 - i0, j1 - j0)
    for k in range(common):
        out.append((i0 + k, j0 + k))
    for i in range(i0 + common, i1):
        out.append((i, None))
    for j in range(j0 + common, j1):
        out.append((None, j))
    return out
