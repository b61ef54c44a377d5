"""Helpers shared by the benchmark scripts: sizes, the machine, timing, peak memory, page cache.

Import it from a script in this folder (``from _common import best_of``; the script's folder is on
``sys.path`` when it runs). Linux-first: peak RSS comes from ``/proc/self/status`` (``VmHWM``,
reset through ``/proc/self/clear_refs``) and current RSS from psutil; elsewhere the peak falls back
to ``getrusage`` (never reset, so run each measurement in a fresh process).
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MiB = 1 << 20
_UNITS = {
    "": 1,
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
}


def parse_size(text: str) -> int:
    """``"1GiB"`` -> 1073741824 (also KiB, MiB, kB, MB, GB and plain byte counts).

    Example:
        >>> parse_size("64MiB"), parse_size("1.5kB"), parse_size("10")
        (67108864, 1500, 10)
    """
    m = re.fullmatch(r"\s*([\d.]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (try 1GiB, 64MiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def machine() -> dict[str, Any]:
    """What the figures were measured on (CPUs, memory, versions, current load)."""
    import numpy as np

    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    try:
        import h5py

        info["h5py"] = h5py.__version__
        info["hdf5"] = h5py.version.hdf5_version
    except ImportError:  # pragma: no cover - h5py is a dependency
        pass
    try:
        import psutil

        info["ram_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:  # pragma: no cover
        pass
    if hasattr(os, "getloadavg"):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return info


@dataclass
class Timing:
    """Best wall-clock and best CPU seconds over the runs (each minimum taken separately)."""

    wall: float
    cpu: float


def best_of(repeat: int, f: Callable[[], Any]) -> tuple[Timing, Any]:
    """Run ``f`` ``repeat`` times; the best wall-clock and CPU time, and the last result.

    CPU time is reported because on a shared, busy machine the wall clock mostly measures the
    other processes; on an idle machine the two agree (for single-threaded work).
    """
    wall = cpu = float("inf")
    result = None
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        result = f()
        wall = min(wall, time.perf_counter() - w0)
        cpu = min(cpu, time.process_time() - c0)
    return Timing(wall, cpu), result


# --- memory ------------------------------------------------------------------------------------
def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class MemoryProbe:
    """RSS growth of this process from the moment it is made: peak, and final anonymous/file.

    ``peak_mib`` is the high-water mark above the baseline (``VmHWM``, reset on creation where
    Linux allows it). ``anon_mib`` / ``file_mib`` split the *current* RSS growth into private
    memory and file-backed pages (a memory map of the file shows up in the latter).
    """

    def __init__(self) -> None:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset VmHWM to the current RSS
            self._resettable = True
        except OSError:
            self._resettable = False
        self.base_rss = self._rss_kib()
        self.base_anon = _status_kib("RssAnon") or 0
        self.base_file = _status_kib("RssFile") or 0

    @staticmethod
    def _rss_kib() -> int:
        try:
            import psutil

            return int(psutil.Process().memory_info().rss // 1024)
        except ImportError:  # pragma: no cover
            return _status_kib("VmRSS") or 0

    def result(self) -> dict[str, float]:
        hwm = _status_kib("VmHWM") if self._resettable else None
        if hwm is None:
            # ru_maxrss is KiB on Linux, bytes on macOS; a lifetime peak, hence fresh processes.
            scale = 1 if sys.platform != "darwin" else 1 / 1024
            hwm = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale)
        return {
            "peak_mib": max(hwm - self.base_rss, 0) / 1024,
            "rss_mib": (self._rss_kib() - self.base_rss) / 1024,
            "anon_mib": ((_status_kib("RssAnon") or 0) - self.base_anon) / 1024,
            "file_mib": ((_status_kib("RssFile") or 0) - self.base_file) / 1024,
        }


# --- page cache ---------------------------------------------------------------------------------
def warm_cache(path: Path) -> None:
    """Read the whole file once so that it sits in the page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass


def evict_cache(path: Path) -> bool:
    """Drop the file's pages from the page cache (``fsync`` + ``POSIX_FADV_DONTNEED``); False if
    the platform cannot. Needs no privileges, unlike ``drop_caches``; pages still mapped by a
    live process stay. The host of a virtual machine may still cache the disk (cold-*ish*)."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


# --- subprocesses -------------------------------------------------------------------------------
def run_child(script: str, args: Sequence[str], timeout: float = 3600) -> dict[str, Any]:
    """Run ``python script *args`` in a fresh interpreter; its last stdout line is JSON."""
    proc = subprocess.run(
        [sys.executable, script, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(script).name} {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table.

    Example:
        >>> print(markdown_table(["a", "b"], [[1, "x"]]))
        | a | b |
        |---|---|
        | 1 | x |
    """
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def make_leaves(path: Path, n_leaves: int) -> None:
    """The many-leaves state used by bench_read.py and bench_schema.py: Dense-like
    layers `(weight 8×8, bias 8, σ = ())`, two array leaves each."""
    import treexchange as tx

    rng = np.random.default_rng(0)
    layers = tuple(
        tx.NamedTuple(
            weight=rng.standard_normal((8, 8)).astype(np.float32), bias=np.zeros(8, np.float32), σ=()
        )
        for _ in range(n_leaves // 2)
    )
    tx.save(path, model_state=tx.NamedTuple(layers=layers))
