"""``tx.save`` of ``flux_state`` for Equinox and Flax nnx LeNets: the same Julia types as Julia's file.

Compared node by node with ``treexchange inspect --json`` of the Julia-written
``flux-state/silver-bullet_lenet.jld2``. Julia spells a homogeneous tuple type either way:
``NTuple{4, Int64}`` *is* ``Tuple{Int64, Int64, Int64, Int64}`` (one and the same type); the JLD2
that wrote the LeNet commits the ``NTuple`` form for every length, current JLD2 (which our writer
follows) only for length 2. Types are compared with that one spelling difference expanded away.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import pytest
from conftest import REPO, require_fixture
from flax import nnx
from test_port_lenet import LENET

import treexchange as tx
from treexchange._port._eqx import build_equinox
from treexchange._port._nnx import build_nnx


def expand_ntuples(text: str) -> str:
    """``NTuple{3, Int64}`` -> ``Tuple{Int64, Int64, Int64}`` (recursively, nested braces kept)."""
    while (start := text.find("NTuple{")) >= 0:
        i = start + len("NTuple{")
        comma = text.index(",", i)
        count = int(text[i:comma])
        j, depth = comma + 1, 0
        while depth > 0 or text[j] != "}":
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        element = text[comma + 1 : j].strip()
        text = text[:start] + "Tuple{" + ", ".join([element] * count) + "}" + text[j + 1 :]
    return text


def test_expand_ntuples() -> None:
    assert (
        expand_ntuples("NTuple{2, Tuple{NTuple{1, Int64}}}")
        == "Tuple{Tuple{Tuple{Int64}}, Tuple{Tuple{Int64}}}"
    )


def inspect_types(path: Path) -> dict[str, str]:
    code = (
        "import sys; from treexchange._cli import main; "
        "sys.argv = ['treexchange', 'inspect', '--json', sys.argv[1]]; main()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    types = {}
    for line in out.splitlines():
        node: dict[str, Any] = json.loads(line)
        types[json.dumps(node["path"], ensure_ascii=False)] = expand_ntuples(node["julia_type"])
    return types


def _linen_lenet() -> Any:
    from treexchange._port._linen import build_linen

    module, abstract = build_linen(LENET)
    return module, jax.tree_util.tree_map(lambda s: jax.numpy.zeros(s.shape, s.dtype), abstract)


@pytest.mark.parametrize(
    "target",
    [  # linen in the default run; the other two (20-30 s each) in the slow tier
        pytest.param("equinox", marks=pytest.mark.slow),
        pytest.param("nnx", marks=pytest.mark.slow),
        "linen",
    ],
)
def test_saved_lenet_state_has_the_julia_written_types(target: str, tmp_path: Path) -> None:
    julia_file = require_fixture("flux-state/silver-bullet_lenet.jld2")
    model = (
        build_equinox(LENET, key=jax.random.key(0))
        if target == "equinox"
        else build_nnx(LENET, rngs=nnx.Rngs(0))
        if target == "nnx"
        else _linen_lenet()
    )
    ours = tmp_path / "lenet.jld2"
    tx.save(ours, lenet_state=tx.flux_state(model, flux="0.14"))
    theirs, mine = inspect_types(julia_file), inspect_types(ours)
    assert list(mine) == list(theirs)  # the same nodes, in the same order
    assert mine == theirs
