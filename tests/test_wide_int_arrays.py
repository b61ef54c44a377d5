"""Arrays of ``Int128`` / ``UInt128`` (a ``MersenneTwister``'s state is a ``Vector{UInt128}``)
are one array node with a dtype and a sha256, not one number node per element: in ``inspect``,
``inspect --json``, the lazy nodes and the schema; ``load`` keeps ``JuliaArray`` values of
:class:`treexchange.UInt128` and ``convert`` writes them back byte for byte.

The sha256 is checked against the raw stored bytes, found through h5py (dataset offset and
size), independently of our reader.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

import treexchange
from treexchange import Int128, JuliaArray, JuliaStruct, UInt128, values_equal
from treexchange._cli import main
from treexchange._save import convert

N_STATE = 501  # the length of a MersenneTwister's state vector


def _state() -> list[UInt128]:
    # spread over all 16 bytes, so a byte-order or word-order mistake changes the hash
    return [UInt128((i * 0x9E3779B97F4A7C15 << 61 | i * 7919) % 2**128) for i in range(N_STATE)]


def _signed_matrix() -> JuliaArray:
    items = np.empty((2, 3), dtype=object)
    for i in range(2):
        for j in range(3):
            items[i, j] = Int128((-1) ** (i + j) * (2**100 + 10 * i + j))
    return JuliaArray("Int128", items)


@pytest.fixture
def rng_file(tmp_path: Path) -> Path:
    path = tmp_path / "rng.jld2"
    rng = JuliaStruct(
        "Main.MersenneTwisterLike",
        {
            "seed": np.array([7, 8], np.uint32),
            "state": JuliaArray("UInt128", _state()),
            "idx": np.int64(1002),
        },
        mutable=True,
    )
    treexchange.save(path, rng=rng, m=_signed_matrix(), producer=" (Julia 1.11.1 64-bit LE)")
    return path


def _raw_sha256(path: Path, dataset: h5py.Dataset) -> str:
    """sha256 of a contiguous dataset's stored bytes (h5py gives offset and size)."""
    off, size = dataset.id.get_offset(), dataset.id.get_storage_size()
    assert off is not None
    with open(path, "rb") as f:
        f.seek(off)
        return hashlib.sha256(f.read(size)).hexdigest()


def _h5_state(f: h5py.File) -> h5py.Dataset:
    rng = f["rng"]
    if isinstance(rng[()], h5py.Reference):  # a mutable struct is its own dataset
        rng = f[rng[()]]
    ref = rng[()]["state"]
    return f[ref]


def test_stored_as_little_endian_16_byte_integers(rng_file: Path) -> None:
    with h5py.File(rng_file, "r") as f:
        state = _h5_state(f)
        assert state.shape == (N_STATE,) and state.id.get_type().get_size() == 16
        assert state.id.get_storage_size() == 16 * N_STATE
        assert f["m"].shape == (3, 2)  # HDF5 order: Julia's (2, 3) reversed


