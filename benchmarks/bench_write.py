"""Writing benchmark, side by side in one run (figures for docs/performance.md, "Write").

Writes the same data -- by default 1 GiB in 200 Float32 arrays (1024 x ~1310 each) -- with every
method below. Every method says whether it fsyncs (the "fsync" column of the table): "raw" is one
file, each array's bytes written in turn with ``f.write`` (the floor for any format), with and
without an ``fsync`` at the end.

* ``raw`` / ``raw-nofsync``: the floor, with / without the final ``fsync``;
* ``raw+numpy-transpose``: raw, but each C-ordered array first copied to column-major order with
  ``np.asfortranarray`` (what a naive column-major writer costs);
* ``treexchange-F``: ``treexchange.save(path, model_state=NamedTuple(w000=..., ...))`` with the
  arrays F-ordered (Julia's order: what the reader returns), so the bytes go out straight;
* ``treexchange-C``: the same with C-ordered numpy arrays (what numpy/JAX code holds), transposed
  block by block while a writer thread writes (with ``O_DIRECT`` where the file system takes it);
  ``treexchange-C-nofsync`` with ``fsync=False``;
* ``treexchange-jax``: C-ordered ``jax.Array`` input (CPU device);
* ``h5py`` (one dataset per array), ``safetensors`` (``save_file``), ``np.save`` per array (200
  files), ``flax-msgpack`` (``flax.serialization.msgpack_serialize`` + write), ``equinox``
  (``eqx.tree_serialise_leaves``), ``orbax`` (``StandardCheckpointer.save``): C-ordered input,
  each followed by an ``fsync`` of every file it wrote;
* optionally (``--compress``) ``treexchange`` with shuffle + deflate.

Each run is a fresh subprocess started after an ``os.sync()``: the input arrays are built first,
then the peak RSS counter is reset (``/proc/self/clear_refs``) and the write is timed. "Extra
memory" is the peak RSS above the RSS with the inputs in memory. The methods take turns; each is
run ``--repeat`` times and reported as min / median / max (the deflate run is done once).

Usage: ``python benchmarks/bench_write.py [--size 1GiB] [--arrays 200] [--repeat 3] [--dir D]
[--compress] [--methods raw,treexchange-C]`` (``--size 64MiB`` for a quick smoke run).
``--interleaved ROUNDS`` instead runs raw (with / without fsync, with a numpy transpose),
safetensors (``save_file`` + fsync) and treexchange (F, C, C without fsync) in one process,
taking turns: the side-by-side ratios, wall-clock and CPU (the process's, every thread). The
C-ordered target of docs/performance.md is ``--interleaved 5 --size 512MiB`` (best of 5, wall,
against ``raw``); re-check it when ``uptime`` shows a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# method -> (input order, fsync?)
METHODS: dict[str, tuple[str, bool]] = {
    "raw": ("C", True),
    "raw-nofsync": ("C", False),
    "raw+numpy-transpose": ("C", True),
    "treexchange-F": ("F", True),
    "treexchange-C": ("C", True),
    "treexchange-C-nofsync": ("C", False),
    "treexchange-jax": ("C", True),
    "h5py": ("C", True),
    "safetensors": ("C", True),
    "np.save": ("C", True),
    "flax-msgpack": ("C", True),
    "equinox": ("C", True),
    "orbax": ("C", True),
    "treexchange-deflate": ("F", True),
}


def _parse_size(text: str) -> int:
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9, "b": 1}
    t = text.strip().lower()
    for suffix, mult in units.items():
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * mult)
    return int(t)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _reset_peak() -> int:
    """Reset the peak-RSS counter (Linux: ``5 > /proc/self/clear_refs``); return current RSS (KiB)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_kib("VmRSS")


