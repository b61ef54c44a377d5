"""Every writer refuses what its format cannot hold before it writes, and a failed write leaves
nothing behind and the old file as it was.

Found by a fuzz of the port (``from_flux`` and ``convert --flux-state`` over mutated real Flux
files, 2026-11-28): a BSON key whose bytes are not UTF-8 reads as a name with a lone surrogate
(Python's lossless ``surrogateescape``); writing it crashed with ``UnicodeEncodeError`` in the JLD2
writer (``convert --flux-state``), in the safetensors header, and in orbax's storage, which also
left its temporary directory beside the target. The file here is the bundled mcreel/SNM model
with one byte of a top-level name damaged as the fuzz did (``nninfo`` -> ``nni\\xfffo``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import BUNDLED_DIR

import treexchange as tx
from treexchange import ConversionError, NamedTuple
from treexchange._cli import main

MCREEL = BUNDLED_DIR / "bson" / "mcreel_snm_arma_neuralmodel.bson"


def _damaged_name_file(tmp_path: Path) -> Path:
    raw = bytearray(MCREEL.read_bytes())
    at = raw.index(b"nninfo\x00")
    raw[at + 3] = 0xFF  # (not UTF-8: read as "nni\udcfffo")
    path = tmp_path / "damaged.bson"
    path.write_bytes(bytes(raw))
    assert "nni\udcfffo" in tx.load(path)  # read as it is: nothing is lost on reading
    return path


@pytest.mark.parametrize(
    ("argv", "out"),
    [
        (["--flux-state"], "new.jld2"),
        ([], "out.jld2"),
        ([], "out.safetensors"),
        (["--to", "orbax"], "ckpt"),
    ],
)
def test_a_name_without_utf8_form_is_refused_by_every_writer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], out: str
) -> None:
    pytest.importorskip("orbax.checkpoint") if "orbax" in argv else None
    source = _damaged_name_file(tmp_path)
    assert main(["convert", *argv, str(source), str(tmp_path / out)]) == 2
    err = capsys.readouterr().err
    assert "holds a lone surrogate, which has no UTF-8 form" in err and "nni\\udcfffo" in err
    assert sorted(os.listdir(tmp_path)) == ["damaged.bson"]  # no output, no temporary left


def test_save_safetensors_names_the_place_of_the_text(tmp_path: Path) -> None:
    state = NamedTuple(layers=(NamedTuple(weight=np.ones(2, np.float32), name="conv\udcff"),))
    with pytest.raises(ConversionError, match="lone surrogate") as info:
        tx.save_safetensors(tmp_path / "m.safetensors", {"model_state": state})
    assert info.value.path == ("model_state", "layers", 1, "name")
    assert os.listdir(tmp_path) == []


def test_orbax_replaces_a_checkpoint_only_once_the_new_one_is_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """orbax's ``force=True`` removes the existing checkpoint before writing; treexchange writes
    beside it and moves the new one into place: a save that fails inside orbax (here: after
    orbax wrote everything, as a full disk at its last step would) keeps the old checkpoint
    whole and leaves nothing beside it; a save that succeeds replaces it."""
    ocp = pytest.importorskip("orbax.checkpoint")
    ckpt = tmp_path / "ckpt"
    tx.save_orbax(ckpt, {"x": np.arange(3.0)})
    real_save = ocp.Checkpointer.save

    def failing_save(self: object, *args: object, **kwargs: object) -> None:
        real_save(self, *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ocp.Checkpointer, "save", failing_save)
    with pytest.raises(OSError, match="No space left"):
        tx.save_orbax(ckpt, {"x": np.arange(5.0)})
    assert os.listdir(tmp_path) == ["ckpt"]
    np.testing.assert_array_equal(tx.load_orbax(ckpt)["x"], np.arange(3.0))
    monkeypatch.setattr(ocp.Checkpointer, "save", real_save)
    tx.save_orbax(ckpt, {"y": np.arange(5.0)})
    assert os.listdir(tmp_path) == ["ckpt"]
    assert list(tx.load_orbax(ckpt)) == ["y"]


def test_orbax_through_a_symbolic_link_replaces_its_destination(tmp_path: Path) -> None:
    """As ``save`` does for a file: the link stays, the checkpoint it points to is replaced
    (writing beside the link would have replaced the link itself by a directory)."""
    pytest.importorskip("orbax.checkpoint")
    real, link = tmp_path / "runs" / "ckpt", tmp_path / "latest"
    real.parent.mkdir()
    tx.save_orbax(real, {"x": np.arange(3.0)})
    link.symlink_to(real)
    assert tx.save_orbax(link, {"y": np.arange(2.0)}) == link
    assert link.is_symlink() and list(tx.load_orbax(real)) == ["y"]
    assert sorted(os.listdir(real.parent)) == ["ckpt"]


def test_what_a_killed_orbax_save_left_is_undone_by_the_next(tmp_path: Path) -> None:
    """A save killed while orbax wrote leaves its hidden staging directory; killed between the
    two renames, the old checkpoint moved aside and nothing in its place. The next save to the
    directory removes the first and puts the second back (a live process's are left alone)."""
    pytest.importorskip("orbax.checkpoint")
    dead = 2**22 + 1  # above Linux's largest PID: no such process
    tx.save_orbax(tmp_path / "a", {"x": np.arange(3.0)})
    os.rename(tmp_path / "a", tmp_path / f".a.treexchange-old-{dead}-0123abcd")
    (tmp_path / f".b.treexchange-{dead}-89abcdef").mkdir()
    (tmp_path / f".b.treexchange-{dead}-89abcdef" / "partial").write_bytes(b"x")
    (tmp_path / f".c.treexchange-{os.getpid()}-00000000").mkdir()  # (this process: running)
    tx.save_orbax(tmp_path / "d", {"y": np.arange(2.0)})
    assert sorted(os.listdir(tmp_path)) == [f".c.treexchange-{os.getpid()}-00000000", "a", "d"]
    np.testing.assert_array_equal(tx.load_orbax(tmp_path / "a")["x"], np.arange(3.0))
