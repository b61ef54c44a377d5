"""Room on Python's stack for trees as deep as :class:`treexchange.Limits` allows.

The writer and the PyTree converter recurse once per level of the value tree, through several
Python frames per level. Python's default limit (1000 frames) would stop a tree far shallower
than ``Limits().max_depth``; :func:`stack_for_depth` raises the limit for the duration of one
call so that every tree the depth check admits is also written.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

FRAMES_PER_LEVEL = 48
"""Python frames one level of a value tree may take in the writer (a Dict value inside a
``Vector{Any}`` element takes about 20: dataset, kvvec, pair, field, reference...), with margin."""

_lock = threading.Lock()
_wants: list[int] = []  # the limits asked for by the blocks running now (any thread)
_state = {"before": 0, "set": 0}  # the limit before the first of them, and the last one set here


@contextmanager
def stack_for_depth(depth: int) -> Iterator[None]:
    """Allow at least ``depth * FRAMES_PER_LEVEL`` more frames while the block runs.

    The limit is only ever raised, to the largest that a running block asks for, and put back
    when the last running block (in any thread) ends, unless someone else changed it meanwhile.
    (Blocks in two threads used to leave it raised when they ended out of order.)

    Example:
        >>> import sys
        >>> before = sys.getrecursionlimit()
        >>> with stack_for_depth(512):
        ...     sys.getrecursionlimit() >= 512 * FRAMES_PER_LEVEL
        True
        >>> sys.getrecursionlimit() == before
        True
    """
    wanted = depth * FRAMES_PER_LEVEL + 1000
    with _lock:
        if not _wants:
            _state["before"] = _state["set"] = sys.getrecursionlimit()
        _wants.append(wanted)
        if wanted > sys.getrecursionlimit():
            sys.setrecursionlimit(wanted)
            _state["set"] = wanted
    try:
        yield
    finally:
        with _lock:
            _wants.remove(wanted)
            target = max([_state["before"], *_wants])
            current = sys.getrecursionlimit()
            if current == _state["set"] and target < current:
                sys.setrecursionlimit(target)
                _state["set"] = target