def make_arrays(size: int, n_arrays: int, order: str) -> dict[str, np.ndarray]:
    """``n_arrays`` Float32 arrays (Julia shape 1024 x n) of ``size`` bytes in total, random values."""
    per = max(size // n_arrays // 4, 1)
    rows = 1024 if per >= 1024 else 1
    cols = max(per // rows, 1)
    rng = np.random.default_rng(0)
    out = {}
    for i in range(n_arrays):
        a = rng.standard_normal((rows, cols), dtype=np.float32)
        out[f"w{i:03d}"] = np.asfortranarray(a) if order == "F" else a
    return out


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    """fsync every file under ``path`` (or ``path`` itself) and the directories holding them."""
    if path.is_file():
        _fsync_path(path)
        return
    for root, _dirs, files in os.walk(path):
        for name in files:
            _fsync_path(Path(root) / name)
        _fsync_path(Path(root))


def run_method(method: str, outdir: str, size: int, n_arrays: int) -> dict[str, float]:
    # Imported before the baseline, so import costs are not counted.
    import h5py
    import safetensors.numpy  # noqa: F401

    import treexchange as tx

    order = METHODS[method][0]
    arrays = make_arrays(size, n_arrays, order)
    out = Path(outdir)
    if method == "treexchange-jax":
        import jax

        arrays = {k: jax.device_put(a) for k, a in arrays.items()}
        jax.block_until_ready(list(arrays.values()))
    if method == "equinox":
        import equinox as eqx
    if method == "flax-msgpack":
        from flax import serialization
    if method == "orbax":
        import orbax.checkpoint as ocp

        checkpointer = ocp.StandardCheckpointer()
    base = _reset_peak()
    t0 = time.perf_counter()
    if method in ("raw", "raw-nofsync", "raw+numpy-transpose"):
        path = out / "raw.bin"
        with open(path, "wb") as f:
            for a in arrays.values():
                f.write(np.asfortranarray(a).T.data if method == "raw+numpy-transpose" else a.data)
            f.flush()
            if method != "raw-nofsync":
                os.fsync(f.fileno())
    elif method in ("treexchange-F", "treexchange-C", "treexchange-jax"):
        path = out / "tx.jld2"
        tx.save(path, model_state=tx.NamedTuple(arrays))
    elif method == "treexchange-C-nofsync":
        path = out / "tx.jld2"
        tx.save(path, model_state=tx.NamedTuple(arrays), fsync=False)
    elif method == "treexchange-deflate":
        path = out / "txz.jld2"
        tx.save(path, model_state=tx.NamedTuple(arrays), compress=True)
    elif method == "h5py":
        path = out / "h5.h5"
        with h5py.File(path, "w") as f:
            for k, a in arrays.items():
                f.create_dataset(k, data=a)
        _fsync_path(path)
    elif method == "safetensors":
        from safetensors.numpy import save_file

        path = out / "st.safetensors"
        save_file(arrays, str(path))
        _fsync_path(path)
    elif method == "np.save":
        path = out / "npy"
        path.mkdir(exist_ok=True)
        for k, a in arrays.items():
            p = path / f"{k}.npy"
            with open(p, "wb") as f:
                np.save(f, a)
                f.flush()
                os.fsync(f.fileno())
    elif method == "flax-msgpack":
        path = out / "flax.msgpack"
        with open(path, "wb") as f:
            f.write(serialization.msgpack_serialize(arrays))
            f.flush()
            os.fsync(f.fileno())
    elif method == "equinox":
        path = out / "eqx.eqx"
        eqx.tree_serialise_leaves(str(path), arrays)
        _fsync_path(path)
    elif method == "orbax":
        path = out / "orbax"
        checkpointer.save(path.absolute(), arrays)
        checkpointer.wait_until_finished()
        _fsync_tree(path)
    else:
        raise SystemExit(f"unknown method {method}")
    seconds = time.perf_counter() - t0
    peak = (_status_kib("VmHWM") - base) / 1024
    if path.is_dir():
        nbytes = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    else:
        nbytes = path.stat().st_size
    return {"seconds": seconds, "extra_mib": peak, "file_bytes": nbytes}


def _measure_once(method: str, workdir: Path, size: int, n_arrays: int) -> dict[str, float]:
    outdir = workdir / method
    shutil.rmtree(outdir, ignore_errors=True)
    outdir.mkdir(parents=True)
    os.sync()  # start every run with no dirty pages from the previous one being written back
    proc = subprocess.run(
        [sys.executable, __file__, "--run", method, str(outdir), str(size), str(n_arrays)],
        capture_output=True,
        text=True,
        check=True,
    )
    shutil.rmtree(outdir, ignore_errors=True)
    return json.loads(proc.stdout)


def measure_all(methods: list[str], workdir: Path, size: int, n_arrays: int, repeat: int) -> dict[str, dict]:
    """Min / median / max time (and largest extra memory) of ``repeat`` runs per method; the
    methods take turns, so a slow period of the disk does not fall on one method only."""
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in methods}
    for i in range(repeat):
        for m in methods:
            if m == "treexchange-deflate" and i > 0:
                continue  # one run: compression time dwarfs the disk's noise
            runs[m].append(_measure_once(m, workdir, size, n_arrays))
    out = {}
    for m, rs in runs.items():
        times = sorted(r["seconds"] for r in rs)
        out[m] = {
            "min": times[0],
            "median": statistics.median(times),
            "max": times[-1],
            "extra_mib": max(r["extra_mib"] for r in rs),
            "file_bytes": rs[0]["file_bytes"],
            "runs": [r["seconds"] for r in rs],
        }
    return out


INTERLEAVED = (
    "raw",
    "raw-nofsync",
    "raw+numpy-transpose",
    "safetensors",
    "treexchange-F",
    "treexchange-C",
    "treexchange-C-nofsync",
)


def interleaved(
    size: int, n_arrays: int, rounds: int, workdir: Path
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """The cheap methods in one process, taking turns ``rounds`` times (C and F inputs built
    once): on a shared machine, best-of-N of interleaved runs is the fairest side-by-side
    comparison, where separate processes draw different moments of the disk. Wall-clock and
    CPU seconds (the process's, every thread: treexchange's writer thread included) per run."""
    from safetensors.numpy import save_file

    import treexchange as tx

    c_arrays = make_arrays(size, n_arrays, "C")
    f_arrays = {k: np.asfortranarray(a) for k, a in c_arrays.items()}
    path = workdir / "out.bin"

    def raw(arrays: dict[str, np.ndarray], fsync: bool, transpose: bool) -> None:
        with open(path, "wb") as f:
            for a in arrays.values():
                f.write(np.asfortranarray(a).T.data if transpose else a.data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())

    def st() -> None:
        save_file(c_arrays, str(path))
        _fsync_path(path)

    calls = {
        "raw": lambda: raw(c_arrays, True, False),
        "raw-nofsync": lambda: raw(c_arrays, False, False),
        "raw+numpy-transpose": lambda: raw(c_arrays, True, True),
        "safetensors": st,
        "treexchange-F": lambda: tx.save(path, model_state=tx.NamedTuple(f_arrays)),
        "treexchange-C": lambda: tx.save(path, model_state=tx.NamedTuple(c_arrays)),
        "treexchange-C-nofsync": lambda: tx.save(path, model_state=tx.NamedTuple(c_arrays), fsync=False),
    }
    times: dict[str, list[float]] = {m: [] for m in calls}
    cpu: dict[str, list[float]] = {m: [] for m in calls}
    for _ in range(rounds):
        for m, call in calls.items():
            os.sync()
            t0, c0 = time.perf_counter(), time.process_time()
            call()
            times[m].append(time.perf_counter() - t0)
            cpu[m].append(time.process_time() - c0)
            path.unlink()
    return times, cpu


def print_interleaved(
    times: dict[str, list[float]], size: int, n_arrays: int, cpu: dict[str, list[float]] | None = None
) -> None:
    rounds = len(times["raw"])
    print(
        f"## Write, one process, interleaved: {n_arrays} Float32 arrays, "
        f"{size / 2**20:.0f} MiB ({rounds} rounds)\n"
    )
    print(
        "| method | input | fsync | best (s) | median (s) | best vs raw+fsync | best vs raw (no fsync) "
        "| best CPU (s) | CPU vs raw+fsync |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    best = {m: min(t) for m, t in times.items()}
    best_cpu = {m: min(t) for m, t in (cpu or times).items()}
    for m, t in times.items():
        order, fsync = METHODS[m]
        print(
            f"| {m} | {order} | {'yes' if fsync else 'no'} | {best[m]:.3f} | {statistics.median(t):.3f} | "
            f"{best[m] / best['raw']:.2f}× | {best[m] / best['raw-nofsync']:.2f}× | "
            f"{best_cpu[m]:.3f} | {best_cpu[m] / best_cpu['raw']:.2f}× |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--size", default="1GiB", help="total array bytes (default 1GiB; e.g. 64MiB for a smoke run)"
    )
    ap.add_argument("--arrays", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    ap.add_argument("--compress", action="store_true", help="also time treexchange with shuffle + deflate")
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    ap.add_argument("--methods", default=None, help="comma-separated subset of the methods")
    ap.add_argument(
        "--interleaved",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="instead: raw / treexchange methods in one process, taking turns ROUNDS times",
    )
    ap.add_argument("--run", nargs=4, metavar=("METHOD", "DIR", "SIZE", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        method, outdir, size, n = args.run
        print(json.dumps(run_method(method, outdir, int(size), int(n))))
        return
    size = _parse_size(args.size)
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="txbench-write-"))
    if args.interleaved:
        workdir.mkdir(parents=True, exist_ok=True)
        times, cpu = interleaved(size, args.arrays, args.interleaved, workdir)
        print_interleaved(times, size, args.arrays, cpu)
        if args.json:
            Path(args.json).write_text(json.dumps({"wall": times, "cpu": cpu}, indent=2))
        return
    methods = args.methods.split(",") if args.methods else [m for m in METHODS if m != "treexchange-deflate"]
    if args.compress and "treexchange-deflate" not in methods:
        methods.append("treexchange-deflate")
    results = measure_all(methods, workdir, size, args.arrays, args.repeat)
    data_mib = size / 2**20
    print(f"## Write: {args.arrays} Float32 arrays, {data_mib:.0f} MiB ({args.repeat} runs)\n")
    print(
        "| method | input | fsync | best (s) | median (s) | min – max (s) | best vs raw+fsync | "
        "best vs raw (no fsync) | extra memory (MiB) | file size (MiB) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    raw_t = results["raw"]["min"] if "raw" in results else float("nan")
    raw_nf = results["raw-nofsync"]["min"] if "raw-nofsync" in results else float("nan")
    for m, r in results.items():
        order, fsync = METHODS[m]
        print(
            f"| {m} | {order} | {'yes' if fsync else 'no'} | {r['min']:.3f} | {r['median']:.3f} | "
            f"{r['min']:.3f} – {r['max']:.3f} | {r['min'] / raw_t:.2f}× | {r['min'] / raw_nf:.2f}× | "
            f"{r['extra_mib']:.0f} | {r['file_bytes'] / 2**20:.1f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if not args.dir:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
