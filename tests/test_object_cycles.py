"""Files whose objects refer to each other in a cycle, through the ports and the tree formats.

JLD2 and BSON store references, so a mutable struct may hold itself: ChrisRackauckas/
universal_differential_equations' ``LotkaVolterra/results/Scenario_1_recovery_0.005.jld2`` (MIT;
tests/corpus_sources.md) holds a DataDrivenDiffEq solution whose basis function's closure holds
the function again. ``convert`` (JLD2) keeps such a graph; every walk that follows a value's fields
must stop at the cycle: before, ``convert --flux-state`` ended in a RecursionError on that file,
``convert --dry-run`` and ``convert`` to safetensors ran for minutes without end.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

import treexchange as tx
from treexchange import ConversionError, JuliaStruct, NamedTuple
from treexchange._cli import main
from treexchange._interop._fluxmigrate import migrate_flux_state


def _cyclic_file(tmp_path: Path) -> Path:
    """``h = Holder(model, nothing); h.me = h`` (a mutable struct holding a Dense and itself) and a
    ``solution`` without Flux layers that holds itself one level down, as the real file does."""
    dense = JuliaStruct(
        "Flux.Dense{NNlib.#relu, Array{Float32, 2}, Array{Float32, 1}}",
        {
            "weight": np.arange(6, dtype=np.float32).reshape(2, 3),
            "bias": np.ones(2, np.float32),
            "σ": JuliaStruct("NNlib.#relu", {}),
        },
    )
    holder = JuliaStruct("Main.Holder", {"model": dense, "me": None}, mutable=True)
    holder.fields["me"] = holder
    closure = JuliaStruct("Main.Basis", {"f": None, "u": np.zeros(3)}, mutable=True)
    closure.fields["f"] = JuliaStruct("Main.#f#1", {"contents": closure})
    path = tmp_path / "cyclic.jld2"
    tx.save(path, h=holder, solution=NamedTuple(basis=closure, t=np.arange(4.0)), p=np.ones(8, np.float32))
    again = tx.load(path)
    assert (
        again["h"]["me"] is again["h"]
        and again["solution"]["basis"]["f"]["contents"] is again["solution"]["basis"]
    )
    return path


def test_ports_name_a_cycle_and_port_the_model_inside_it(tmp_path: Path) -> None:
    path = _cyclic_file(tmp_path)
    with pytest.raises(ConversionError, match=r"h.me refers to h, which holds it: a cycle"):
        tx.from_flux(path, "h")
    model = tx.from_flux(path, ("h", "model"))
    np.testing.assert_allclose(np.asarray(model(np.ones(3, np.float32))), [4.0, 13.0])
    ported = tx.from_flux(path, ("h", "model"), flat="p")  # the layers from it, the numbers from p
    np.testing.assert_allclose(np.asarray(ported(np.ones(3, np.float32))), [4.0, 4.0])


def test_convert_flux_state_writes_a_cycle_without_layers_as_it_is_and_names_one_with_layers(
    tmp_path: Path,
) -> None:
    path = _cyclic_file(tmp_path)
    with pytest.raises(ConversionError, match=r"h.me refers to h, which holds it"):
        migrate_flux_state(path, tmp_path / "state.jld2", out=io.StringIO())
    tx.save(path, solution=tx.load(path, "solution"), model=tx.load(path, "h")["model"])
    printed = io.StringIO()
    roots = migrate_flux_state(path, tmp_path / "state.jld2", out=printed)
    assert "solution: written as it is (no Flux layers in it)" in printed.getvalue()
    back = tx.load(tmp_path / "state.jld2", "solution")
    assert back["basis"]["f"]["contents"] is back["basis"]
    assert list(roots["model"]) == ["weight", "bias", "σ"]


def test_tree_formats_refuse_a_cycle_and_the_jld2_dry_run_lists_each_array_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _cyclic_file(tmp_path)
    assert main(["convert", str(path), str(tmp_path / "out.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "refers to itself (a cycle back to h)" in err and "(at h.me)" in err
    assert not (tmp_path / "out.safetensors").exists()
    assert main(["convert", str(path), str(tmp_path / "out.jld2"), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" -> ")[0] for line in lines] == [
        "h.model.weight",
        "h.model.bias",
        "solution.basis.u",
        "solution.t",
        "p",
    ]
