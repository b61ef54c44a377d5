"""Bob Jenkins' lookup3 ``hashlittle``: the checksum of HDF5 superblock v2+ and object headers v2.

Written from the published algorithm description; metadata blocks are small, so plain Python
integer arithmetic is fast enough.
"""

from __future__ import annotations

_M = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M


def lookup3(data: bytes | bytearray | memoryview, initval: int = 0) -> int:
    """Return the 32-bit lookup3 ``hashlittle`` of ``data``.

    Example:
        >>> hex(lookup3(b""))
        '0xdeadbeef'
        >>> lookup3(b"Four score and seven years ago") == 0x17770551
        True
    """
    buf = bytes(data)
    length = len(buf)
    a = b = c = (0xDEADBEEF + length + initval) & _M
    i = 0
    while length > 12:
        a = (a + int.from_bytes(buf[i : i + 4], "little")) & _M
        b = (b + int.from_bytes(buf[i + 4 : i + 8], "little")) & _M
        c = (c + int.from_bytes(buf[i + 8 : i + 12], "little")) & _M
        a = (a - c) & _M
        a ^= _rot(c, 4)
        c = (c + b) & _M
        b = (b - a) & _M
        b ^= _rot(a, 6)
        a = (a + c) & _M
        c = (c - b) & _M
        c ^= _rot(b, 8)
        b = (b + a) & _M
        a = (a - c) & _M
        a ^= _rot(c, 16)
        c = (c + b) & _M
        b = (b - a) & _M
        b ^= _rot(a, 19)
        a = (a + c) & _M
        c = (c - b) & _M
        c ^= _rot(b, 4)
        b = (b + a) & _M
        length -= 12
        i += 12
    if length == 0:
        return c
    tail = buf[i:] + bytes(12 - length)
    a = (a + int.from_bytes(tail[0:4], "little")) & _M
    b = (b + int.from_bytes(tail[4:8], "little")) & _M
    c = (c + int.from_bytes(tail[8:12], "little")) & _M
    c ^= b
    c = (c - _rot(b, 14)) & _M
    a ^= c
    a = (a - _rot(c, 11)) & _M
    b ^= a
    b = (b - _rot(a, 25)) & _M
    c ^= b
    c = (c - _rot(b, 16)) & _M
    a ^= c
    a = (a - _rot(c, 4)) & _M
    b ^= a
    b = (b - _rot(a, 14)) & _M
    c ^= b
    c = (c - _rot(b, 24)) & _M
    return c
