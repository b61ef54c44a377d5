"""Do parallel reads help when the file is not in the page cache? (issue 13, item 3)

Reads one file of ``--size`` bytes into memory with the page cache dropped before every run
(``posix_fadvise(DONTNEED)``, no root needed; a VM host may still cache the disk), four ways:

* **serial**: ``os.preadv`` of 5 MiB pieces, one after another (what ``load(mmap=False)`` does:
  one read per array);
* **threads-N**: the same bytes in pieces of ``--piece`` read by N threads at once (``preadv``
  releases the GIL), i.e. queue depth N for the disk;
* **willneed**: ``posix_fadvise(WILLNEED)`` of the whole file first (kernel readahead), then serial.

    python benchmarks/bench_cold_parallel.py               # 1 GiB, 3 rounds
    python benchmarks/bench_cold_parallel.py --size 256MiB
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from _common import machine, parse_size

PIECE = 5 << 20  # one 640 × 2048 Float32 array, about


def _evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _serial(path: str, buf: memoryview, willneed: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if willneed:
            os.posix_fadvise(fd, 0, buf.nbytes, os.POSIX_FADV_WILLNEED)
        for off in range(0, buf.nbytes, PIECE):
            os.preadv(fd, [buf[off : off + PIECE]], off)
    finally:
        os.close(fd)


def _threads(path: str, buf: memoryview, workers: int, piece: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        with ThreadPoolExecutor(workers) as pool:
            list(
                pool.map(
                    lambda off: os.preadv(fd, [buf[off : off + piece]], off), range(0, buf.nbytes, piece)
                )
            )
    finally:
        os.close(fd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--piece", default="1MiB", help="piece size of the threaded reads")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    size, piece = parse_size(args.size), parse_size(args.piece)
    folder = args.dir or tempfile.mkdtemp(prefix="bench_cold_")
    path = os.path.join(folder, "data.bin")
    with open(path, "wb") as f:
        for _ in range(0, size, 4 << 20):
            f.write(np.random.default_rng(0).bytes(4 << 20))
    size = os.path.getsize(path)
    buf = memoryview(bytearray(size))
    methods: dict[str, Callable[[], None]] = {
        "serial (5 MiB pieces)": lambda: _serial(path, buf),
        "threads-4": lambda: _threads(path, buf, 4, piece),
        "threads-8": lambda: _threads(path, buf, 8, piece),
        "willneed + serial": lambda: _serial(path, buf, willneed=True),
    }
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.repeat):  # rounds take turns, so that other jobs slow every method alike
        for name, run in methods.items():
            _evict(path)
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    print(f"# {size / 2**20:.0f} MiB, cold (evicted before every run), best of {args.repeat}; {machine()}")
    print("| method | best (s) | median (s) | GiB/s (best) |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        ts.sort()
        print(f"| {name} | {ts[0]:.3f} | {ts[len(ts) // 2]:.3f} | {size / 2**30 / ts[0]:.2f} |")
    os.remove(path)
    if args.dir is None:
        os.rmdir(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
