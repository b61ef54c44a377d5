"""``treexchange convert`` between formats: JLD2 <-> safetensors, JLD2 <-> orbax.

The format of each side is given (``--to``) or read from the path: ``.jld2``/``.jld`` is JLD2,
``.safetensors`` or ``.safetensors.index.json`` is safetensors, a directory (existing, or a path
ending in ``/`` or ``.orbax``) is an orbax checkpoint. One side is always JLD2.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import numpy as np

from .._atomic import atomic_write
from .._errors import TreePath, TreexchangeError, UnsupportedError, format_path
from .._port._statefill import nonzero_initial_states
from .._reader import open as open_jld2
from .._values import value_children
from . import _orbax, _safetensors, _treejson as tj
from ._jld2io import save_jld2
from ._orbax import OrbaxSource
from ._progress import ProgressLine
from ._safetensors import ORDER_KEY, SafetensorsSource, mapping_line
from ._source import lazy_tree
from ._torch import flux_to_state_dict, mapping_lines, state_dict_to_flux
from ._torchorder import architecture_order
from ._treejson import DTYPES, array_nodes, is_numeric_array

FORMATS = ("jld2", "safetensors", "orbax")


def detect_format(path: str | os.PathLike[str], *, existing: bool) -> str | None:
    """The format a path names, or ``None`` when its name does not say.

    Example:
        >>> detect_format("model.safetensors.index.json", existing=False)
        'safetensors'
        >>> detect_format("ckpt.orbax", existing=False), detect_format("m.jld2", existing=False)
        ('orbax', 'jld2')
    """
    text = os.fspath(path)
    name = Path(text).name
    if name.endswith(".safetensors") or name.endswith(".safetensors.index.json"):
        return "safetensors"
    if name.endswith((".jld2", ".jld")):
        return "jld2"
    if text.endswith(("/", os.sep)) or name.endswith(".orbax") or (existing and Path(text).is_dir()):
        return "orbax"
    if existing and Path(text).is_file():
        return "jld2"  # any other existing file: the JLD2 reader says what it is if it is not
    return None


def convert_formats(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    to: str | None = None,
    dry_run: bool = False,
    max_shard_size: int | None = None,
    out: TextIO | None = None,
    progress_stream: TextIO | None = None,
    architecture: str | None = None,
    spill_above: int | None = None,
) -> str:
    """Convert ``source`` to ``target``; returns the pair of formats (``"jld2->safetensors"``).

    ``dry_run`` prints the mapping (one line per array: source name -> target name, Julia shape,
    dtype, transform) to ``out`` and writes nothing. ``architecture``: the Flux model as Flux prints
    it. safetensors -> JLD2: the tensors (a PyTorch ``state_dict``; sorted names put back in module
    order) are matched to it by the layer rules and written as a ``Flux.loadmodel!``-ready
    ``model_state``. JLD2 -> safetensors: the file's ``Flux.state`` is written as a PyTorch
    ``state_dict`` (``nn.Sequential`` names), its key order recorded in the metadata.
    ``spill_above`` (orbax -> JLD2): restore through file-backed spill maps when the checkpoint
    holds more array bytes than this (default: half the memory available). A progress line is drawn on
    ``progress_stream`` (default stderr) when it is a terminal.
    """
    src_fmt = detect_format(source, existing=True)
    dst_fmt = to or detect_format(target, existing=False)
    if src_fmt is None:
        raise UnsupportedError(f"cannot tell the format of {os.fspath(source)!r} from its name")
    if dst_fmt is None:
        raise UnsupportedError(
            f"cannot tell the format of {os.fspath(target)!r} from its name: "
            f"give --to {{{','.join(FORMATS)}}}"
        )
    if dst_fmt not in FORMATS:
        raise UnsupportedError(f"unknown format {dst_fmt!r} (choose from {', '.join(FORMATS)})")
    if src_fmt != "jld2" and dst_fmt != "jld2":
        raise UnsupportedError(f"{src_fmt} -> {dst_fmt}: one side must be a JLD2 file")
    out = out if out is not None else sys.stdout
    pair = f"{src_fmt}->{dst_fmt}"
    if architecture is not None and src_fmt == "jld2" and dst_fmt != "safetensors":
        raise UnsupportedError(f"--architecture does nothing for jld2 -> {dst_fmt}")
    if src_fmt == "jld2" and dst_fmt == "safetensors" and architecture is not None:
        _export_state_dict(source, target, architecture, dry_run, out, progress_stream)
    elif src_fmt == "jld2" and dst_fmt != "jld2":
        _export(source, target, dst_fmt, dry_run, max_shard_size, out, progress_stream)
    elif dst_fmt == "jld2" and src_fmt != "jld2":
        _import(source, target, src_fmt, dry_run, out, progress_stream, architecture, spill_above)
    elif dry_run:  # jld2 -> jld2 re-encodes every value as it is
        for path, array in stored_arrays(lazy_tree(source)):
            julia = format_path(path)
            print(mapping_line(julia, path, array.shape, array.dtype, "none", reverse=True), file=out)
    else:
        raise UnsupportedError("jld2 -> jld2 is the plain re-encoding (treexchange._commands.convert)")
    return pair


def _export(
    source: Any, target: Any, fmt: str, dry_run: bool, shard: int | None, out: TextIO, stream: TextIO | None
) -> None:
    roots = lazy_tree(source)
    fmt_module: Any = _safetensors if fmt == "safetensors" else _orbax
    plan = fmt_module.plan_export(roots)
    gpu = [format_path(path) for path in plan.device_arrays]
    if gpu:  # (written as they are, pointers; but whoever converts a model wants its weights)
        more = f" and {len(gpu) - 1} more" if len(gpu) > 1 else ""
        print(
            f"treexchange convert: note: {os.fspath(source)}: {gpu[0]}{more} hold GPU device pointers, "
            "no weights (the value was saved from the GPU: save cpu(model) to convert its weights)",
            file=stream if stream is not None else sys.stderr,
        )
    if dry_run:
        for line in plan.mapping_lines():
            print(line, file=out)
        return
    bar = ProgressLine(plan.total_bytes, f"{Path(os.fspath(source)).name} -> {fmt}", stream=stream)
    try:
        if fmt == "safetensors":
            fmt_module.write_plan(target, plan, max_shard_size=shard, progress=bar)
        else:
            fmt_module.write_plan(target, plan, progress=bar)
    finally:
        bar.close()


def _export_state_dict(
    source: Any, target: Any, architecture: str, dry_run: bool, out: TextIO, stream: TextIO | None = None
) -> None:
    """JLD2 ``Flux.state`` -> a PyTorch ``state_dict`` in a safetensors file (``torch`` not needed).
    A Flux ≤ 0.14 ``Recur``'s learnt ``state0`` has no place in it (torch's RNN, LSTM and GRU hold
    no initial state): a non-zero one is named on stderr, as ``--flux-state`` names it."""
    from safetensors.numpy import save as st_save  # safetensors is an optional extra

    with open_jld2(source) as f:
        names = list(f)
        if len(names) == 1:
            (name,) = names
        elif "model_state" in names:
            name = "model_state"
        else:
            raise UnsupportedError(
                f"{os.fspath(source)}: which value is the Flux.state? The file holds {', '.join(names)} "
                "and no model_state"
            )
        state = f[name].read()
    state_dict = flux_to_state_dict(state, architecture, root=(name,))
    learnt = nonzero_initial_states(state, (name,))
    if learnt:  # (the torch module would start from zeros: another function, silently)
        more = f" and {len(learnt) - 1} more" if len(learnt) > 1 else ""
        print(
            f"treexchange convert: note: {os.fspath(source)}: {format_path(learnt[0])}{more}: a learnt "
            "initial state, which no torch RNN/LSTM/GRU holds: left out of the state_dict (the torch "
            "module starts from zeros; pass it as h0 (LSTM: h0, c0) to compute what the Recur did)",
            file=stream if stream is not None else sys.stderr,
        )
    if dry_run:
        for key, tensor in state_dict.items():
            print(f"{key}  {tuple(tensor.shape)} {tensor.dtype}", file=out)
        return
    tensors = {key: np.ascontiguousarray(tensor) for key, tensor in state_dict.items()}
    # safetensors stores names sorted: the module order goes into the metadata (read back above)
    metadata = {"format": "pt", ORDER_KEY: json.dumps(list(tensors))}
    data = st_save(tensors, metadata=metadata)

    def write(f: BinaryIO) -> None:
        f.write(data)

    atomic_write(target, write)


def _recorded_or_recovered_order(opened: SafetensorsSource, architecture: str) -> dict[str, Any]:
    """The file's tensors in ``state_dict`` order: as recorded by treexchange, else recovered."""
    tensors = {name: opened.array(name) for name in opened.tensors}
    recorded = opened.metadata.get(ORDER_KEY)
    if recorded is not None:
        try:  # (the file's text: nested deep, or names that are not text, is no order to keep)
            order = tj.loads_document(recorded, ORDER_KEY)
        except TreexchangeError:
            order = None
        if (
            isinstance(order, list)
            and all(isinstance(name, str) for name in order)
            and sorted(order) == sorted(tensors)
        ):
            return {name: tensors[name] for name in order}
    return architecture_order(tensors, architecture)


