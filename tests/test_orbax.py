"""JLD2 <-> orbax checkpoints through orbax-checkpoint: every fixture, dtypes, markers, sharding.

orbax itself is the independent reader (``StandardCheckpointer``/``PyTreeCheckpointer`` restore the
``state`` item as a JAX program would); the Julia-written fixtures are the trees.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from _interop_cases import NOT_REWRITABLE, assert_convert_refused
from conftest import all_fixtures_or_skip, fixture_files, fixture_ids, require_fixture

import treexchange as tx
from treexchange import NamedTuple
from treexchange._cli import main
from treexchange._interop._orbax import OrbaxSource, load_orbax, save_orbax
from treexchange._interop._source import lazy_tree

ocp = pytest.importorskip("orbax.checkpoint")

FIXTURES = all_fixtures_or_skip("**/*.jld2")  # JLD2 files (a JLD v1 file is refused: WrongFormatError)


@pytest.mark.parametrize("fixture", FIXTURES, ids=fixture_ids(fixture_files("**/*.jld2")) or None)
def test_fixture_round_trip_jld2_orbax(tmp_path: Path, fixture: Path) -> None:
    original = tx.load(fixture)
    ckpt = tmp_path / "ckpt"
    save_orbax(ckpt, lazy_tree(fixture))
    assert tx.values_equal(load_orbax(ckpt), original)
    if fixture.name in NOT_REWRITABLE:
        return
    out = tmp_path / "back.jld2"
    assert main(["convert", str(ckpt), str(out)]) == 0
    assert tx.values_equal(tx.load(out), original)


def _all_dtypes_state() -> NamedTuple:
    rng = np.random.default_rng(3)
    arrays = {}
    for dt in (np.bool_, np.int8, np.uint16, np.int32, np.uint64, np.float16, ml_dtypes.bfloat16, np.float64):
        raw = rng.integers(0, 256, 24 * np.dtype(dt).itemsize, dtype=np.uint8)
        if dt == np.bool_:
            raw &= 1
        arrays[np.dtype(dt).name] = np.asfortranarray(raw.view(dt).reshape(4, 6))
    arrays["complex64"] = (rng.standard_normal((3, 2)) + 1j).astype(np.complex64)
    arrays["complex128"] = rng.standard_normal(5) + 2j
    layer = NamedTuple(**arrays, empty=np.zeros((0, 4), np.float32), σ=(), act=None, scale=np.float32(0.5))
    return NamedTuple(layers=(layer, ()), name="mlp")


def test_dtypes_markers_and_empty_arrays_round_trip_bit_exact(tmp_path: Path) -> None:
    state = _all_dtypes_state()
    jld2 = tmp_path / "m.jld2"
    tx.save(jld2, model_state=state)
    ckpt = tmp_path / "m.orbax"
    assert main(["convert", str(jld2), str(ckpt)]) == 0
    back = tmp_path / "back.jld2"
    assert main(["convert", str(ckpt), str(back)]) == 0
    again = tx.load(back, "model_state")
    assert tx.values_equal(again, state)
    for key, value in state.layers[0].items():
        if isinstance(value, np.ndarray):
            assert (
                np.ascontiguousarray(again.layers[0][key]).tobytes() == np.ascontiguousarray(value).tobytes()
            )


def test_state_item_is_a_plain_orbax_pytree_in_julia_shape(tmp_path: Path) -> None:
    lenet = require_fixture("flux-state/silver-bullet_lenet.jld2")
    ckpt = tmp_path / "lenet"
    save_orbax(ckpt, lazy_tree(lenet))
    restored = ocp.StandardCheckpointer().restore(ckpt / "state")
    weight = tx.load(lenet, "lenet_state").layers[5].weight  # Dense(256 => 120): Julia (120, 256)
    assert sorted(restored["layers"]) == ["0", "2", "5", "6", "7"]
    np.testing.assert_array_equal(np.asarray(restored["layers"]["5"]["weight"]), weight)
    assert restored["layers"]["5"]["weight"].shape == (120, 256)


def test_batched_restore_and_spill_give_the_same_values(tmp_path: Path) -> None:
    lenet = require_fixture("flux-state/silver-bullet_lenet.jld2")
    ckpt = tmp_path / "lenet"
    save_orbax(ckpt, lazy_tree(lenet))
    spill = tmp_path / "spill"
    spill.mkdir()
    back = load_orbax(ckpt, batch_bytes=10_000, spill_dir=spill)
    assert tx.values_equal(back, tx.load(lenet))
    assert isinstance(back["lenet_state"].layers[5].weight, np.memmap)  # moved to a file-backed map
    assert list(spill.iterdir()) == []  # temporary files are gone (the maps stay valid)


def test_plain_pytree_checkpoint_imports_as_namedtuples(tmp_path: Path) -> None:
    params = {"dense": {"kernel": np.ones((3, 2), np.float32), "bias": np.arange(2, dtype=np.float32)}}
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "flax", params)
        ckptr.wait_until_finished()
    value = load_orbax(tmp_path / "flax")["state"]
    assert isinstance(value, NamedTuple) and isinstance(value.dense, NamedTuple)
    np.testing.assert_array_equal(value.dense["bias"], params["dense"]["bias"])
    out = tmp_path / "flax.jld2"
    assert main(["convert", str(tmp_path / "flax"), str(out)]) == 0
    assert tx.load(out, "state").dense.kernel.shape == (3, 2)


def test_cli_dry_run_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lenet = require_fixture("flux-state/silver-bullet_lenet.jld2")
    ckpt = tmp_path / "out"
    assert main(["convert", str(lenet), str(ckpt), "--to", "orbax", "--dry-run"]) == 0
    assert (
        "lenet_state.layers[6].weight -> layers.5.weight  (120, 256) float32  none" in capsys.readouterr().out
    )
    assert not ckpt.exists()
    assert main(["convert", str(lenet), str(ckpt), "--to", "orbax"]) == 0
    assert main(["convert", str(ckpt), str(tmp_path / "b.jld2"), "--dry-run"]) == 0
    assert "layers.5.weight -> lenet_state.layers[6].weight" in capsys.readouterr().out
    assert OrbaxSource(ckpt).document is not None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["convert", str(empty), str(tmp_path / "c.jld2")]) == 2
    assert "neither a treexchange nor a PyTree orbax checkpoint" in capsys.readouterr().err


SHARDED = textwrap.dedent(
    r"""
    import json, sys
    import jax, numpy as np, ml_dtypes
    from jax.sharding import NamedSharding, PartitionSpec as P
    import orbax.checkpoint as ocp
    import treexchange as tx
    from treexchange import NamedTuple
    from treexchange._interop._orbax import load_orbax, save_orbax
    from treexchange._interop._source import lazy_tree

    assert len(jax.devices()) == 8, jax.devices()
    tmp = sys.argv[1]
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
    grid = NamedSharding(mesh, P("data", "model"))
    w = np.asfortranarray(np.arange(64 * 32, dtype=np.float32).reshape(64, 32))
    b = np.arange(64, dtype=np.float32).astype(ml_dtypes.bfloat16)
    # a Float64 array too: jax (x64 off) would narrow it, so it must stay numpy and exact
    exact = np.arange(64.0).reshape(8, 8) / 3
    layers = (NamedTuple(weight=w, bias=b, σ=()),)
    state = NamedTuple(layers=layers, odd=np.ones((3, 5), np.float32), f64=exact)
    tx.save(tmp + "/m.jld2", model_state=state)
    report = {}

    # export: every array built shard by shard from the file, then written by orbax per device
    save_orbax(tmp + "/ckpt", lazy_tree(tmp + "/m.jld2"), sharding=grid)
    meta = ocp.PyTreeCheckpointer().metadata(tmp + "/ckpt/state")
    tree = getattr(meta, "item_metadata", meta)
    tree = getattr(tree, "tree", tree)
    saved = tree["layers"]["0"]["weight"].sharding
    report["saved_spec"] = [list(x) if isinstance(x, tuple) else x for x in saved.partition_spec]

    # import straight into the sharding: each device holds exactly its slice
    back = load_orbax(tmp + "/ckpt", sharding=grid)["model_state"]
    got = back.layers[0].weight
    report["type"] = type(got).__name__
    report["sharding_ok"] = got.sharding == grid
    report["shards"] = [
        [list(s.data.shape), bool(np.array_equal(np.asarray(s.data), w[s.index]))]
        for s in got.addressable_shards
    ]
    report["devices"] = sorted(str(s.device) for s in got.addressable_shards)
    # arrays the grid does not fit (rank 1; 3x5 not divisible) are replicated on the same mesh
    report["bias_replicated"] = back.layers[0].bias.sharding.is_fully_replicated
    report["odd_replicated"] = back.odd.sharding.is_fully_replicated
    tx.save(tmp + "/back.jld2", model_state=back)
    report["equal"] = tx.values_equal(tx.load(tmp + "/back.jld2", "model_state"), state)
    print(json.dumps(report))
    """
)


def test_sharded_export_and_import_on_8_host_devices(tmp_path: Path) -> None:
    # (the suite's own XLA_FLAGS kept, conftest.py: eight devices added to them)
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8"
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", SHARDED, str(tmp_path)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["saved_spec"] == ["data", "model"]
    assert report["type"] == "ArrayImpl" and report["sharding_ok"]
    assert len(report["shards"]) == 8 and len(set(report["devices"])) == 8
    assert all(shape == [32, 8] and equal for shape, equal in report["shards"])
    assert report["bias_replicated"] and report["odd_replicated"]
    assert report["equal"]


def test_convert_through_spill_files_as_for_a_checkpoint_larger_than_memory(tmp_path: Path) -> None:
    from treexchange._interop._convert import convert_formats

    lenet = require_fixture("flux-state/silver-bullet_lenet.jld2")
    ckpt = tmp_path / "ckpt"
    save_orbax(ckpt, lazy_tree(lenet))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    convert_formats(ckpt, out_dir / "back.jld2", spill_above=0)
    assert tx.values_equal(tx.load(out_dir / "back.jld2"), tx.load(lenet))
    assert sorted(p.name for p in out_dir.iterdir()) == ["back.jld2"]  # spill files removed


def test_a_bson_file_whose_arrays_are_tree_leaves_goes_to_orbax(tmp_path: Path) -> None:
    # A BSON.jl file's arrays outside structs (a top-level array, a Flux.state NamedTuple's) stay
    # lazy nodes of the walk, and orbax reads each device's slice of one by indexing it: the BSON
    # node had no such indexing (KeyError: (slice(None), slice(None))).
    from treexchange._bson._writer import array, bson_file

    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    (tmp_path / "w.bson").write_bytes(
        bson_file({"w": array("Core.Float32", w), "t": (array("Core.Int64", np.arange(3)),)})
    )
    main(["convert", str(tmp_path / "w.bson"), str(tmp_path / "w.orbax")])
    back = load_orbax(tmp_path / "w.orbax")
    assert np.array_equal(back["w"], w) and np.array_equal(back["t"][0], np.arange(3))


def _resave_state(ckpt: Path, change: Any, *, use_ocdbt: bool = True) -> None:
    """Restore the ``state`` item with orbax, ``change`` it, and save it back in place (what a
    JAX program continuing a treexchange checkpoint does)."""
    state = ocp.StandardCheckpointer().restore(ckpt / "state")
    change(state)
    with ocp.Checkpointer(ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt)) as ckptr:
        ckptr.save(ckpt / "state", args=ocp.args.PyTreeSave(state), force=True)


def _added_arrays(state: dict[str, Any]) -> None:
    state["opt"] = {"mu": np.ones((2, 3), np.float32), "nu": np.zeros((2, 3), np.float32)}
    state["step"] = np.int32(100)


def test_arrays_added_to_the_state_item_with_orbax_are_refused_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # load_orbax restores the arrays the tree names: the others were left out without a word
    ckpt = tmp_path / "ckpt"
    save_orbax(ckpt, {"model_state": NamedTuple(w=np.arange(6.0).reshape(2, 3), act=None, σ=())})
    _resave_state(ckpt, _added_arrays)
    with pytest.raises(tx.FormatError) as refused:
        load_orbax(ckpt)
    said = str(refused.value)
    assert said.startswith(
        f"{ckpt}: its 'state' item holds 3 arrays its treexchange tree does not name, which loading "
        "would leave out: 'opt.mu', 'opt.nu', 'step' (added with orbax after treexchange wrote"
    )
    assert said.endswith(f"by load_orbax('{ckpt}/state') or treexchange convert {ckpt}/state OUT.jld2")
    out = tmp_path / "back.jld2"
    assert_convert_refused(ckpt, out, "'opt.mu', 'opt.nu', 'step'", capsys)
    # what the message says: the item alone reads as a plain checkpoint, with every array
    state = load_orbax(ckpt / "state")["state"]
    assert sorted(state) == ["opt", "step", "w"] and int(state.step) == 100
    assert main(["convert", str(ckpt / "state"), str(out)]) == 0
    assert tx.load(out, "state").opt.mu.shape == (2, 3)


def test_unnamed_arrays_are_counted_and_refused_without_ocdbt_too(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    save_orbax(ckpt, {"w": np.ones(4, np.float32)})

    def seven_more(state: dict[str, Any]) -> None:
        state.update({f"x{i}": np.full(2, i, np.float32) for i in range(7)})

    _resave_state(ckpt, seven_more, use_ocdbt=False)  # (arrays as zarr directories: .zarray files)
    assert not (ckpt / "state" / "manifest.ocdbt").exists()
    with pytest.raises(tx.FormatError, match=r"holds 7 arrays .*: 'x0', 'x1', 'x2', 'x3', 'x4' and 2 more "):
        load_orbax(ckpt)


def test_a_tree_item_from_another_save_is_refused(tmp_path: Path) -> None:
    # a tree naming no arrays beside another checkpoint's state item, and one naming others
    save_orbax(tmp_path / "a", {"n": 3, "name": "mlp"})
    save_orbax(tmp_path / "b", {"model_state": NamedTuple(weight=np.ones((2, 2), np.float32))})
    save_orbax(tmp_path / "c", {"model_state": NamedTuple(kernel=np.ones((2, 2), np.float32))})
    assert not (tmp_path / "a" / "state").exists()  # (nothing to store: no item)
    shutil.copytree(tmp_path / "b" / "state", tmp_path / "a" / "state")
    with pytest.raises(tx.FormatError, match=r"holds 1 array its treexchange tree does not .*: 'weight' "):
        load_orbax(tmp_path / "a")
    shutil.rmtree(tmp_path / "c" / "state")
    shutil.copytree(tmp_path / "b" / "state", tmp_path / "c" / "state")
    with pytest.raises(tx.FormatError, match=r"holds 1 array .*: 'weight' "):
        load_orbax(tmp_path / "c")


def test_a_state_item_saved_back_with_the_same_arrays_still_loads(tmp_path: Path) -> None:
    # the documented round trip: restore the item with orbax, train, save the same arrays back
    state = NamedTuple(layers=(NamedTuple(weight=np.ones((3, 2), np.float32), bias=np.zeros(3)), ()))
    ckpt = tmp_path / "ckpt"
    save_orbax(ckpt, {"model_state": state, "step": 7})

    def trained(tree: dict[str, Any]) -> None:
        layer = tree["model_state"]["layers"]["0"]
        layer["weight"] = np.asarray(layer["weight"]) * 2

    for use_ocdbt in (True, False):
        _resave_state(ckpt, trained, use_ocdbt=use_ocdbt)
        back = load_orbax(ckpt)
        assert back["step"] == 7 and back["model_state"].layers[1] == ()
        np.testing.assert_array_equal(back["model_state"].layers[0].bias, np.zeros(3))
        assert main(["convert", str(ckpt), str(tmp_path / f"back{use_ocdbt}.jld2")]) == 0
    np.testing.assert_array_equal(back["model_state"].layers[0].weight, np.full((3, 2), 4, np.float32))


def test_a_plain_checkpoint_without_ocdbt_reads_each_zarray_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the depth check reads every .zarray before orbax does; the layout check takes its text
    params = {"dense": {"kernel": np.ones((3, 2), np.float32), "bias": np.arange(2.0)}, "n": np.arange(3)}
    with ocp.Checkpointer(ocp.PyTreeCheckpointHandler(use_ocdbt=False)) as ckptr:
        ckptr.save(tmp_path / "zarr", args=ocp.args.PyTreeSave(params))
    reads: list[str] = []
    read_bytes = Path.read_bytes

    def counted(self: Path) -> bytes:
        if self.name == ".zarray":
            reads.append(self.parent.name)
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", counted)
    state = load_orbax(tmp_path / "zarr")["state"]
    assert sorted(reads) == ["dense.bias", "dense.kernel", "n"]
    np.testing.assert_array_equal(state.dense.bias, params["dense"]["bias"])
