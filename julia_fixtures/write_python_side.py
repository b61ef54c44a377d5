"""Write the Python side of the compatibility check: files treexchange writes from Python values
(not re-encoded from Julia's), which verify.jl then loads in Julia::

    python write_python_side.py out/python
    julia --project=. verify.jl --python out/python

* ``eqx_mlp.jld2``: ``model_state = flux_state(mlp)`` of an Equinox MLP 4 -> 16 -> 16 -> 2 (relu),
  plus an input ``x`` and the MLP's output ``y`` for it: Julia loads the state into
  ``Chain(Dense(4 => 16, relu), Dense(16 => 16, relu), Dense(16 => 2))`` with
  ``Flux.loadmodel!`` and must compute the same ``y``.
* ``compressed.jld2``: the arrays of arrays.jl, built here from the same formulas, written with
  ``compress=True`` (the chunked layouts JLD2 must read: multi-chunk, width-3 fallback, and a
  two-level B-tree).
"""

from __future__ import annotations

import os
import sys

import equinox as eqx
import jax
import numpy as np

import treexchange as tx


def compressed_arrays() -> dict[str, np.ndarray]:
    """arrays.jl's ``compressed_arrays()``, in Julia shape (i, j, k 1-based)."""
    i = np.arange(1, 1025)[:, None]
    return {
        "big": ((7 * i + 13 * np.arange(1, 2049)[None, :]) % 1001 / 8).astype(np.float32),
        "v70k": (np.arange(1, 70_001) % 977) / 4,
        "tall": ((i + 3 * np.arange(1, 17_001)[None, :]) % 4099).astype(np.float32),
    }


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    mlp = eqx.nn.MLP(4, 2, 16, depth=2, activation=jax.nn.relu, key=jax.random.key(0))
    x = np.linspace(-1.0, 1.0, 4, dtype=np.float32)
    y = np.asarray(mlp(x))
    tx.save(os.path.join(out, "eqx_mlp.jld2"), model_state=tx.flux_state(mlp), x=x, y=y)
    tx.save(os.path.join(out, "compressed.jld2"), compressed_arrays(), compress=True)
    print("wrote eqx_mlp.jld2 and compressed.jld2 to", out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "out", "python"))