def _import(
    source: Any,
    target: Any,
    fmt: str,
    dry_run: bool,
    out: TextIO,
    stream: TextIO | None,
    architecture: Any,
    spill_above: int | None = None,
) -> None:
    opened: Any
    if architecture is not None and fmt != "safetensors":
        raise UnsupportedError("--architecture applies to a safetensors source (a PyTorch state_dict)")
    if fmt == "safetensors":
        opened = SafetensorsSource(source)
        if architecture is not None:
            state_dict = _recorded_or_recovered_order(opened, architecture)
            if dry_run:
                for line in mapping_lines(state_dict, architecture):
                    print(line, file=out)
                return
            save_jld2(target, {"model_state": state_dict_to_flux(state_dict, architecture)})
            return
    else:
        opened = OrbaxSource(source)
    if dry_run:
        for line in opened.mapping_lines():
            print(line, file=out)
        return
    limit = spill_threshold() if spill_above is None else spill_above
    if fmt == "orbax" and _total_bytes(opened) > limit:
        # Restore in batches, each moved to a file-backed map beside the target before the next
        # one: a checkpoint larger than memory converts with one batch in RAM (docs/orbax.md).
        roots: dict[str, Any] = opened.roots(spill_dir=Path(os.fspath(target)).absolute().parent)
    else:
        roots = opened.roots()
    bar = ProgressLine(_total_bytes(opened), f"{Path(os.fspath(source)).name} -> jld2", stream=stream)
    release: Callable[[], None] | None = getattr(opened, "release_pages", None)
    pending = [0]

    def on_write(nbytes: int) -> None:
        bar(nbytes)
        pending[0] += nbytes
        if release is not None and pending[0] >= _RELEASE_EVERY:
            pending[0] = 0
            release()  # pages of tensors already written: the kernel may drop them now

    try:
        save_jld2(target, roots, on_write=on_write)
    finally:
        bar.close()
    closer: Callable[[], None] | None = getattr(opened, "close", None)
    if closer is not None:
        closer()


