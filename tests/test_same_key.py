"""The bulk header comparison of the header memo (``_same_key``) against a plain byte-by-byte
reading of its rule: same bytes as the first header over its key but the layout body, and room
for the 4-byte checksum after it -- at every alignment, near the end of the buffer, with the
key's words partly or wholly in the cut; in bulk and (a few headers) one by one."""

from __future__ import annotations

import numpy as np
import pytest

from treexchange._hdf5._headermemo import _same_key


def _plain(buf: bytes, starts: list[int], first: int, length: int, cut: tuple[int, int]) -> list[bool]:
    rel, body = cut
    key = buf[first : first + rel] + buf[first + rel + body : first + length]
    return [
        s + length + 4 <= len(buf) and buf[s : s + rel] + buf[s + rel + body : s + length] == key
        for s in starts
    ]


@pytest.mark.parametrize("few", [False, True])  # (True: at most 16 headers, compared one by one)
@pytest.mark.parametrize("near_end", [True, False])  # (False: every header whole, the one-pass path)
@pytest.mark.parametrize(("length", "cut"), [(37, (5, 18)), (64, (0, 8)), (90, (40, 24)), (13, (12, 1))])
def test_same_key_matches_the_plain_rule(
    length: int, cut: tuple[int, int], near_end: bool, few: bool
) -> None:
    rng = np.random.default_rng(length)
    size = 4096
    raw = bytearray(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    first = 3
    template = bytes(raw[first : first + length])
    starts = [first]
    for s in [200, 401, 613, 1030, 2047, size - length - 4, size - length - 2, size - length + 3]:
        raw[s : s + length] = template[: max(0, min(length, size - s))]
        starts.append(s)
    rel, body = cut
    raw[401 + rel : 401 + rel + body] = bytes(body)  # differs only in the cut: still alike
    raw[613 + length - 1] ^= 1  # last key byte differs (when it is outside the cut)
    raw[1030 + rel + body - 1] ^= 0xFF  # last byte of the cut differs: still alike
    starts += [int(x) for x in rng.integers(0, size - 8, 40)]  # random places: mostly unlike
    if not near_end:
        starts = [s for s in starts if s + length + 12 <= size]
    if few:
        starts = starts[:9] + starts[-4:]  # the placed headers (near the end too) and a few random
    buf = memoryview(bytes(raw))
    data = np.frombuffer(buf, np.uint8)
    got = _same_key(buf, data, np.array(starts, np.int64), first, length, cut)
    assert got.tolist() == _plain(bytes(raw), starts, first, length, cut)
    assert got[0] and got[1] and got[2]  # (the test's alike headers are found alike)
