"""``treexchange demo``: an Equinox MLP saved for Flux, read back, checked, and the Julia to load it.

Steps (each one a real use of the library, nothing simulated):

1. build a small ``eqx.nn.MLP`` (4 -> 16 -> 16 -> 2, relu) with a fixed seed;
2. turn it into the state ``Flux.state`` gives for the equivalent Flux ``Chain`` (``flux_state``)
   and write it as ``model_state`` to ``mlp.jld2`` in the output folder (``treexchange.save``);
3. read it back into the Equinox model (``treexchange.load(..., like=mlp, layout=flux_state)``)
   and check every array and a forward pass against the original;
4. validate the file against the schema inferred from what was meant to be written;
5. port a Julia-trained LeNet into an Equinox CNN, measure it on MNIST when the data is there, and
   write it back for Flux (``demo_cnn``);
6. print the tree (as ``treexchange inspect`` does) and the Julia lines that load the file.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TextIO

import numpy as np

from .._file import load
from .._inspect import text_lines
from .._port._flux import flux_julia, flux_state
from .._reader import open as open_file
from .._save import save
from .demo_cnn import cnn_demo

DEFAULT_DIR = "treexchange-demo"
MLP_FILE = "mlp.jld2"
LENET_OUT = "lenet.jld2"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "demo",
        help="save an Equinox MLP for Flux, port a Julia-trained LeNet, and print the Julia that loads them",
        description=(
            f"Build a small Equinox MLP, write its Flux.state-compatible `model_state` to {MLP_FILE}, "
            "read it back, validate it, print its tree and the exact Julia lines that load it with "
            "Flux.loadmodel!; then port the Julia-trained LeNet (bundled in a clone of the repository) "
            f"into an Equinox CNN, measure it on MNIST, and write its Flux.state to {LENET_OUT}. "
            f"Both files go into the --out folder (default ./{DEFAULT_DIR}/, created)."
        ),
    )
    p.add_argument(
        "--out",
        default=DEFAULT_DIR,
        help=f"folder to write {MLP_FILE} and {LENET_OUT} into (default: ./{DEFAULT_DIR}, created)",
    )
    p.add_argument("--seed", type=int, default=0, help="PRNG seed for the MLP's weights (default 0)")
    p.add_argument(
        "--shared",
        default=None,
        help="folder with julia_fixtures/ and data/mnist/ for the CNN part (default: $TREEXCHANGE_SHARED, "
        "./shared, ../shared, then the repository's bundled julia_fixtures/)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    os.makedirs(args.out, exist_ok=True)
    return demo(os.path.join(args.out, MLP_FILE), seed=args.seed, stream=sys.stdout, shared=args.shared)


def build_mlp(seed: int = 0) -> Any:
    """The demo's model: ``eqx.nn.MLP(4, 2, width 16, depth 2, relu)`` with weights from ``seed``."""
    import equinox as eqx  # jax and equinox: imported when the demo runs, not by every command
    import jax

    return eqx.nn.MLP(4, 2, 16, depth=2, activation=jax.nn.relu, key=jax.random.key(seed))


def demo(path: str, *, seed: int = 0, stream: TextIO, shared: str | None = None) -> int:
    """Run the demo, writing ``path`` and ``lenet.jld2`` beside it; returns the exit code (0: all good)."""
    import jax  # jax and pydantic: imported when the demo runs, not by every command
    import jax.numpy as jnp

    from .._schema import infer_schema, validate

    def say(text: str = "", end: str = "\n") -> None:
        stream.write(text + end)

    mlp = build_mlp(seed)
    state = flux_state(mlp)
    save(path, model_state=state)
    size = os.path.getsize(path)
    sizes = " -> ".join(str(n) for n in (mlp.in_size, mlp.width_size, mlp.width_size, mlp.out_size))
    say(f"1. Built an Equinox MLP {sizes} (relu)")
    say(f"   and wrote its Flux.state-shaped `model_state` to {path} ({size} bytes).")

    restored = load(path, "model_state", like=mlp, layout=flux_state)
    same_arrays = all(
        np.array_equal(np.asarray(a), np.asarray(b))
        for a, b in zip(jax.tree_util.tree_leaves(mlp), jax.tree_util.tree_leaves(restored))
        if hasattr(a, "shape")
    )
    x = jnp.linspace(-1.0, 1.0, mlp.in_size)
    same_output = bool(jnp.array_equal(mlp(x), restored(x)))
    say(f"2. Read it back into the Equinox model: arrays identical: {same_arrays}, ", end="")
    say(f"same output: {same_output}.")

    problems = validate(path, infer_schema({"model_state": state}))
    say(f"3. Validated the file against the schema of what was written: {len(problems)} problem(s).")
    for problem in problems:
        say(f"   {problem}")

    cnn_ok = cnn_demo(os.path.dirname(path), shared, say)

    say("")
    say(f"$ treexchange inspect {path}")
    with open_file(path) as f:
        for line in text_lines(f):
            say(line)

    say("")
    say("Load it in Julia:")
    say("")
    for line in flux_julia(mlp, file=path, name="model_state").splitlines():
        say(f"    {line}")
    ok = same_arrays and same_output and not problems and cnn_ok
    return 0 if ok else 1
