"""Reading a BSON.jl model against reading the same arrays from JLD2 (figures for
docs/performance.md, "BSON.jl files").

The model is shaped as ``BSON.@save "m.bson" model`` writes a Flux ``Chain`` of ``Dense`` layers:
a ``struct`` per layer with its type (``Flux.Dense{typeof(relu), Matrix{Float32},
Vector{Float32}}``, the array types stored once in ``_backrefs`` and referred to, as BSON.jl
does), the weight and bias as ``array`` documents of raw column-major bytes, the function as an
empty struct. About 100 MB by default (``--size``), in ``--layers`` layers. The JLD2 file holds
the same value tree (``treexchange convert m.bson m.jld2``: structs and all).

Measured in one process, interleaved (BSON, then JLD2, ``--repeat`` times), CPU seconds
(``time.process_time``), warm page cache:

* ``load``: ``treexchange.load(path)`` (zero-copy views of the memory map);
* ``load+sum``: the same, then every array summed (every byte read);
* ``load(mmap=False)``: every array read into memory of its own.

Usage::

    python benchmarks/bench_bson.py                 # ~100 MB, 50 layers
    python benchmarks/bench_bson.py --size 20MB --repeat 3 --json out.json
    python benchmarks/bench_bson.py ../shared/julia_fixtures/bson/*.bson   # real files, each vs its JLD2 copy
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, markdown_table, parse_size  # (after the path tweak)

import treexchange as tx
from treexchange._bson._writer import array, backref, bson_file, datatype, struct, tuple_
from treexchange._save import convert


def bson_chain(size: int, layers: int) -> bytes:
    """A BSON.jl-shaped ``Chain`` of ``layers`` Dense layers holding about ``size`` bytes."""
    per_layer = size // layers // 4
    n_in = 1024
    n_out = max(per_layer // n_in, 1)
    rng = np.random.default_rng(0)
    f32 = datatype("Core.Float32")
    backrefs = [datatype("Core.Array", f32, 2), datatype("Core.Array", f32, 1)]
    dense_t = datatype("Flux.Dense", datatype("NNlib.#relu"), backref(1), backref(2))
    dense = [
        struct(
            dense_t,
            array("Core.Float32", rng.standard_normal((n_out, n_in), np.float32)),
            array("Core.Float32", rng.standard_normal(n_out, np.float32)),
            struct(datatype("NNlib.#relu")),
        )
        for _ in range(layers)
    ]
    chain_t = datatype("Flux.Chain", datatype("Core.Tuple", *[dense_t] * layers))
    return bson_file({"model": struct(chain_t, tuple_(*dense))}, backrefs)


def _arrays(value: Any) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    stack = [value]
    while stack:
        x = stack.pop()
        if isinstance(x, np.ndarray):
            out.append(x)
        elif isinstance(x, tx.JuliaStruct):
            stack.extend(x.fields.values())
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (tuple, list)):
            stack.extend(x)
    return out


def _cpu(f: Callable[[], Any]) -> float:
    t0 = time.process_time()
    f()
    return time.process_time() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=parse_size, default=parse_size("100MB"))
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument(
        "files", nargs="*", help="real BSON.jl files to measure instead (each against its JLD2 copy)"
    )
    args = ap.parse_args()
    if args.files:
        return _real_files([Path(f) for f in args.files], args.repeat)

    with tempfile.TemporaryDirectory() as d:
        bson_path, jld2_path = Path(d, "model.bson"), Path(d, "model.jld2")
        bson_path.write_bytes(bson_chain(args.size, args.layers))
        convert(bson_path, jld2_path, verify=False)
        assert tx.values_equal(tx.load(bson_path), tx.load(jld2_path))
        sizes = {"bson": bson_path.stat().st_size, "jld2": jld2_path.stat().st_size}

        cases: dict[str, Callable[[Path], Any]] = {
            "load": lambda p: tx.load(p),
            "load+sum": lambda p: [float(a.sum()) for a in _arrays(tx.load(p))],
            "load(mmap=False)": lambda p: tx.load(p, mmap=False),
        }
        for p in (bson_path, jld2_path):  # warm the page cache and the imports
            for f in cases.values():
                f(p)
        best: dict[str, dict[str, float]] = {c: {"bson": float("inf"), "jld2": float("inf")} for c in cases}
        for _ in range(args.repeat):
            for case, f in cases.items():
                for fmt, p in (("bson", bson_path), ("jld2", jld2_path)):
                    best[case][fmt] = min(best[case][fmt], _cpu(lambda f=f, p=p: f(p)))

    rows = [
        [case, f"{t['bson'] * 1e3:.2f}", f"{t['jld2'] * 1e3:.2f}", f"{t['bson'] / t['jld2']:.2f}"]
        for case, t in best.items()
    ]
    print(f"BSON {sizes['bson'] / 1e6:.1f} MB, JLD2 {sizes['jld2'] / 1e6:.1f} MB, {args.layers} layers")
    print(markdown_table(["read", "BSON ms (CPU)", "JLD2 ms (CPU)", "BSON / JLD2"], rows))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"machine": machine(), "sizes": sizes, "best_cpu_s": best}, indent=1)
        )
    return 0


def _real_files(paths: list[Path], repeat: int) -> int:
    """``load`` of each real BSON.jl file against its JLD2 copy, CPU ms, best of interleaved runs."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for path in paths:
            copy = Path(d, path.stem + ".jld2")
            convert(path, copy, verify=False)
            best = {"bson": float("inf"), "jld2": float("inf")}
            for _ in range(repeat + 1):
                for fmt, p in (("bson", path), ("jld2", copy)):
                    best[fmt] = min(best[fmt], _cpu(lambda p=p: tx.load(p)))
            rows.append(
                [path.name, f"{path.stat().st_size / 1e6:.2f}", f"{best['bson'] * 1e3:.2f}",
                 f"{best['jld2'] * 1e3:.2f}", f"{best['bson'] / best['jld2']:.2f}"]
            )  # fmt: skip
    print(markdown_table(["file", "MB", "BSON ms (CPU)", "JLD2 ms (CPU)", "BSON / JLD2"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
