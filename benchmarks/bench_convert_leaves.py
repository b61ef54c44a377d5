"""``convert`` of many small leaves to safetensors / orbax: CPU time of the whole conversion and of
its metadata part (docs/performance.md, "Other formats: many small leaves").

Builds a Flux-like state of ``--leaves`` small Float32 arrays (Dense layers ``16 × 16`` weight +
bias, ``σ = ()``) as a JLD2 file, then converts it ``--repeat`` times per target (best CPU time)
and times the tree metadata alone (``lazy_tree`` + ``plan_export``: the skeleton, the shared-object
records, every array's node; no array data). For a before/after comparison run it with
``PYTHONPATH`` at an earlier checkout (``git archive <commit> treexchange | tar -x -C DIR``).

Usage: ``python benchmarks/bench_convert_leaves.py [--leaves 10000] [--repeat 5]
[--targets safetensors,orbax]``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leaves", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--targets", default="safetensors,orbax")
    args = parser.parse_args()

    import treexchange as tx
    from treexchange._interop import _safetensors
    from treexchange._interop._convert import convert_formats
    from treexchange._interop._source import lazy_tree

    work = Path(tempfile.mkdtemp(prefix="tx-convert-leaves-"))
    try:
        rng = np.random.default_rng(0)
        layers = tuple(
            tx.NamedTuple(weight=rng.random((16, 16), np.float32), bias=rng.random(16, np.float32), σ=())
            for _ in range(args.leaves // 2)
        )
        source = work / "model.jld2"
        tx.save(source, model_state=tx.NamedTuple(layers=layers))
        best: dict[str, float] = {}
        for _ in range(args.repeat):
            t0 = time.process_time()
            _safetensors.plan_export(lazy_tree(source))
            best["metadata"] = min(best.get("metadata", 1e9), time.process_time() - t0)
            for target in args.targets.split(","):
                out = work / f"out.{target}"
                shutil.rmtree(out, ignore_errors=True)
                out.unlink(missing_ok=True)
                t0 = time.process_time()
                convert_formats(source, out)
                best[target] = min(best.get(target, 1e9), time.process_time() - t0)
        print(f"{tx.__file__}: {args.leaves} leaves, CPU best of {args.repeat}")
        for step, seconds in best.items():
            print(f"  {step:12s} {seconds * 1e3:9.1f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
