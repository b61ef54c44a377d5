"""Sharded restore on 8 forced host devices (runs in a subprocess: XLA_FLAGS must be set before jax loads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from treexchange import NamedTuple, restore

SCRIPT = textwrap.dedent(
    r"""
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    import equinox as eqx
    from jax.sharding import NamedSharding, PartitionSpec as P
    from treexchange import NamedTuple
    from treexchange import restore, flux_state

    assert len(jax.devices()) == 8, jax.devices()
    # Auto axes: the forward pass below lets XLA choose the output sharding
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
    report = {}

    class Recording(np.ndarray):
        # A real file-backed-style array that notes which slices the shard callbacks read.
        reads = []
        def __getitem__(self, index):
            if isinstance(index, tuple) and all(isinstance(i, slice) for i in index):
                Recording.reads.append([[s.start, s.stop] for s in index])
            return np.asarray(np.ndarray.__getitem__(self, index))

    w = np.asfortranarray(np.arange(64 * 32, dtype=np.float32).reshape(64, 32)).view(Recording)
    b = np.arange(64, dtype=np.float64)
    head = NamedTuple(weight=np.ones((8, 64), np.float32))
    values = NamedTuple(encoder=NamedTuple(weight=w, bias=b), head=head)
    like = {
        "encoder": {
            "weight": jax.ShapeDtypeStruct((64, 32), jnp.float32),
            "bias": jnp.zeros(64, jnp.float32),
        },
        "head": {"weight": jnp.zeros((8, 64), jnp.float32)},
    }
    grid = NamedSharding(mesh, P("data", "model"))
    rows = NamedSharding(mesh, P("data"))
    # per-leaf shardings: the weight on the 2x4 grid
    out = restore(values, like, sharding={"encoder": {"weight": grid, "bias": None}, "head": None}, cast=True)
    enc = out["encoder"]["weight"]
    report["weight_sharding_ok"] = enc.sharding == grid
    report["weight_shards"] = len(enc.addressable_shards)
    report["weight_shard_data_ok"] = all(
        np.array_equal(np.asarray(s.data), np.asarray(w)[s.index]) for s in enc.addressable_shards
    )
    report["weight_reads"] = sorted(Recording.reads)

    # a prefix tree: one sharding for the whole encoder subtree, None (default device) for the head
    out = restore(values, like, sharding={"encoder": rows, "head": None}, cast=True)
    report["prefix_weight_ok"] = out["encoder"]["weight"].sharding == rows
    report["bias_dtype"] = str(out["encoder"]["bias"].dtype)  # cast per shard: float64 file -> float32
    report["bias_ok"] = np.array_equal(np.asarray(out["encoder"]["bias"]), b.astype(np.float32))
    report["bias_sharding_ok"] = out["encoder"]["bias"].sharding == rows
    report["head_single_device"] = len(out["head"]["weight"].sharding.device_set) == 1

    # one Sharding for everything
    all_rows = restore(values, like, sharding=rows, cast=True)
    report["all_rows"] = [x.sharding == rows for x in jax.tree_util.tree_leaves(all_rows)]

    # an abstract template that carries its own sharding
    abstract = {"w": jax.ShapeDtypeStruct((64, 32), jnp.float32, sharding=grid)}
    report["abstract_sharding_ok"] = restore(NamedTuple(w=np.asarray(w)), abstract)["w"].sharding == grid

    # an Equinox model restored from a Flux Chain state, sharded by a tree built from the model
    mlp = eqx.nn.MLP(32, 8, 64, depth=1, key=jax.random.key(0))
    state = flux_state(mlp)
    def last_axis_on_model(x):
        return NamedSharding(mesh, P(*([None] * (x.ndim - 1) + ["model"]))) if eqx.is_array(x) else None

    shardings = jax.tree_util.tree_map(last_axis_on_model, mlp)
    model = restore(state, mlp, layout=flux_state, sharding=shardings)
    report["mlp_specs"] = [l.weight.sharding.spec == P(None, "model") for l in model.layers]
    report["mlp_bias_specs"] = [l.bias.sharding.spec == P("model") for l in model.layers]
    x = jnp.ones(32)
    report["mlp_same_output"] = bool(jnp.allclose(model(x), mlp(x)))
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def report() -> dict[str, object]:
    # (the suite's own XLA_FLAGS kept, conftest.py: eight devices added to them)
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8"
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_each_device_gets_and_reads_only_its_slice(report: dict[str, object]) -> None:
    assert report["weight_sharding_ok"] is True
    assert report["weight_shards"] == 8
    assert report["weight_shard_data_ok"] is True
    # 8 reads, one per device, each a (32, 8) block: together exactly the whole array, no overlap
    expected = sorted([[r, r + 32], [c, c + 8]] for r in (0, 32) for c in (0, 8, 16, 24))
    assert report["weight_reads"] == expected


def test_sharding_tree_prefix_cast_and_default_device(report: dict[str, object]) -> None:
    assert report["prefix_weight_ok"] is True
    assert report["bias_dtype"] == "float32" and report["bias_ok"] is True
    assert report["bias_sharding_ok"] is True
    assert report["head_single_device"] is True


def test_single_sharding_and_abstract_template_sharding(report: dict[str, object]) -> None:
    assert report["all_rows"] == [True, True, True]
    assert report["abstract_sharding_ok"] is True


def test_sharded_equinox_model_through_flux_layout(report: dict[str, object]) -> None:
    assert report["mlp_specs"] == [True, True]
    assert report["mlp_bias_specs"] == [True, True]
    assert report["mlp_same_output"] is True


def test_sharding_options_are_checked() -> None:
    import jax

    values = NamedTuple(w=np.zeros(2, np.float32))
    single = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with pytest.raises(ValueError, match="numpy=True"):
        restore(values, {"w": np.zeros(2, np.float32)}, sharding=single, numpy=True)
    with pytest.raises(ValueError, match=r"not a jax\.sharding\.Sharding"):
        restore(values, {"w": np.zeros(2, np.float32)}, sharding={"w": "cpu"})
