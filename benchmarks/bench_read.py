"""Reading benchmarks, side by side in one run (figures for docs/performance.md, "Read").

**A. Eager load of a large file**: a Flux-like state ``model_state = (layers = (100 × (weight,
bias, σ = ())),)`` of 200 Float32 arrays, 1 GiB in all by default, written by
``treexchange.save``. Contenders, each in a fresh interpreter:

* ``raw``: ``readinto`` of the whole file into one preallocated buffer (the floor);
* ``h5py``: every array read with ``ds[()]``, reached by following JLD2's object references;
* ``treexchange``: ``treexchange.load(path)``: arrays are zero-copy views of a copy-on-write
  memory map, so this alone reads (almost) no array bytes;
* ``treexchange+touch``: the same, then one byte of every 4 KiB page of every array read;
* ``treexchange(mmap=False)``: ``treexchange.load(path, mmap=False)``: every array read into
  memory of its own with one plain read (``os.preadv``) each;
* ``+sum`` variants of raw, h5py and both treexchange loads: every array summed with numpy
  (every byte read), the fair comparison for "the data are in memory and have been used".

Peak memory is the high-water mark of RSS above the interpreter's baseline (taken after the imports);
the file-backed part of RSS (pages of the memory map) is reported separately.

**B. A state with many leaves**: ``(layers = (10,000 × (weight 8×8, bias 8, σ = ())),)`` = 20,000
array leaves by default: ``treexchange.open`` and reach one weight; open and walk every node
(kind, Julia type, shape; no array data); eager ``treexchange.load``; h5py reading every dataset.
Time spent in Python's cyclic garbage collector is reported (``gc.callbacks``).

Every figure is the best of ``--repeat`` fresh processes (default 3), wall-clock and CPU time.
Cache: **warm** (the file was read just before; it sits in the page cache) and, with ``--cold``,
also **cold(ish)**: before each run the file's pages are dropped from the page cache with
``posix_fadvise(DONTNEED)`` (no root needed; a VM host may still cache the disk).

Usage::

    python benchmarks/bench_read.py                     # 1 GiB, 20,000 leaves, warm cache
    python benchmarks/bench_read.py --cold --json out.json
    python benchmarks/bench_read.py --size 64MiB --leaves 2000 --repeat 1   # smoke run

Generated files go to ``benchmarks/data/`` (git-ignored; reused when present) or ``--dir``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # (after the path tweak that makes it importable)
    MemoryProbe,
    evict_cache,
    machine,
    make_leaves,
    markdown_table,
    parse_size,
    run_child,
    warm_cache,
)

NOMMAP = "treexchange(mmap=False)"
BIG_METHODS = (
    "raw",
    "h5py",
    "treexchange",
    "treexchange+touch",
    NOMMAP,
    "raw+sum",
    "h5py+sum",
    "treexchange+sum",
    f"{NOMMAP}+sum",
)
LEAF_METHODS = ("lazy-open", "lazy-walk", "eager", "h5py-eager")
PAGE = 4096


# --- the files --------------------------------------------------------------------------------
def make_big(path: Path, size: int, n_arrays: int) -> int:
    """Write the large state; returns the bytes of array data."""
    import treexchange as tx

    n_layers = max(n_arrays // 2, 1)
    rows = 1024 if size >= n_layers * 4 * 1024 * 2 else 8
    bias_bytes = rows * 4
    cols = max((size // n_layers - bias_bytes) // (4 * rows), 1)
    layers = []
    for i in range(n_layers):
        w = np.empty((rows, cols), np.float32, order="F")  # Julia's order: written as is
        w.fill(i * 0.001)
        layers.append(tx.NamedTuple(weight=w, bias=np.full(rows, i, np.float32), σ=()))
    tx.save(path, model_state=tx.NamedTuple(layers=tuple(layers)))
    return n_layers * (rows * cols + rows) * 4


def _ensure(path: Path, make: Any, *args: Any) -> None:
    if path.exists():
        print(f"(reusing {path})", file=sys.stderr)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    make(path, *args)  # treexchange.save replaces atomically: no half-written file is reused
    print(f"(wrote {path} in {time.perf_counter() - t:.1f} s)", file=sys.stderr)


# --- what each contender does (in a fresh interpreter) --------------------------------------------
def _arrays(value: Any) -> Iterator[np.ndarray]:
    """Every numpy array in a value tree (NamedTuple, tuple, list, dict)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, np.ndarray):
            yield v
        elif isinstance(v, dict) or (hasattr(v, "values") and callable(v.values)):
            stack.extend(v.values())
        elif isinstance(v, (tuple, list)):
            stack.extend(v)


