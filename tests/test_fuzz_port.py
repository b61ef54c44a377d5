"""The port fuzzed: mutated real Flux model files through ``from_flux`` and ``convert
--flux-state``, and Lux files through ``from_lux``, give a model, a file, or a TreexchangeError;
never another exception, never a hang.

The reading fuzz (``tests/test_fuzz_read.py``) proves the reader; this one the layers built from
what a damaged file holds. Its first run (2026-11-28, 37,000 cases) found five crashes that
reading alone could not: a whole model's ``Conv`` whose weight became a vector, or whose
``groups`` became 0, reached equinox's constructors (``ValueError``, ``ZeroDivisionError``); a
weight with a dimension of 0 divided equinox's initialiser by zero; a BSON name whose bytes are
not UTF-8 crashed the JLD2 writer (``UnicodeEncodeError``); a Lux ``ps`` referring back to its
parent sent ``from_lux`` into endless recursion, and a damaged ComponentArray axis gave a
``KeyError``. Mutations: those of the reading fuzz
(JLD2: header fields, object references moved to siblings, sizes; BSON: lengths, type bytes,
integers, back-references, bit flips). Seeds: the bundled BSON models (a whole model, a parameter
list and a flat vector, the last two with their architectures), the bundled Lux files (a
ComponentArray, a ps/st pair) and, when ``../shared`` is there, its small whole-model and
``Flux.state`` files.

``TX_PORT_FUZZ_CASES=20000 python -m pytest tests/test_fuzz_port.py -m slow`` runs a long campaign.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _bson_fuzz import BsonSeed
from _fuzzops import FuzzOps
from conftest import BUNDLED_DIR, FIXTURES
from test_fuzz_read import _Seed

import treexchange as tx
from treexchange._cli import main

TIME_LIMIT = 10.0  # CPU seconds a case may take (a hang otherwise)

MODEL_ZOO_CONV = (
    "Chain(Conv((3, 3), 1 => 16, relu, pad=(1, 1)), MaxPool((2, 2)), "
    "Conv((3, 3), 16 => 32, relu, pad=(1, 1)), MaxPool((2, 2)), "
    "Conv((3, 3), 32 => 32, relu, pad=(1, 1)), MaxPool((2, 2)), Flux.flatten, Dense(288 => 10), softmax)"
)
LENET = (
    "Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), MaxPool((2, 2)), "
    "Flux.flatten, Dense(256 => 120, relu), Dense(120 => 84, relu), Dense(84 => 10))"
)
SEEDS: list[tuple[Path, Any, str | None]] = [
    (BUNDLED_DIR / "bson" / "mcreel_snm_arma_neuralmodel.bson", "nnmodel", None),
    (BUNDLED_DIR / "bson" / "germanov_phones_reader_digits.bson", "model", None),
    (BUNDLED_DIR / "bson" / "tetsugps_mnist_conv_params.bson", "params", MODEL_ZOO_CONV),
    (
        BUNDLED_DIR / "bson" / "plasma_1d1v_weights.bson",
        ("prepared_weights", 1),
        "Chain(Dense(3 => 16, σ), Dense(16 => 16, σ), Dense(16 => 1))",
    ),
    (FIXTURES / "flux-model" / "vqvae_autoencoder7x7x16.jld2", "autoencoder", None),
    (FIXTURES / "flux-model" / "kitml_example_model.jld2", "nn", None),
    (FIXTURES / "flux-model" / "solaris_test_model.jld2", "nn", None),
    (FIXTURES / "bson" / "eliascarv_mlp.bson", "model", None),
    (FIXTURES / "flux-state" / "silver-bullet_lenet.jld2", "lenet_state", LENET),
]
LUX_SEEDS: list[tuple[Path, dict[str, Any]]] = [  # from_lux's keywords
    (
        BUNDLED_DIR / "lux" / "couplednode_ns2d_trained_model_posteriori.jld2",
        {
            "ps": "θ_posteriori",
            "st": None,
            "architecture": "Chain(layer_1 = NoOpLayer(), layer_2 = Conv((7, 7), 2 => 2, tanh, pad=3, "
            "use_bias=false), layer_3 = Conv((7, 7), 2 => 2, pad=3, use_bias=false), layer_4 = NoOpLayer())",
        },
    ),
    (
        BUNDLED_DIR / "lux" / "lux-docs_v0.5.23_trained_model.jld2",
        {
            "ps": "ps_trained",
            "st": "st_trained",
            "architecture": {"lstm_cell": "LSTMCell(2 => 8)", "classifier": "Dense(8 => 1, sigmoid)"},
        },
    ),
]


def _seeds() -> list[tuple[_Seed | BsonSeed, Any, Any]]:
    """``(seed, name, architecture)``; a Lux seed's name is None and its architecture the
    keywords of ``from_lux``."""
    out: list[tuple[_Seed | BsonSeed, Any, Any]] = []
    for path, name, architecture in SEEDS:
        if path.is_file():
            raw = path.read_bytes()
            seed = BsonSeed(path.name, raw) if path.suffix == ".bson" else _Seed(path.name, raw)
            out.append((seed, name, architecture))
    for path, keywords in LUX_SEEDS:
        if path.is_file():
            out.append((_Seed(path.name, path.read_bytes()), None, keywords))
    return out


def _cases(n: int, seed: int) -> Iterator[tuple[str, bytes, str, Any, Any]]:
    seeds = _seeds()
    rng = random.Random(seed)
    for i in range(n):
        source, name, architecture = seeds[i % len(seeds)]
        desc, raw = source.mutate(rng)
        suffix = ".bson" if isinstance(source, BsonSeed) else ".jld2"
        yield f"case {i}: {source.name}: {desc}", raw, suffix, name, architecture


def _run(n: int, seed: int, tmp_path: Path) -> dict[str, int]:
    out = tmp_path / "out.jld2"
    with FuzzOps(TIME_LIMIT) as ops:
        for desc, raw, suffix, name, architecture in _cases(n, seed):
            path = tmp_path / f"in{suffix}"
            path.write_bytes(raw)
            text = ["--architecture", architecture] if isinstance(architecture, str) else []
            argv = ["convert", "--flux-state", *text, str(path), str(out)]
            if name is None:
                ops.run("from_lux", desc, tx.from_lux, path, **architecture)
            else:
                ops.run("from_flux", desc, tx.from_flux, path, name, architecture)
                ops.run("migrate", desc, _cli_succeeds, argv, after=out)
            path.unlink()
            leftovers = sorted(os.listdir(tmp_path))  # (no output of a refused case, no temporary)
            if leftovers:
                ops.failures.append(f"left {leftovers}: {desc}")
                for name_left in leftovers:
                    left = tmp_path / name_left
                    if left.is_dir():
                        shutil.rmtree(left)
                    else:
                        left.unlink()
    return ops.check()


def _cli_succeeds(argv: list[str]) -> bool:
    """Whether the CLI exits with 0 (its output swallowed)."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        return main(argv) == 0


def test_a_short_port_fuzz(tmp_path: Path) -> None:
    outcomes = _run(40, 11, tmp_path)
    assert outcomes["ok"] and outcomes["error"], outcomes  # the mutations bite, and not all of them


@pytest.mark.slow  # ~30 s
def test_the_port_fuzz(tmp_path: Path) -> None:
    n = int(os.environ.get("TX_PORT_FUZZ_CASES", "3000"))
    outcomes = _run(n, 20261128, tmp_path)
    assert outcomes["error"] > n // 10 and outcomes["ok"] > n // 10, outcomes