def test_inspect_json_one_array_node_with_sha256(rng_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--json", str(rng_file)]) == 0
    records = {tuple(r["path"]): r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert not any(len(p) > 2 and p[:2] == ("rng", "state") for p in records)  # no element nodes
    state, m = records[("rng", "state")], records[("m",)]
    with h5py.File(rng_file, "r") as f:
        assert state == {
            "path": ["rng", "state"],
            "kind": "array",
            "julia_type": "Array{UInt128, 1}",
            "dtype": "uint128",
            "shape": [N_STATE],
            "sha256": _raw_sha256(rng_file, _h5_state(f)),
        }
        assert (m["kind"], m["dtype"], m["shape"]) == ("array", "int128", [2, 3])
        assert m["sha256"] == _raw_sha256(rng_file, f["m"])
    expected = b"".join(int(x).to_bytes(16, "little") for x in _state())
    assert state["sha256"] == hashlib.sha256(expected).hexdigest()


def test_inspect_text_one_line(rng_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(rng_file)]) == 0
    out = capsys.readouterr().out
    assert f"state: Array{{UInt128, 1}}  {N_STATE}  uint128  7.8 KiB" in out
    assert "m: Array{Int128, 2}  2×3  int128  96 B" in out
    assert out.count("\n") < 20


def test_lazy_node_is_an_array(rng_file: Path) -> None:
    with treexchange.open(rng_file) as f:
        node = f["rng"]["state"]
        assert (node.kind, node.shape, node.nbytes) == ("array", (N_STATE,), 16 * N_STATE)
        part = node[3:6]
        assert part.dtype.itemsize == 16 and part.dtype.metadata == {"julia": "uint128"}
        assert [int.from_bytes(x.tobytes(), "little") for x in part] == _state()[3:6]
        m = f["m"]
        assert m.shape == (2, 3)
        assert int.from_bytes(m[1, 2].tobytes(), "little", signed=True) == _signed_matrix().data[1, 2]
        assert values_equal(node.read(), JuliaArray("UInt128", _state()))


def test_load_round_trip(rng_file: Path, tmp_path: Path) -> None:
    back = treexchange.load(rng_file)
    state = back["rng"].fields["state"]
    assert isinstance(state, JuliaArray) and all(isinstance(x, UInt128) for x in state)
    assert list(state) == _state()
    assert values_equal(back["m"], _signed_matrix())
    again = tmp_path / "again.jld2"
    treexchange.save(again, back, producer=" (Julia 1.11.1 64-bit LE)")
    assert again.read_bytes() == rng_file.read_bytes()


def test_convert_keep_producer_byte_identical(rng_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jld2"
    convert(rng_file, out, keep_producer=True)
    assert out.read_bytes() == rng_file.read_bytes()


def test_schema_infer_validate(rng_file: Path) -> None:
    schema = treexchange.infer_schema(rng_file, checksums=True)
    roots = schema.model_dump(mode="json")["roots"]
    state = roots["rng"]["fields"][1]["node"]
    with h5py.File(rng_file, "r") as f:
        assert state == {
            "kind": "array",
            "description": None,
            "dtype": "uint128",
            "shape": [N_STATE],
            "sha256": _raw_sha256(rng_file, _h5_state(f)),
        }
    assert (roots["m"]["dtype"], roots["m"]["shape"]) == ("int128", [2, 3])
    assert treexchange.validate(rng_file, schema) == []
    values = treexchange.load(rng_file)
    assert treexchange.validate(values, schema) == []
    # the loaded values describe themselves as the file does
    assert treexchange.infer_schema(values, checksums=True).model_dump(mode="json")["roots"] == roots

    other = treexchange.load(rng_file)
    other["rng"].fields["state"].data[0] = UInt128(12345)
    errors = treexchange.validate(other, schema)
    assert errors, "a changed element must fail a schema that pins the sha256"


def test_schema_of_values_built_in_python() -> None:
    # spelled as users write it ("UInt128"), not as files store it ("Core.UInt128")
    values = {"state": JuliaArray("UInt128", _state())}
    roots = treexchange.infer_schema(values, checksums=True).model_dump(mode="json")["roots"]
    expected = b"".join(int(x).to_bytes(16, "little") for x in _state())
    assert roots["state"]["kind"] == "array" and roots["state"]["dtype"] == "uint128"
    assert roots["state"]["sha256"] == hashlib.sha256(expected).hexdigest()


def test_compressed_array(tmp_path: Path) -> None:
    path = tmp_path / "c.jld2"
    values = [UInt128(i * 2**70 + i) for i in range(3000)]
    treexchange.save(path, s=JuliaArray("UInt128", values), compress="deflate")
    with h5py.File(path, "r") as f:
        assert f["s"].compression == "gzip"
    expected = hashlib.sha256(b"".join(int(v).to_bytes(16, "little") for v in values)).hexdigest()
    with treexchange.open(path) as f:
        node = f["s"]
        assert node.kind == "array" and int.from_bytes(node[2999].tobytes(), "little") == values[2999]
        roots = treexchange.infer_schema(f, checksums=True).model_dump(mode="json")["roots"]
        assert roots["s"]["sha256"] == expected
    assert list(treexchange.load(path)["s"]) == values


def test_wide_ints_print_as_their_decimal_text_and_repr_names_the_type() -> None:
    """``str`` of an Int128 / UInt128 is the number, as for an ``int`` and a ``tx.BigInt``;
    ``repr`` keeps the type."""
    for cls, n in ((Int128, -(2**100)), (UInt128, 2**127 + 5), (treexchange.BigInt, -5)):
        value = cls(n)
        assert str(value) == str(n) == f"{value}" == format(value, "d")
        assert repr(value) == f"{cls.__name__}({n})"
    assert f"{Int128(5):>4}" == "   5"
