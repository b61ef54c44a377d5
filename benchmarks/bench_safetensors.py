"""A large JLD2 <-> safetensors conversion: time and peak memory (docs/performance.md, "safetensors").

Builds a Flux-like state of ``--size`` (default 2 GiB) in ``--layers`` Dense layers (Float32
weight ``(out, in)`` + bias + ``σ = ()``) as a JLD2 file, then runs, each once and each in a fresh
process:

* ``jld2 -> safetensors``: ``treexchange convert model.jld2 model.safetensors`` (one array read at a
  time with a plain read, transposed to row-major block by block, written);
* ``safetensors -> jld2``: ``treexchange convert model.safetensors back.jld2`` (tensors are
  zero-copy views of the mapped file, written column-major block by block).

Reported per step: wall time, peak RSS above the process's RSS before the conversion (``VmHWM``
reset through ``/proc/self/clear_refs``), and the anonymous / file-backed split of the RSS at the
end. A file-backed page is page cache the kernel can drop; anonymous memory is what the
conversion itself holds. Checks that the round trip is value-equal (sampled).

Usage: ``python benchmarks/bench_safetensors.py [--size 2GiB] [--layers 16] [--dir D]``
(``--size 64MiB`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import MemoryProbe, machine, markdown_table, parse_size, run_child


def build(path: Path, size: int, layers: int) -> None:
    import treexchange as tx

    per_layer = size // layers
    cols = 4096
    rows = max(1, per_layer // (4 * cols))
    rng = np.random.default_rng(0)
    block = rng.standard_normal((rows, cols)).astype(np.float32)
    state = tx.NamedTuple(
        layers=tuple(
            tx.NamedTuple(weight=block + np.float32(i), bias=np.full(rows, i, np.float32), σ=())
            for i in range(layers)
        )
    )
    tx.save(path, model_state=state)


def child(step: str, src: str, dst: str) -> None:
    from treexchange._interop._convert import convert_formats

    probe = MemoryProbe()
    t0 = time.perf_counter()
    convert_formats(src, dst)
    wall = time.perf_counter() - t0
    print(json.dumps({"step": step, "seconds": wall, **probe.result()}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="2GiB")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--child", nargs=3, metavar=("STEP", "SRC", "DST"))
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    work = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-safetensors-"))
    try:
        jld2, st, back = work / "model.jld2", work / "model.safetensors", work / "back.jld2"
        build(jld2, parse_size(args.size), args.layers)
        size_mib = jld2.stat().st_size / (1 << 20)
        os.sync()
        rows = []
        for step, src, dst in (("jld2 -> safetensors", jld2, st), ("safetensors -> jld2", st, back)):
            r = run_child(__file__, ["--child", step, str(src), str(dst)])
            rows.append(
                [
                    r["step"],
                    f"{r['seconds']:.1f}",
                    f"{r['peak_mib']:.0f}",
                    f"{r['anon_mib']:.0f}",
                    f"{r['file_mib']:.0f}",
                ]
            )
            os.sync()
        import treexchange as tx

        a, b = tx.load(jld2, "model_state"), tx.load(back, "model_state")
        assert all(tx.values_equal(a.layers[i], b.layers[i]) for i in (0, len(a.layers) // 2, -1))
        print(json.dumps(machine()))
        print(f"file: {size_mib:.0f} MiB in {args.layers} layers")
        headers = ["step", "seconds", "peak RSS (MiB)", "anon at end (MiB)", "file-backed at end (MiB)"]
        print(markdown_table(headers, rows))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
