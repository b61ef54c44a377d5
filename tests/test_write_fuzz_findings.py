"""What fuzzing the write side and restore found (../shared/hostile/scripts/, README there), fixed.

- a file ``load`` reads but ``save`` could not write back (a ``Complex{Float32}`` array whose
  elements were read as raw bits): bare ``TypeError``, a traceback from the CLI;
- a NaN's payload bits changed without a word by a narrowing cast (``strict=False``/``cast=True``);
- a dict with two NaN keys written as a Julia ``Dict`` that Julia cannot hold;
- a lone surrogate in ``producer`` or ``root_attributes``: bare ``UnicodeEncodeError``.
(Nesting cost: tests/test_deep_nesting.py; leftover temporary files: tests/test_atomic.py.)
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import HOSTILE

import treexchange as tx
from treexchange._cli import main

WRITEBACK = HOSTILE / "writeback" / "complex_juliabits.jld2"


def _writeback_file() -> Path:
    if not WRITEBACK.is_file():
        pytest.skip(f"{WRITEBACK} absent")
    return WRITEBACK


def test_complex_read_as_raw_bits_is_written_back_as_complex(tmp_path: Path) -> None:
    values = tx.load(_writeback_file())
    bits = values["c"]
    assert [type(x).__name__ for x in bits.data] == ["JuliaBits", "JuliaBits"]
    out = tmp_path / "out.jld2"
    tx.save(out, **values)
    back = tx.load(out, "c")
    # The raw bits were the struct's fields, packed: (re, im) as Float32.
    expected = np.frombuffer(b"".join(x.data for x in bits.data), np.complex64)
    assert back.dtype == np.complex64 and np.array_equal(back, expected)
    assert list(back) == [1 + 2j, 3 - 4j]
    for name in values:
        if name != "c":
            assert tx.values_equal(tx.load(out, name), values[name]), name


def test_convert_of_raw_bits_complex_refuses_with_our_error(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from treexchange._save import convert

    src = _writeback_file()
    with pytest.raises(tx.WriteError, match="reads back different values for: c"):
        convert(src, tmp_path / "out.jld2")  # written as Complex, it no longer reads as raw bits
    assert os.listdir(tmp_path) == []
    assert main(["convert", str(src), str(tmp_path / "cli.jld2")]) != 0  # a message, no traceback
    err = capsys.readouterr().err
    assert "Traceback" not in err and "reads back different values" in err
    convert(src, tmp_path / "unverified.jld2", verify=False)
    assert list(tx.load(tmp_path / "unverified.jld2", "c")) == [1 + 2j, 3 - 4j]


def test_raw_bits_that_do_not_fit_the_struct_are_refused(tmp_path: Path) -> None:
    name = "Base.Complex{Core.Float32}"  # as the reader names it: the struct the writer knows
    odd = tx.JuliaArray(name, [tx.JuliaBits(name, b"\x00" * 6)])
    with pytest.raises(tx.ConversionError, match="6 raw bytes"):
        tx.save(tmp_path / "x.jld2", c=odd)
    assert os.listdir(tmp_path) == []


NAN_BITS = np.array([0x7FF8000000000000, 0x7FF8000000000001, 0xFFF0000000000001], np.uint64)


@pytest.mark.parametrize("how", [{"strict": False}, {"cast": True}])
def test_nan_payload_lost_by_a_narrowing_cast_is_refused(tmp_path: Path, how: dict) -> None:
    path = tmp_path / "nan.jld2"
    tx.save(path, s=tx.NamedTuple(w=NAN_BITS.view(np.float64)))
    like = {"w": np.zeros(3, np.float32)}
    with pytest.raises(tx.MismatchError, match=r"2 of 3 values would change \(NaN payload or sign bits lost"):
        tx.load(path, "s", like=like, **how)
    # The quiet NaN alone converts exactly (float32's quiet NaN comes back with the same bits).
    tx.save(path, s=tx.NamedTuple(w=NAN_BITS[:1].view(np.float64)))
    out = tx.load(path, "s", like={"w": np.zeros(1, np.float32)}, numpy=True, **how)
    assert out["w"].view(np.uint32).tolist() == [0x7FC00000]


def test_nan_payload_rounds_under_cast_round_and_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "nan.jld2"
    tx.save(path, s=tx.NamedTuple(w=NAN_BITS.view(np.float64)))
    out, report = tx.load(
        path, "s", like={"w": np.zeros(3, np.float32)}, cast="round", numpy=True, report=True
    )
    assert np.isnan(out["w"]).all()
    assert "float64 -> float32" in str(report)


@pytest.mark.parametrize(
    "keys",
    [
        [float("nan"), float("nan")],
        [np.float32("nan"), np.float64("nan")],
        [(1, float("nan")), (1, float("nan"))],
        [complex(float("nan"), 1.0), complex(float("nan"), 1.0)],
    ],
    ids=["float", "mixed-widths", "tuple", "complex"],
)
def test_two_nan_keys_are_refused(tmp_path: Path, keys: list) -> None:
    target = tmp_path / "d.jld2"
    tx.save(target, x=1)
    before = target.read_bytes()
    value = dict(zip(keys, [1, 2]))
    assert len(value) == 2
    with pytest.raises(tx.WriteError, match="one key in Julia"):
        tx.save(target, model_state=value)
    assert target.read_bytes() == before and os.listdir(tmp_path) == ["d.jld2"]


def test_keys_julia_tells_apart_are_written(tmp_path: Path) -> None:
    path = tmp_path / "d.jld2"
    one_nan = {float("nan"): 1, 1.0: 2}
    signed = {(float("nan"), 0.0): 1, (float("nan"), -0.0): 2}  # isequal(0.0, -0.0) is false
    tx.save(path, a=one_nan, b=signed)
    assert len(tx.load(path, "a")) == 2 and len(tx.load(path, "b")) == 2


@pytest.mark.parametrize(
    "options",
    [
        {"producer": " (x\ud800)"},
        {"root_attributes": {"k": "v\ud800"}},
        {"root_attributes": {"k\udfff": "v"}},
    ],
    ids=["producer", "attribute-value", "attribute-name"],
)
def test_lone_surrogates_in_header_text_are_a_write_error(tmp_path: Path, options: dict) -> None:
    with pytest.raises(tx.WriteError, match="lone surrogate"):
        tx.save(tmp_path / "t.jld2", a=1.0, **options)
    assert os.listdir(tmp_path) == []