def spill_threshold() -> int:
    """orbax -> JLD2: checkpoints with more array bytes than this (half the memory available now)
    are restored through spill files beside the target."""
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
        available = 8 << 30
    return int(available // 2)


_RELEASE_EVERY = 64 << 20
"""Bytes written between two releases of a mapped source's pages (bounds the resident size)."""


def _total_bytes(opened: Any) -> int:
    tensors = getattr(opened, "tensors", None)
    if isinstance(tensors, dict):
        return sum(t.nbytes for t in tensors.values())
    document = getattr(opened, "document", None)
    if document is None:
        return 0
    total = 0
    for name, root in document.get("roots", []):
        for _, node in array_nodes(root, (name,)):
            total += math.prod(node["shape"]) * DTYPES[node["dtype"]].itemsize  # (np.prod wraps at 2**63)
    return total


def stored_arrays(roots: Any) -> list[tuple[TreePath, Any]]:
    """Every numeric array of ``roots`` with its first tree path, once (JLD2 writes a shared array
    once, and objects that refer to each other in a cycle are followed only until they do).

    Example:
        >>> from treexchange import NamedTuple
        >>> w = np.ones((2, 3), np.float32)
        >>> [(p, a.shape) for p, a in stored_arrays({"m": NamedTuple(a=w, b=(w, np.zeros(2)))})]
        [(('m', 'a'), (2, 3)), (('m', 'b', 2), (2,))]
    """
    found: list[tuple[TreePath, Any]] = []
    seen: set[int] = set()
    todo: list[tuple[Any, TreePath]] = [(roots, ())]
    while todo:
        value, path = todo.pop()
        if is_numeric_array(value):
            # (a lazy node per reference: the dataset's address tells a shared array; else the object)
            key = getattr(value, "object_address", None) or id(value)
            if key not in seen:
                seen.add(key)
                found.append((path, value))
            continue
        children = value_children(value)
        if children is None or id(value) in seen:
            continue
        seen.add(id(value))
        todo.extend((v, (*path, k)) for k, v in reversed(children))
    return found