def _h5py_arrays(path: str) -> Iterator[np.ndarray]:
    """h5py reading every dataset reachable from the top-level names through object references
    (``ds[()]`` each; the files here share no objects, so nothing is read twice)."""
    import h5py

    def refs(value: Any, dtype: np.dtype) -> Iterator[Any]:
        if h5py.check_ref_dtype(dtype) is not None or dtype.kind == "O":
            for r in np.asarray(value).ravel():
                if isinstance(r, h5py.Reference) and r:
                    yield r
        elif dtype.names:
            for name in dtype.names:
                yield from refs(np.asarray(value)[name], dtype[name])

    with h5py.File(path, "r") as f:
        todo = [f[k] for k in f if k != "_types"]
        while todo:
            ds = todo.pop()
            value = ds[()]
            dtype = np.asarray(value).dtype
            if dtype.kind in "fciub" and not dtype.names:
                yield value
            else:
                todo.extend(f[r] for r in refs(value, dtype))


def _walk(root: Any) -> int:
    """Visit every lazy node (kind, Julia type, shape of arrays); no array data is read."""
    n = 0
    stack = [root]
    while stack:
        node = stack.pop()
        n += 1
        kind = getattr(node, "kind", "group")
        if kind != "group":
            node.julia_type  # noqa: B018
        if kind == "array":
            node.shape  # noqa: B018
        if hasattr(node, "children"):
            stack.extend(child for _, child in node.children())
    return n


def _open(tx: Any, path: str) -> Any:
    f = tx.open(path)
    assert isinstance(f, tx.File)
    return f


