"""``treexchange convert`` on every fixture (formats 0.1.x, legacy and 0.2.0).

The output is format 0.2.0; it reads back to the same values with treexchange, and libhdf5
(h5py) -- the independent check of headers, checksums, layouts and heaps -- opens every object
and finds the same arrays as in the input.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from _h5walk import reachable_datasets
from conftest import FIXTURES, fixture_files, fixture_ids

import treexchange
from treexchange import JuliaArray, JuliaStruct, JuliaType, NamedTuple, Singleton, values_equal
from treexchange._cli import main
from treexchange._save import convert

FILES = [p for p in fixture_files("**/*.jld2")]


def normalize_type(t: Any) -> Any:
    """JLD2 0.6 spells ``Tuple{}`` and homogeneous tuples ``Tuple``/``NTuple`` where older files
    wrote ``Core.Tuple``; compare types with one spelling."""
    if isinstance(t, JuliaType):
        params = tuple(normalize_type(p) for p in t.params)
        if t.name in ("Core.Tuple", "Tuple"):
            return JuliaType("Core.Tuple", params)
        if t.name == "NTuple" and len(params) == 2:
            return JuliaType("Core.Tuple", (params[1],) * int(params[0]))
        return JuliaType(t.name, params)
    if isinstance(t, tuple):
        return tuple(normalize_type(p) for p in t)
    return t


def normalize(v: Any, memo: dict[int, Any] | None = None) -> Any:
    """A value tree with every Julia type spelled canonically (see :func:`normalize_type`); a
    cyclic graph (an MRBC rule tree whose nodes point to their parent) stays one: each mutable
    value is made before its contents, so a reference back to it finds it."""
    memo = {} if memo is None else memo
    if id(v) in memo:
        return memo[id(v)]
    if isinstance(v, JuliaStruct):
        out = JuliaStruct(normalize_type(v.type), mutable=v.mutable)
        memo[id(v)] = out
        out.fields.update((k, normalize(x, memo)) for k, x in v.fields.items())
        return out
    if isinstance(v, Singleton):
        return Singleton(normalize_type(v.type))
    if isinstance(v, JuliaArray):
        data = np.empty(v.data.shape, dtype=object)
        arr = memo[id(v)] = JuliaArray(normalize_type(v.eltype), data)
        for idx in np.ndindex(v.data.shape):
            data[idx] = normalize(v.data[idx], memo)
        return arr
    if isinstance(v, NamedTuple):
        return NamedTuple((k, normalize(x, memo)) for k, x in v.items())
    if isinstance(v, tuple):
        return tuple(normalize(x, memo) for x in v)
    if isinstance(v, list):
        items: list[Any] = []
        memo[id(v)] = items
        items.extend(normalize(x, memo) for x in v)
        return items
    if isinstance(v, dict):
        mapping: dict[Any, Any] = {}
        memo[id(v)] = mapping
        mapping.update((k, normalize(x, memo)) for k, x in v.items())
        return mapping
    if isinstance(v, JuliaType):
        return normalize_type(v)
    return v


def array_fingerprints(path: Path) -> Counter[tuple[Any, ...]]:
    """(HDF5 shape, dtype, sha256) of every numeric *array* dataset h5py reaches from the root."""
    out: Counter[tuple[Any, ...]] = Counter()
    for ds in reachable_datasets(path).values():
        try:
            if ds.shape is None or ds.ndim == 0:
                continue
            dt = ds.dtype
            if dt.fields is not None or dt.kind not in "biuf" or h5py.check_ref_dtype(dt) is not None:
                continue
            arr = np.ascontiguousarray(ds[()])
        except (OSError, TypeError, ValueError):
            continue
        a = arr.astype(arr.dtype.newbyteorder("<"))
        out[(arr.shape, a.dtype.str, hashlib.sha256(a.tobytes()).hexdigest())] += 1
    return out


@pytest.mark.parametrize("path", FILES or [None], ids=fixture_ids(FILES) if FILES else ["absent"])
def test_convert_every_fixture(path: Path | None, tmp_path: Path) -> None:
    if path is None:
        pytest.skip("fixtures absent")
    if path.suffix != ".jld2":
        pytest.skip("not JLD2")
    out = tmp_path / "out.jld2"
    convert(path, out)
    written = out.read_bytes()
    assert written.startswith(b"HDF5-based Julia Data Format, version 0.2.0\x00")
    assert values_equal(normalize(treexchange.load(out)), normalize(treexchange.load(path)))

    # libhdf5 opens every object we wrote and every committed type.
    with h5py.File(out, "r") as f:
        names: list[str] = []
        f.visit(names.append)
        for name in names:
            obj = f[name]
            if isinstance(obj, h5py.Dataset) and obj.shape is not None and obj.dtype.kind in "biuf":
                obj[()]
    src = array_fingerprints(path)
    if src:  # h5py can read the input's arrays: ours must hold exactly the same ones
        assert array_fingerprints(out) == src


def test_cli_convert_compress_roundtrip(tmp_path: Path) -> None:
    path = FIXTURES / "flux-state/silver-bullet_lenet.jld2"
    if not path.is_file():
        pytest.skip("fixtures absent")
    out = tmp_path / "c.jld2"
    assert main(["convert", str(path), str(out), "--compress", "deflate"]) == 0
    assert values_equal(normalize(treexchange.load(out)), normalize(treexchange.load(path)))
    assert array_fingerprints(out) == array_fingerprints(path)
    with h5py.File(out, "r") as f:
        compressed = [ds for ds in reachable_datasets(out).values() if ds.compression == "gzip"]
        assert compressed and all(ds.shuffle for ds in compressed)
        assert f.userblock_size == 512
    assert out.stat().st_size < path.stat().st_size


def test_convert_keeps_root_string_attributes(tmp_path: Path) -> None:
    src = tmp_path / "a.jld2"
    treexchange.save(src, x=np.arange(3), root_attributes={"custom": '{"v": "σ"}', "note": "hi"})
    out = tmp_path / "b.jld2"
    convert(src, out, keep_producer=True)
    assert out.read_bytes() == src.read_bytes()
    with h5py.File(out, "r") as f:
        assert f.attrs["custom"] == '{"v": "σ"}'


def test_convert_keeps_shared_arrays_and_write_order(tmp_path: Path) -> None:
    src = tmp_path / "a.jld2"
    w = np.ones((3, 2), np.float32)
    treexchange.save(src, {"g/first": w, "top": NamedTuple(a=w, b=2), "g/second": "x"})
    out = tmp_path / "b.jld2"
    convert(src, out, keep_producer=True)
    assert out.read_bytes() == src.read_bytes()
    back = treexchange.load(out)
    assert back["g"]["first"] is back["top"]["a"]


def test_convert_empty_group(tmp_path: Path) -> None:
    from treexchange._jld2._writer import JLD2Writer

    src = tmp_path / "a.jld2"
    with open(src, "w+b") as f:
        w = JLD2Writer(f)
        w.write("x", 1)
        w.create_group("empty/inner")
        w.close()
    out = tmp_path / "b.jld2"
    convert(src, out, keep_producer=True)
    assert out.read_bytes() == src.read_bytes()
    with h5py.File(out, "r") as f:
        assert isinstance(f["empty/inner"], h5py.Group) and len(f["empty/inner"]) == 0


def test_convert_onto_itself(tmp_path: Path) -> None:
    path = tmp_path / "same.jld2"
    treexchange.save(path, m=NamedTuple(w=np.arange(6.0).reshape(2, 3)), producer=" (Julia 1.11.1 64-bit LE)")
    before = path.read_bytes()
    assert main(["convert", str(path), str(path), "--keep-producer"]) == 0
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.jld2"]


def test_convert_refuses_plain_hdf5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "plain.h5"
    with h5py.File(src, "w") as f:
        f["x"] = np.arange(3)
    assert main(["convert", str(src), str(tmp_path / "out.jld2")]) == 2
    assert "HDF5" in capsys.readouterr().err
    assert not (tmp_path / "out.jld2").exists()
