"""JLD2 <-> orbax against orbax's own save/restore of the same tree (docs/performance.md, "orbax").

Builds a Flux-like state of ``--size`` (default 1 GiB) in ``--layers`` Dense layers (Float32
weight + bias + ``σ = ()``) as a JLD2 file, then runs each step once, each in a fresh process:

* ``jld2 -> orbax``: ``treexchange convert model.jld2 ckpt.orbax`` (zero-copy views of the JLD2
  file handed to orbax, plus the tree item);
* ``orbax -> jld2``: ``treexchange convert ckpt.orbax back.jld2`` (orbax restores the arrays in
  256 MiB batches, the JLD2 writer writes them);
* ``orbax -> jld2, spilled``: the same through spill files (what ``convert`` does for a checkpoint
  larger than half the available memory): each batch is moved to a file-backed map, pages released;
* ``orbax save``: ``ocp.StandardCheckpointer().save`` of the same tree already in memory (numpy);
* ``orbax restore``: ``ocp.StandardCheckpointer().restore`` of that checkpoint into numpy.

Reported: wall time and peak RSS above the process's RSS when the step starts (for ``orbax save``
the tree is already in memory then). One run each: the machine is shared, keep it short.

Usage: ``python benchmarks/bench_orbax.py [--size 1GiB] [--layers 8] [--dir D]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from _common import MemoryProbe, machine, markdown_table, parse_size, run_child


def build(path: Path, size: int, layers: int) -> None:
    import treexchange as tx

    cols = 4096
    rows = max(1, size // layers // (4 * cols))
    block = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    state = tx.NamedTuple(
        layers=tuple(
            tx.NamedTuple(weight=block + np.float32(i), bias=np.full(rows, i, np.float32), σ=())
            for i in range(layers)
        )
    )
    tx.save(path, model_state=state)


def _plain_tree(jld2: str) -> dict[str, object]:
    """The same arrays as a nested dict of numpy arrays in memory (what an orbax user saves)."""
    import treexchange as tx

    state = tx.load(jld2, "model_state", mmap=False)
    return {
        "layers": {
            str(i): {"weight": np.ascontiguousarray(layer.weight), "bias": layer.bias}
            for i, layer in enumerate(state.layers)
        }
    }


def child(step: str, src: str, dst: str) -> None:
    import orbax.checkpoint as ocp

    from treexchange._interop._convert import convert_formats

    tree = _plain_tree(src) if step == "orbax save" else None
    probe = MemoryProbe()
    t0 = time.perf_counter()
    if step == "orbax save":
        with ocp.StandardCheckpointer() as ckptr:
            ckptr.save(Path(dst).absolute(), tree, force=True)
            ckptr.wait_until_finished()
    elif step == "orbax restore":
        with ocp.StandardCheckpointer() as ckptr:
            restored = ckptr.restore(Path(src).absolute())
        assert restored["layers"]["0"]["weight"].shape[1] == 4096
    elif step == "orbax -> jld2, spilled":
        convert_formats(src, dst, spill_above=0)  # as for a checkpoint larger than memory
    else:
        convert_formats(src, dst)
    wall = time.perf_counter() - t0
    print(json.dumps({"step": step, "seconds": wall, **probe.result()}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--child", nargs=3, metavar=("STEP", "SRC", "DST"))
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    import tempfile

    work = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-orbax-"))
    try:
        jld2, ckpt, back, own = work / "model.jld2", work / "ckpt.orbax", work / "back.jld2", work / "own"
        build(jld2, parse_size(args.size), args.layers)
        os.sync()
        steps = (
            ("jld2 -> orbax", jld2, ckpt),
            ("orbax -> jld2", ckpt, back),
            ("orbax -> jld2, spilled", ckpt, back),
            ("orbax save", jld2, own),
            ("orbax restore", own, own),
        )
        rows = []
        for step, src, dst in steps:
            r = run_child(__file__, ["--child", step, str(src), str(dst)])
            rows.append([r["step"], f"{r['seconds']:.1f}", f"{r['peak_mib']:.0f}"])
            os.sync()
        import treexchange as tx

        assert tx.values_equal(tx.load(jld2), tx.load(back))
        print(json.dumps(machine()))
        print(f"tree: {jld2.stat().st_size / (1 << 20):.0f} MiB in {args.layers} layers")
        print(markdown_table(["step", "seconds", "peak RSS above start (MiB)"], rows))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