def child(method: str, path: str) -> dict[str, Any]:
    import h5py  # imported before the baseline, so that import costs are not counted

    import treexchange as tx

    assert h5py and tx
    gc_time = [0.0, 0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_time[1] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_time[1]

    gc.callbacks.append(on_gc)
    probe = MemoryProbe()
    c0, t0 = time.process_time(), time.perf_counter()
    nbytes, checksum, count = 0, 0.0, 0
    keep: Any = None  # results stay alive until the memory is measured
    base, _, post = method.partition("+")
    if base == "raw":
        size = os.path.getsize(path)
        keep = np.empty(size, np.uint8)
        with open(path, "rb", buffering=0) as f:
            f.readinto(memoryview(keep))
        nbytes = size
        if post == "sum":
            checksum = float(keep[: size // 4 * 4].view(np.float32).sum(dtype=np.float64))
    elif base in ("h5py", "h5py-eager"):
        keep = list(_h5py_arrays(path))
        nbytes = sum(a.nbytes for a in keep)
        if post == "sum":
            checksum = sum(float(a.sum(dtype=np.float64)) for a in keep)
    elif base in ("treexchange", "eager", NOMMAP):
        keep = tx.load(path, mmap=base != NOMMAP)
        arrays = list(_arrays(keep))
        nbytes = sum(a.nbytes for a in arrays)
        count = len(arrays)
        if post == "touch":
            for a in arrays:
                flat = a.reshape(-1, order="A").view(np.uint8)
                checksum += int(flat[::PAGE].sum())
        elif post == "sum":
            checksum = sum(float(a.sum(dtype=np.float64)) for a in arrays)
    elif base == "lazy-open":
        with _open(tx, path) as f:
            w = f["model_state"]["layers"][0]["weight"]
            count = 1
            nbytes = int(np.prod(w.shape)) * 4
    elif base == "lazy-walk":
        with _open(tx, path) as f:
            count = _walk(f)
    else:
        raise SystemExit(f"unknown method {method!r}")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {"wall": wall, "cpu": cpu, "gc": gc_time[0], "nbytes": nbytes, "count": count, "checksum": checksum}
    out.update(probe.result())
    del keep
    return out


# --- the parent ---------------------------------------------------------------------------------
def measure(method: str, path: Path, repeat: int, cold: bool) -> dict[str, Any]:
    """Best of ``repeat`` fresh processes (wall and CPU minimised separately; memory of the
    fastest run)."""
    runs = []
    for _ in range(repeat):
        if cold:
            evict_cache(path)
        else:
            warm_cache(path)
        runs.append(run_child(__file__, ["--child", method, str(path)]))
    best = min(runs, key=lambda r: r["wall"])
    best = dict(best, cpu=min(r["cpu"] for r in runs), gc=min(r["gc"] for r in runs))
    best["runs"] = runs
    return best


def big_table(results: dict[str, dict[str, Any]], data_bytes: int) -> str:
    data_mib = data_bytes / 2**20
    rows = []
    for m, r in results.items():
        ref = results["raw+sum" if m.endswith("+sum") else "raw"]["wall"]
        rows.append(
            [
                f"`{m}`",
                f"{r['wall']:.3f}",
                f"{r['cpu']:.3f}",
                f"{r['wall'] / ref:.2f}×",
                f"{r['peak_mib']:.0f}",
                f"{r['peak_mib'] / data_mib:.2f}×",
                f"{r['anon_mib']:.0f} / {r['file_mib']:.0f}",
            ]
        )
    headers = [
        "method",
        "wall (s)",
        "CPU (s)",
        "vs raw",
        "peak RSS growth (MiB)",
        "vs data",
        "RSS after: private / file (MiB)",
    ]
    return markdown_table(headers, rows)


def leaf_table(results: dict[str, dict[str, Any]]) -> str:
    labels = {
        "lazy-open": "`treexchange.open` + reach one weight",
        "lazy-walk": "`treexchange.open` + walk every node (kind, type, shape; no data)",
        "eager": "`treexchange.load` (whole tree)",
        "h5py-eager": "h5py: every dataset, following references",
    }
    rows = [
        [labels[m], f"{r['wall']:.3f}", f"{r['cpu']:.3f}", f"{r['gc']:.3f}", f"{r['peak_mib']:.0f}"]
        for m, r in results.items()
    ]
    return markdown_table(
        ["operation", "wall (s)", "CPU (s)", "of which GC (s)", "peak RSS growth (MiB)"], rows
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1GiB", help="array data of the large file (default 1GiB)")
    ap.add_argument("--arrays", type=int, default=200, help="arrays in the large file (default 200)")
    ap.add_argument("--leaves", type=int, default=20_000, help="array leaves of the small-leaf file")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per figure (best of)")
    ap.add_argument("--cold", action="store_true", help="also measure with the file evicted from the cache")
    ap.add_argument("--dir", default=None, help="where the files go (default benchmarks/data)")
    ap.add_argument("--json", default=None, help="also write every figure to this JSON file")
    ap.add_argument("--part", choices=("all", "big", "leaves"), default="all", help="run only A or B")
    ap.add_argument("--child", nargs=2, metavar=("METHOD", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return

    size = parse_size(args.size)
    workdir = Path(args.dir) if args.dir else Path(__file__).resolve().parent / "data"
    big = workdir / f"read-{size}-{args.arrays}.jld2"
    leaves = workdir / f"read-leaves-{args.leaves}.jld2"
    report: dict[str, Any] = {
        "machine": machine(),
        "size": size,
        "arrays": args.arrays,
        "leaves": args.leaves,
    }
    info = report["machine"]
    print(
        f"Machine: {info['cpus']} CPUs, {info.get('ram_gib')} GiB, Python {info['python']}, "
        f"numpy {info['numpy']}, h5py {info.get('h5py')} (HDF5 {info.get('hdf5')}), "
        f"load average {info.get('load_average')}\n"
    )
    caches = ["warm", "cold"] if args.cold else ["warm"]
    checks: list[tuple[str, float, float]] = []
    if args.part in ("all", "big"):
        _ensure(big, make_big, size, args.arrays)
        import treexchange as tx

        data_bytes = sum(a.nbytes for a in _arrays(tx.load(big)))
        report["data_bytes"] = data_bytes
        report["file_bytes"] = big.stat().st_size
        for cache in caches:
            results = {m: measure(m, big, args.repeat, cache == "cold") for m in BIG_METHODS}
            report[f"big_{cache}"] = results
            print(
                f"### A. Eager load: {args.arrays} Float32 arrays, {data_bytes / 2**20:.0f} MiB of data "
                f"({cache} cache, best of {args.repeat})\n"
            )
            print(big_table(results, data_bytes) + "\n")
        w = report["big_warm"]
        checks += [
            (
                "eager load ≤ 1.2× raw read (load + touch every page)",
                w["treexchange+touch"]["wall"] / w["raw"]["wall"],
                1.2,
            ),
            (
                "eager load ≤ 1.2× raw read (load + sum, vs read + sum)",
                w["treexchange+sum"]["wall"] / w["raw+sum"]["wall"],
                1.2,
            ),
            (
                "peak memory of an eager load (+ sum) ≤ 1.1× data",
                w["treexchange+sum"]["peak_mib"] * 2**20 / data_bytes,
                1.1,
            ),
        ]
        checks.append(("eager load, mmap=False ≤ 1.2× raw read", w[NOMMAP]["wall"] / w["raw"]["wall"], 1.2))
        for cache in caches[1:]:
            c = report[f"big_{cache}"]
            checks += [
                (
                    f"eager load ≤ 1.2× raw read (load + touch every page), {cache} cache",
                    c["treexchange+touch"]["wall"] / c["raw"]["wall"],
                    1.2,
                ),
                (
                    f"eager load, mmap=False ≤ 1.2× raw read, {cache} cache",
                    c[NOMMAP]["wall"] / c["raw"]["wall"],
                    1.2,
                ),
                (
                    f"eager load, mmap=False + sum ≤ 1.2× raw read + sum, {cache} cache",
                    c[f"{NOMMAP}+sum"]["wall"] / c["raw+sum"]["wall"],
                    1.2,
                ),
            ]
    if args.part in ("all", "leaves"):
        _ensure(leaves, make_leaves, args.leaves)
        for cache in caches:
            results = {m: measure(m, leaves, args.repeat, cache == "cold") for m in LEAF_METHODS}
            report[f"leaves_{cache}"] = results
            print(f"### B. {args.leaves} array leaves ({cache} cache, best of {args.repeat})\n")
            print(leaf_table(results) + "\n")
        lw = report["leaves_warm"]
        checks += [
            (
                f"lazy open of {args.leaves} leaves + walk every node < 1 s (wall)",
                lw["lazy-walk"]["wall"],
                1.0,
            ),
            (f"lazy open of {args.leaves} leaves + walk every node < 1 s (CPU)", lw["lazy-walk"]["cpu"], 1.0),
            (
                f"lazy open of {args.leaves} leaves + reach one weight < 1 s (wall)",
                lw["lazy-open"]["wall"],
                1.0,
            ),
        ]
    report["targets"] = [{"target": t, "value": v, "limit": lim, "met": v <= lim} for t, v, lim in checks]
    print("### Targets (warm cache unless said)\n")
    rows = [[t, f"{v:.2f}", "yes" if v <= lim else "**no**"] for t, v, lim in checks]
    print(markdown_table(["target", "measured", "met"], rows))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
