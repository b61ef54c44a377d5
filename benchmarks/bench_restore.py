"""Benchmark: restore a model state into jax arrays (CPU).

Three ways to get the same Equinox MLP state (``--size`` bytes of float32, ``--layers`` Dense
layers) from disk into jax arrays:

* **treexchange**: ``treexchange.load("state.jld2", "model_state", like=abstract_mlp,
  layout=flux_state)`` -- the Flux.state file Julia can load; arrays come straight from the
  memory map (no intermediate numpy copy) into jax arrays;
* **equinox**: ``eqx.tree_deserialise_leaves("state.eqx", abstract_mlp)``;
* **flax msgpack**: ``flax.serialization.msgpack_restore(open("state.msgpack").read())`` and
  ``jax.device_put`` of every leaf;
* **orbax**: ``orbax.checkpoint.StandardCheckpointer().restore(path, abstract_arrays)`` of the
  model's arrays (``eqx.filter``), then ``eqx.combine`` with the rest of the model.

Each method is run once to warm the page cache (all three files are then read from memory, so
this measures the software, not the disk) and its result is checked against the source arrays;
then ``--repeat`` rounds run the methods in turn; the table shows the best and the median
time of each.

    python benchmarks/bench_restore.py                 # 1 GiB, the figures in docs/performance.md
    python benchmarks/bench_restore.py --size 32MiB    # quick smoke run
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([\d.]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 1GiB, 64MiB)")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=parse_size, default=1 << 30, help="state size (default 1GiB)")
    parser.add_argument("--layers", type=int, default=16, help="number of Dense layers (default 16)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per method (default 3)")
    parser.add_argument("--dir", default=None, help="where to write the files (default: a temp dir)")
    args = parser.parse_args(argv)

    import equinox as eqx
    import flax.serialization
    import jax

    from treexchange import flux_state
    from treexchange._file import load
    from treexchange._save import save

    width = max(1, int((args.size / (4 * args.layers)) ** 0.5))
    abstract = eqx.filter_eval_shape(
        eqx.nn.MLP, width, width, width, depth=args.layers - 1, key=jax.random.key(0)
    )
    rng = np.random.default_rng(0)
    leaves, treedef = jax.tree_util.tree_flatten(abstract)
    filled = [
        rng.standard_normal(leaf.shape, dtype=np.float32) if isinstance(leaf, jax.ShapeDtypeStruct) else leaf
        for leaf in leaves
    ]
    arrays = [a for a in filled if isinstance(a, np.ndarray)]
    total = sum(a.nbytes for a in arrays)
    concrete = jax.tree_util.tree_unflatten(treedef, filled)  # numpy arrays in the MLP's structure
    state = flux_state(concrete)
    flax_state = {
        "layers": {
            str(i): {"weight": layer.weight, "bias": layer.bias} for i, layer in enumerate(concrete.layers)
        }
    }

    import orbax.checkpoint as ocp

    workdir = args.dir or tempfile.mkdtemp(prefix="bench_restore_")
    os.makedirs(workdir, exist_ok=True)
    orbax_path = os.path.join(workdir, "state.orbax")
    checkpointer = ocp.StandardCheckpointer()
    if os.path.exists(orbax_path):
        import shutil

        shutil.rmtree(orbax_path)
    # saved as jax arrays (as a JAX user's checkpoint is), so that orbax restores jax arrays
    checkpointer.save(
        orbax_path, jax.tree_util.tree_map(jax.numpy.asarray, eqx.filter(concrete, eqx.is_array))
    )
    checkpointer.wait_until_finished()
    abstract_arrays, abstract_rest = eqx.partition(abstract, lambda x: isinstance(x, jax.ShapeDtypeStruct))
    paths = {name: os.path.join(workdir, f"state.{name}") for name in ("jld2", "eqx", "msgpack")}
    save(paths["jld2"], model_state=state)
    eqx.tree_serialise_leaves(paths["eqx"], concrete)
    with open(paths["msgpack"], "wb") as f:
        f.write(flax.serialization.msgpack_serialize(flax_state))
    del flax_state

    def treexchange_restore() -> Any:
        return load(paths["jld2"], "model_state", like=abstract, layout=flux_state)

    def treexchange_numpy() -> Any:
        return load(paths["jld2"], "model_state", like=abstract, layout=flux_state, numpy=True)

    def equinox_restore() -> Any:
        return eqx.tree_deserialise_leaves(paths["eqx"], abstract)

    def flax_restore() -> Any:
        with open(paths["msgpack"], "rb") as f:
            restored = flax.serialization.msgpack_restore(f.read())
        return jax.tree_util.tree_map(jax.device_put, restored)

    def orbax_restore() -> Any:
        return eqx.combine(checkpointer.restore(orbax_path, abstract_arrays), abstract_rest)

    def check_mlp(out: Any) -> None:
        got = [x for x in jax.tree_util.tree_leaves(out) if hasattr(x, "shape")]
        assert len(got) == len(arrays), (len(got), len(arrays))
        for a, b in zip(got, arrays):
            assert isinstance(a, jax.Array) and np.array_equal(np.asarray(a), b)

    def check_numpy(out: Any) -> None:
        got = [x for x in jax.tree_util.tree_leaves(out) if hasattr(x, "shape")]
        assert all(type(a) is np.ndarray and np.array_equal(a, b) for a, b in zip(got, arrays))

    def check_flax(out: Any) -> None:
        for i, layer in enumerate(concrete.layers):
            got = out["layers"][str(i)]
            assert isinstance(got["weight"], jax.Array)
            assert np.array_equal(np.asarray(got["weight"]), layer.weight)
            assert np.array_equal(np.asarray(got["bias"]), layer.bias)

    methods: list[tuple[str, Callable[[], Any], Callable[[Any], None]]] = [
        ("treexchange `load(..., like=, layout=flux_state)`", treexchange_restore, check_mlp),
        ("`equinox.tree_deserialise_leaves`", equinox_restore, check_mlp),
        ("`flax.serialization.msgpack_restore` + `device_put`", flax_restore, check_flax),
        ("orbax `StandardCheckpointer().restore`", orbax_restore, check_mlp),
        ("treexchange, `numpy=True` (zero-copy views, no jax arrays)", treexchange_numpy, check_numpy),
    ]
    sizes = {name: os.path.getsize(p) for name, p in paths.items()}
    print(f"# restore benchmark: {args.layers} Dense layers of {width}x{width} float32, "
          f"{total / 2**20:.1f} MiB of arrays")  # fmt: skip
    print("# files: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items()))
    print(f"# {platform.platform()}, Python {platform.python_version()}, jax {jax.__version__}, "
          f"{os.cpu_count()} CPUs, jax devices: {jax.devices()}")  # fmt: skip
    print()
    print("| method | best (s) | median (s) | GiB/s (best) |")
    print("|---|---|---|---|")
    for _, run, check in methods:  # warm-up: page cache, imports; and check every result once
        out = run()
        jax.block_until_ready(out)
        check(out)
        del out
    # Rounds interleave the methods, so that load from other processes hits all of them alike.
    times: dict[str, list[float]] = {name: [] for name, _, _ in methods}
    for _ in range(args.repeat):
        for name, run, _ in methods:
            gc.collect()
            start = time.perf_counter()
            out = run()
            jax.block_until_ready(out)
            times[name].append(time.perf_counter() - start)
            del out
    results = {}
    for name, _, _ in methods:
        best, median = min(times[name]), statistics.median(times[name])
        results[name] = best
        print(f"| {name} | {best:.3f} | {median:.3f} | {total / 2**30 / best:.2f} |", flush=True)
    ours = results[methods[0][0]]
    others = {name: results[name] for name, _, _ in methods[1:4]}
    print()
    for name, t in others.items():
        print(f"# treexchange is {t / ours:.2f}x faster than {name} (best times)")
    if args.dir is None:
        import shutil

        shutil.rmtree(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
