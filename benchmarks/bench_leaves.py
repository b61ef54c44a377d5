"""Many small leaves: per-leaf cost of save, load and lazy open + walk, side by side in one run.

The state: ``N`` Float32 arrays of 1024 elements (4 KiB each), held as

* ``tx-dict``: a Dict of Dicts (``{"g0000": {"l000000": a, ...}, ...}``, 100 leaves per inner
  Dict), written as ``tx.JuliaDict`` (a plain ``str``-keyed dict is saved as a NamedTuple);
* ``tx-flatdict``: one flat Dict of ``N`` entries;
* ``tx-namedtuple``: ``NamedTuple(layers=(NamedTuple(weight=a, bias=b), ...))`` (a Flux-like
  state: tuples of NamedTuples);
* ``safetensors``, ``h5py`` (one dataset per leaf), ``flax-msgpack`` (``msgpack_serialize``),
  ``equinox`` (``tree_serialise_leaves``), ``orbax`` (``StandardCheckpointer``; only up to
  ``--orbax-max`` leaves, it takes seconds per thousand): the same arrays under flat names
  ``l000000`` ...;
* ``raw``: the arrays' bytes written one after the other into one file (the floor).

Operations (each the best of ``--repeat``, in a fresh subprocess per method and size, imports
done before the clock starts):

* ``save``: write the file **and fsync it** (treexchange fsyncs as part of its atomic replace;
  every other method is followed by an ``fsync`` of what it wrote), so "raw" here includes fsync;
* ``load``: read every array into memory (``treexchange.load``, ``load_file``, ``ds[()]`` for each
  dataset, ``msgpack_restore``, ``tree_deserialise_leaves``, orbax ``restore``; raw: one
  ``readinto``), file in the page cache;
* ``walk``: open lazily and visit every leaf by key without reading array data
  (``treexchange.open`` + ``keys()``/``[]`` over the tree, asking each array's ``shape`` and
  ``dtype``; safetensors ``safe_open`` + ``get_slice(k).get_shape()``; h5py ``f[k].shape``);
  methods with no lazy open have none;
* ``leaves``: the same, through each library's own listing of every leaf: ``File.leaves()``
  (``(path, node)`` of every leaf, its shape and dtype asked), safetensors as for ``walk`` (its
  ``keys()`` are its listing), h5py ``visititems``.

Usage: ``python benchmarks/bench_leaves.py [--leaves 1000,10000,100000] [--repeat 3]
[--methods tx-dict,safetensors] [--json FILE] [--plot docs/performance-scaling.png]``;
``--from-json FILE [--plot PNG]`` prints the tables (and draws the plot) of an earlier run.
``--baseline DIR`` also runs every ``tx-*`` method with the treexchange found in ``DIR`` (a
checkout of an earlier commit, e.g. ``git archive main | tar -x -C DIR``) as ``tx-…@base``,
each right before the current one: a before/after comparison side by side in one run.
Every figure is also reported as CPU seconds (``--cpu``: the tables show process CPU time, all
threads, instead of wall-clock time), the steadier measure on a shared, loaded machine.

``--interleaved ROUNDS`` runs safetensors, the three ``tx-*`` trees and raw in **one process**
instead, the methods taking turns (save, walk and load of each) ``ROUNDS`` times per size, best
of the rounds: the side-by-side CPU-time ratios of docs/performance.md ("Many small leaves, side
by side"). For a before/after comparison run it once with ``PYTHONPATH`` at an earlier checkout:
each run's ratios are to the safetensors measured in that same process. ``--ops save`` takes
turns with the saves alone: a save that follows a read (walk, load) of a large file pays the
kernel's work for that file's page cache, which lands on whichever method comes next.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

METHODS = (
    "raw",
    "tx-dict",
    "tx-flatdict",
    "tx-namedtuple",
    "safetensors",
    "h5py",
    "flax-msgpack",
    "equinox",
    "orbax",
)
LEAF_ELEMENTS = 1024


_ARRAYS: dict[int, dict[str, np.ndarray]] = {}


def make_arrays(n: int) -> dict[str, np.ndarray]:
    """``n`` Float32 leaves of 4 KiB (made once per process: interleaved methods share them)."""
    if n in _ARRAYS:
        return _ARRAYS[n]
    rng = np.random.default_rng(0)
    block = rng.standard_normal((n, LEAF_ELEMENTS), dtype=np.float32)
    _ARRAYS[n] = {f"l{i:06d}": block[i].copy() for i in range(n)}
    return _ARRAYS[n]


def _fsync(path: Path) -> None:
    if path.is_dir():
        for root, _dirs, files in os.walk(path):
            for name in files:
                _fsync(Path(root) / name)
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _walk_tx(node: Any) -> int:
    """Visit every leaf by key and ask its shape and dtype (no data): what ``inspect`` or a
    loader planning its reads does. (safetensors' walk asks ``get_shape()`` only.)"""
    if getattr(node, "kind", "") == "array":
        node.dtype  # noqa: B018 - asked, as a walk over metadata does
        return len(node.shape)
    if hasattr(node, "keys"):
        return sum(_walk_tx(node[k]) for k in node.keys())
    return 0


def operations(method: str, n: int, workdir: Path) -> dict[str, Callable[[], Any]]:
    """The save / load / walk callables of ``method`` for ``n`` leaves."""
    import treexchange as tx

    arrays = make_arrays(n)
    path = workdir / f"{method}-{n}.bin"
    ops: dict[str, Callable[[], Any]] = {}
    if method == "raw":

        def save() -> None:
            with open(path, "wb") as f:
                for a in arrays.values():
                    f.write(a.data)
                f.flush()
                os.fsync(f.fileno())

        def load() -> Any:
            buf = bytearray(path.stat().st_size)
            with open(path, "rb", buffering=0) as f:
                f.readinto(buf)
            return buf

        ops = {"save": save, "load": load}
    elif method.startswith("tx-"):
        names = list(arrays)
        if method == "tx-dict":
            state: Any = tx.JuliaDict()
            for k, a in arrays.items():
                state.setdefault("g" + k[1:5], tx.JuliaDict())[k] = a
        elif method == "tx-flatdict":
            state = tx.JuliaDict(arrays)
        else:
            vals = list(arrays.values())
            state = tx.NamedTuple(
                layers=tuple(tx.NamedTuple(weight=vals[i], bias=vals[i + 1]) for i in range(0, len(names), 2))
            )

        def walk() -> int:
            with tx.open(path) as f:
                return _walk_tx(f["st"])

        def leaves() -> int:
            n = 0
            with tx.open(path) as f:
                for _, leaf in f.leaves():
                    leaf.dtype  # noqa: B018 - asked, as a walk over metadata does
                    n += len(leaf.shape)
            return n

        ops = {
            "save": lambda: tx.save(path, st=state),
            "load": lambda: tx.load(path),
            "walk": walk,
            "leaves": leaves,
        }
    elif method == "safetensors":
        from safetensors import safe_open
        from safetensors.numpy import load_file, save_file

        def st_save() -> None:
            save_file(arrays, str(path))
            _fsync(path)

        def st_walk() -> int:
            with safe_open(str(path), framework="np") as f:
                return sum(len(f.get_slice(k).get_shape()) for k in f.keys())

        ops = {"save": st_save, "load": lambda: load_file(str(path)), "walk": st_walk, "leaves": st_walk}
    elif method == "h5py":
        import h5py

        def h5_save() -> None:
            with h5py.File(path, "w") as f:
                for k, a in arrays.items():
                    f.create_dataset(k, data=a)
            _fsync(path)

        def h5_load() -> dict[str, np.ndarray]:
            with h5py.File(path, "r") as f:
                return {k: f[k][()] for k in f}

        def h5_walk() -> int:
            with h5py.File(path, "r") as f:
                return sum(len(f[k].shape) for k in f)

        def h5_leaves() -> int:
            found: list[int] = []

            def visit(_: str, obj: Any) -> None:
                if isinstance(obj, h5py.Dataset):
                    obj.dtype  # noqa: B018 - asked, as a walk over metadata does
                    found.append(len(obj.shape))

            with h5py.File(path, "r") as f:
                f.visititems(visit)
            return sum(found)

        ops = {"save": h5_save, "load": h5_load, "walk": h5_walk, "leaves": h5_leaves}
    elif method == "flax-msgpack":
        from flax import serialization

        def fl_save() -> None:
            with open(path, "wb") as f:
                f.write(serialization.msgpack_serialize(arrays))
                f.flush()
                os.fsync(f.fileno())

        ops = {"save": fl_save, "load": lambda: serialization.msgpack_restore(path.read_bytes())}
    elif method == "equinox":
        import equinox as eqx

        def eq_save() -> None:
            eqx.tree_serialise_leaves(str(path), arrays)
            _fsync(path)

        ops = {"save": eq_save, "load": lambda: eqx.tree_deserialise_leaves(str(path), arrays)}
    elif method == "orbax":
        import shutil

        import orbax.checkpoint as ocp

        ckpt = ocp.StandardCheckpointer()
        opath = (workdir / "orbax").absolute()

        def ob_save() -> None:
            shutil.rmtree(opath, ignore_errors=True)
            ckpt.save(opath, arrays)
            ckpt.wait_until_finished()
            _fsync(opath)

        ops = {"save": ob_save, "load": lambda: ckpt.restore(opath)}
    else:
        raise SystemExit(f"unknown method {method}")
    return ops


def run_child(method: str, n: int, repeat: int) -> dict[str, float]:
    """Best wall-clock time of each operation, and (``cpu:…``) the CPU time of that run's
    process (all threads) in the best run by CPU."""
    with tempfile.TemporaryDirectory(prefix="txbench-leaves-") as d:
        ops = operations(method, n, Path(d))
        out: dict[str, float] = {}
        for name in ("save", "load", "walk", "leaves"):  # save first: the others read its file
            if name not in ops:
                continue
            best = best_cpu = float("inf")
            for _ in range(repeat):
                c0 = time.process_time()
                t0 = time.perf_counter()
                ops[name]()
                best = min(best, time.perf_counter() - t0)
                best_cpu = min(best_cpu, time.process_time() - c0)
            out[name] = best
            out["cpu:" + name] = best_cpu
        return out


INTERLEAVED = ("safetensors", "tx-dict", "tx-flatdict", "tx-namedtuple", "raw")


def interleaved(
    sizes: list[int],
    methods: list[str],
    rounds: int,
    only: tuple[str, ...] = ("save", "walk", "leaves", "load"),
) -> dict[str, dict[int, dict[str, float]]]:
    """Every method in this one process, taking turns ``rounds`` times per size (save, then walk,
    then load of each method in a round): best wall and best CPU time of each. On a shared machine
    the methods then meet the same moments of the other jobs; CPU time counts every thread."""
    import gc

    results: dict[str, dict[int, dict[str, float]]] = {m: {} for m in methods}
    with tempfile.TemporaryDirectory(prefix="txbench-leaves-") as d:
        for n in sizes:
            ops = {m: operations(m, n, Path(d)) for m in methods}
            if "save" not in only:
                # walk/load alone read the files a save writes: write each once, off the clock
                for m in methods:
                    if "save" in ops[m]:
                        ops[m]["save"]()
            best = {m: {} for m in methods}  # type: dict[str, dict[str, float]]
            for _ in range(rounds):
                for m in methods:
                    for name in only:
                        if name not in ops[m]:
                            continue
                        gc.collect()
                        c0, t0 = time.process_time(), time.perf_counter()
                        result = ops[m][name]()
                        w, c = time.perf_counter() - t0, time.process_time() - c0
                        del result
                        b = best[m]
                        b[name] = min(b.get(name, float("inf")), w)
                        b["cpu:" + name] = min(b.get("cpu:" + name, float("inf")), c)
            for m in methods:
                results[m][n] = best[m]
                print(f"{m:19s} {n:>7d} {best[m]}", file=sys.stderr)
            del ops
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leaves", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--orbax-max", type=int, default=10000)
    ap.add_argument("--h5py-max", type=int, default=100000)
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=None, help="write a PNG of the scaling curves here")
    ap.add_argument("--from-json", default=None, help="print tables (and --plot) from a --json file")
    ap.add_argument("--baseline", default=None, help="also run the tx-* methods with the treexchange in DIR")
    ap.add_argument("--cpu", action="store_true", help="tables of CPU time instead of wall-clock time")
    ap.add_argument(
        "--interleaved",
        type=int,
        default=0,
        metavar="ROUNDS",
        help=f"instead: {', '.join(INTERLEAVED)} (or --methods) in one process, taking turns ROUNDS times",
    )
    ap.add_argument(
        "--ops",
        default="save,walk,leaves,load",
        help="with --interleaved: only these operations (save,walk,leaves,load); a save right after a "
        "read of a large file pays the kernel's page-cache work for it, see docs/performance.md",
    )
    ap.add_argument("--run", nargs=3, metavar=("METHOD", "N", "REPEAT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.from_json:
        loaded = json.loads(Path(args.from_json).read_text())
        saved = {m: {int(n): r for n, r in by_n.items()} for m, by_n in loaded.items()}
        sizes = sorted({n for by_n in saved.values() for n in by_n})
        print_tables(saved, sizes, cpu=args.cpu)
        if args.plot:
            plot(saved, sizes, Path(args.plot))
        return
    if args.run:
        method, n, repeat = args.run
        print(json.dumps(run_child(method.split("@")[0], int(n), int(repeat))))
        return
    sizes = [int(x) for x in args.leaves.split(",")]
    if args.interleaved:
        chosen = args.methods.split(",") if args.methods != ",".join(METHODS) else list(INTERLEAVED)
        results = interleaved(sizes, chosen, args.interleaved, tuple(args.ops.split(",")))
        print_tables(results, sizes, cpu=args.cpu)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
        return
    methods: list[str] = []
    for m in args.methods.split(","):
        if args.baseline and m.startswith("tx-"):
            methods.append(m + "@base")
        methods.append(m)
    results: dict[str, dict[int, dict[str, float]]] = {m: {} for m in methods}
    for n in sizes:  # every method at one size, then the next size: side by side in time
        for m in methods:
            base = m.split("@")[0]
            if (base == "orbax" and n > args.orbax_max) or (base == "h5py" and n > args.h5py_max):
                continue
            env = dict(os.environ)
            if m.endswith("@base"):
                env["PYTHONPATH"] = os.path.abspath(args.baseline)
            proc = subprocess.run(
                [sys.executable, __file__, "--run", m, str(n), str(args.repeat)],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            results[m][n] = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"{m:19s} {n:>7d} {results[m][n]}", file=sys.stderr)
    print_tables(results, sizes, cpu=args.cpu)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.plot:
        plot(results, sizes, Path(args.plot))


def print_tables(
    results: dict[str, dict[int, dict[str, float]]], sizes: list[int], *, cpu: bool = False
) -> None:
    what = "CPU seconds of the process" if cpu else "seconds"
    for name in ("save", "load", "walk", "leaves"):
        op = "cpu:" + name if cpu else name
        # A walk is also held to safetensors' load (the issue's "open + walk <= 2x its load").
        also = ("cpu:load" if cpu else "load") if name in ("walk", "leaves") else None
        ratio = "× safetensors at that size" + ("; × its load" if also else "")
        print(f"\n### {name} (best of runs, {what}; in brackets: {ratio})\n")
        print("| method | " + " | ".join(f"{n:,} leaves" for n in sizes) + " | µs per leaf (largest) |")
        print("|---|" + "---|" * (len(sizes) + 1))
        for m, by_n in results.items():
            cells = []
            for n in sizes:
                t = by_n.get(n, {}).get(op)
                ref = results.get("safetensors", {}).get(n, {}).get(op)
                ref2 = results.get("safetensors", {}).get(n, {}).get(also) if also else None
                if t is None:
                    cells.append("—")
                else:
                    both = f"{t / ref:.1f}×" + (f"; {t / ref2:.1f}×" if ref2 else "") if ref else ""
                    cells.append(f"{t:.3f}" + (f" ({both})" if both else ""))
            last = next((n for n in reversed(sizes) if op in by_n.get(n, {})), None)
            per = f"{by_n[last][op] / last * 1e6:.1f}" if last else "—"
            if any(c != "—" for c in cells):
                print(f"| {m} | " + " | ".join(cells) + f" | {per} |")


def plot(results: dict[str, dict[int, dict[str, float]]], sizes: list[int], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), sharex=True)
    colors = {m: f"C{i}" for i, m in enumerate(results)}  # one color per method in every panel
    for ax, op in zip(axes, ("save", "load", "walk")):
        for m, by_n in results.items():
            ns = [n for n in sizes if op in by_n.get(n, {})]
            if ns:
                style = ":" if m.endswith("@base") else "-" if m.startswith("tx-") else "--"
                ax.loglog(ns, [by_n[n][op] for n in ns], style, marker="o", color=colors[m], label=m)
        ax.set_title(f"{op}" + (" (with fsync)" if op == "save" else ""))
        ax.set_xlabel("leaves (4 KiB Float32 arrays)")
        ax.set_ylabel("seconds (best of runs)")
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes:
        ax.legend(fontsize=7)
    fig.suptitle("treexchange vs other formats: time against number of leaves (log-log; slope 1 = linear)")
    fig.tight_layout()
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    main()
