"""orbax checkpoints <-> value trees, through ``orbax-checkpoint`` itself.

**Layout.** A checkpoint directory written here is an orbax *composite* checkpoint with two items:

- ``state``: a PyTree checkpoint (OCDBT/TensorStore, orbax's default) of a nested ``dict`` holding
  every numeric array of the tree, keyed by the parts of its flat name (:mod:`._flatnames`:
  ``{"layers": {"0": {"weight": ...}}}``), each array in its Julia shape (``w[i-1, j-1] == W[i, j]``)
  and dtype (bfloat16, complex and bool included). A JAX program restores it with
  ``ocp.StandardCheckpointer().restore(path / "state")`` or through ``ocp.args.Composite``.
- ``treexchange``: a JSON item (``ocp.args.JsonSave``) with the tree (:mod:`._treejson`): structure,
  names, Julia types, ``()``/``nothing`` markers, every non-array leaf, and arrays orbax refuses
  (zero-size ones) inline. With it, JLD2 -> orbax -> JLD2 is value-equal.

A plain PyTree checkpoint (written by someone else) imports as nested NamedTuples of its dicts,
tuples of its lists and tuples, and its strings, scalars and ``None`` as they are.

**Sharding.** ``sharding=`` on export places each array as a ``jax.Array`` built from the JLD2
file slice by slice (each device's shard is read from the file on its own, then written by orbax
from that device); on import, arrays are restored straight into the given sharding (orbax reads
each device's slice only) before the JLD2 file is written. 64-bit arrays (Float64, Int64, UInt64,
ComplexF64) stay numpy arrays unless ``jax_enable_x64`` is on: jax would narrow them to 32 bits.

**Memory.** Export hands orbax ``jax.Array`` objects on the host CPU device (or on the given
sharding), each built from the JLD2 file slice by slice; orbax writes a tree with about one more
copy of it in flight (its own save does the same), see docs/performance.md. Import restores
arrays in batches of at most ``batch_bytes`` (orbax's partial restore) and, with ``spill_dir``,
moves each batch into a file-backed map before the next one and releases its pages, so a
checkpoint larger than memory converts with about one batch resident.

**Damage.** What an import refuses before orbax or tensorstore reads it (JSON nested too deep,
sizes no process can hold, a tree disagreeing with the arrays stored) is :mod:`._orbaxchecks`.
"""

from __future__ import annotations

import mmap
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import _process_exists
from .._errors import ConversionError, FormatError, TreePath, UnsupportedError
from .._gc import gc_paused
from .._values import NamedTuple
from . import _orbaxchecks as checks, _treejson as tj
from ._flatnames import NameTable
from ._safetensors import ExportPlan, Progress, TensorPlan, mapping_line

STATE_ITEM = "state"
TREE_ITEM = "treexchange"
INLINE = "inline"

ShardingSpec = Any
"""A ``jax.sharding.Sharding`` for every array (replicated where it does not fit an array), or a
function ``(path, shape, dtype) -> Sharding | None``."""


def plan_export(roots: Mapping[str, Any]) -> ExportPlan:
    """The arrays of ``roots`` and the tree item; nothing is read.

    Example:
        >>> from treexchange import NamedTuple
        >>> plan = plan_export({"ps": NamedTuple(w=np.ones((2, 3), np.float32), e=np.zeros(0), σ=())})
        >>> plan.mapping_lines()
        ['ps.w -> w  (2, 3) float32  none']
    """
    names = NameTable(drop_root=len(roots) == 1)
    tensors: list[TensorPlan] = []

    def on_array(array: Any, path: TreePath) -> dict[str, Any]:
        dtype = np.dtype(array.dtype).newbyteorder("=")
        shape = tuple(int(d) for d in array.shape)
        node: dict[str, Any] = {
            "dtype": dtype.name,
            "shape": list(shape),
            "julia_type": tj.julia_array_type(dtype, len(shape)),
        }
        if 0 in shape:  # orbax refuses zero-size arrays; there are no bytes to store anyway
            node[INLINE] = True
            return node
        name = names.add(path)
        tensors.append(TensorPlan(name, path, array, dtype, shape))
        node["name"] = name
        return node

    sharing = tj.Sharing()  # (one per file: its roots may share objects)
    with gc_paused():  # (a node and a record per object, all kept: collecting them is wasted time)
        encoded = [[name, tj.encode(value, on_array, (name,), sharing)] for name, value in roots.items()]
    document = {"format": tj.TREE_FORMAT, "version": sharing.version(), "axes": "julia-shape"}
    document["roots"] = encoded
    return ExportPlan(document, tensors, layout="logical", device_arrays=sharing.devices)


def _nested(items: Iterator[tuple[str, Any]]) -> dict[str, Any]:
    """``{"a.b": x}`` -> ``{"a": {"b": x}}`` (names from :class:`NameTable` never clash)."""
    out: dict[str, Any] = {}
    for name, value in items:
        *parents, leaf = name.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def _placer(sharding: ShardingSpec) -> Callable[[TensorPlan], Any]:
    """``place(tensor)``: the ``jax.Array`` to hand orbax, every device shard of it read from the
    file on its own. Without a sharding, arrays go to the host CPU device: orbax then writes them
    with one copy in flight, where a numpy array in Julia's (column-major) order costs it two."""
    import jax  # jax is costly to import: loaded on first use

    choose = _placer_choice(sharding)
    host = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])

    def place(t: TensorPlan) -> Any:
        if not jax_keeps(t.dtype):  # 64-bit without jax_enable_x64: numpy, never truncated
            return np.asarray(t.source)
        s = choose(t) or host

        source = t.source

        def shard(index: Any) -> np.ndarray:
            return np.ascontiguousarray(source[index])  # only this device's slice is read

        return jax.make_array_from_callback(t.shape, s, shard)

    return place


def write_plan(
    directory: str | os.PathLike[str],
    plan: ExportPlan,
    *,
    sharding: ShardingSpec = None,
    progress: Progress | None = None,
) -> Path:
    """Write ``plan`` as an orbax checkpoint at ``directory`` (replaced if it exists).

    Written beside it under a hidden name first and moved into place once complete: orbax's own
    ``force=True`` removes an existing checkpoint before it writes, so a save that failed (a name
    orbax's storage cannot hold, a full disk) lost the old checkpoint and left its temporary
    directory behind. Now a failed save leaves ``directory`` as it was and nothing else. A
    symbolic link to a checkpoint is kept and its destination replaced. What a killed save left
    beside it is undone by the next save to the directory (:func:`recover_killed_saves`)."""
    ocp = _orbax()
    for t in plan.tensors:  # (tensorstore keys are UTF-8; the tree item is ASCII-escaped JSON)
        try:
            t.name.encode("utf-8")
        except UnicodeEncodeError:
            raise ConversionError(
                f"the array's name {t.name!r} holds a lone surrogate, which has no UTF-8 form", path=t.path
            ) from None
    place = _placer(sharding)
    state = _nested((t.name, place(t)) for t in plan.tensors)
    given = Path(directory).absolute()
    target = given.resolve() if given.is_symlink() else given  # (the link kept, as save keeps one)
    items = {TREE_ITEM: ocp.args.JsonSave(plan.document)}
    if state:
        items[STATE_ITEM] = ocp.args.PyTreeSave(state)
    recover_killed_saves(target.parent)
    staging = target.with_name(f".{target.name}.treexchange-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        # (room for json.dumps of a deep tree: one frame per JSON level, three per tree level)
        with ocp.Checkpointer(_handler(ocp)) as ckptr, tj.stack_room():
            ckptr.save(staging, ocp.args.Composite(**items))
        _move_into_place(staging, target)
    except BaseException:
        _remove(staging)
        for leftover in staging.parent.glob(f"{staging.name}.orbax-checkpoint-tmp*"):
            _remove(leftover)
        raise
    if progress is not None:
        progress(plan.total_bytes)
    return given


_STAGED = re.compile(r"^\.(?P<name>.+)\.treexchange-(?P<old>old-)?(?P<pid>\d+)-[0-9a-f]{8}$", re.DOTALL)


def recover_killed_saves(directory: Path) -> list[str]:
    """Undo what a save killed mid-way left in ``directory`` (the names of what was removed or
    put back): the hidden staging directory of an incomplete checkpoint is removed; a checkpoint
    moved aside (``.<name>.treexchange-old-…``) is put back as ``<name>`` when nothing took its
    place, else removed. Only directories of processes that no longer exist, owned by this user.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> dead = 2**22 + 1  # above Linux's largest PID: no such process
        >>> (d / f".ckpt.treexchange-old-{dead}-0123abcd").mkdir()
        >>> recover_killed_saves(d), sorted(p.name for p in d.iterdir())
        (['.ckpt.treexchange-old-4194305-0123abcd'], ['ckpt'])
    """
    done: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return done
    for entry in entries:
        match = _STAGED.match(entry.name)
        if match is None or _process_exists(int(match["pid"])):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.geteuid():
                continue
            home = directory / match["name"]
            if match["old"] and not os.path.lexists(home):
                os.rename(entry.path, home)  # (killed between the two renames: put it back)
            else:
                shutil.rmtree(entry.path)
        except OSError:
            continue
        done.append(entry.name)
    return done


def _move_into_place(staging: Path, target: Path) -> None:
    """``staging`` renamed to ``target``; an existing ``target`` is moved aside first and removed
    after (a directory cannot be replaced by one rename)."""
    if not os.path.lexists(target):
        os.rename(staging, target)
        return
    old = target.with_name(f".{target.name}.treexchange-old-{os.getpid()}-{os.urandom(4).hex()}")
    os.rename(target, old)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(old, target)  # (put the checkpoint back)
        raise
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        path.unlink()


def save_orbax(
    directory: str | os.PathLike[str], roots: Mapping[str, Any], *, sharding: ShardingSpec = None
) -> Path:
    """Write ``roots`` (top-level name -> value, as :func:`treexchange.load` returns) as an orbax
    checkpoint directory (see the module docstring for its layout).

    Example:
        >>> import os, tempfile
        >>> import numpy as np
        >>> from treexchange import NamedTuple, load_orbax, save_orbax
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> state = NamedTuple(layers=(NamedTuple(weight=np.ones((2, 3), np.float32), σ=()),))
        >>> _ = save_orbax(path, {"model_state": state})
        >>> load_orbax(path)["model_state"] == state
        True
    """
    return write_plan(directory, plan_export(roots), sharding=sharding)


CONCURRENT_GB = 1
"""orbax's bound on the bytes it holds in flight while saving or restoring (its own option,
``save_concurrent_gb``/``restore_concurrent_gb``; 1 GB is the smallest it takes)."""


def _handler(ocp: Any) -> Any:
    state = ocp.PyTreeCheckpointHandler(save_concurrent_gb=CONCURRENT_GB, restore_concurrent_gb=CONCURRENT_GB)
    return ocp.CompositeCheckpointHandler(**{STATE_ITEM: state, TREE_ITEM: ocp.JsonCheckpointHandler()})


def _orbax() -> Any:
    try:
        import orbax.checkpoint as ocp  # orbax is optional
    except ImportError as err:  # pragma: no cover - the extra is installed in CI
        raise UnsupportedError(
            "orbax checkpoints need 'orbax-checkpoint' "
            "(the 'orbax' extra: pip install '.[orbax]' in a clone of treexchange)"
        ) from err
    return ocp


class OrbaxSource:
    """An orbax checkpoint directory to import: its tree (when written here) and its arrays."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory).absolute()
        if not self.path.is_dir():
            raise FormatError(f"{self.path}: not an orbax checkpoint directory")
        self.ocp = _orbax()
        self.document: dict[str, Any] | None = None
        self._spilled: list[np.ndarray] = []
        self._zarr_files = checks.check_metadata_depth(self.path, TREE_ITEM)
        if (self.path / TREE_ITEM).is_dir():
            # orbax parses the tree item with json, which recurses once per level: its files are
            # checked first (text nested deeper than a tree document is refused), then parsed
            # with room for a tree as deep as one may be (tj.loads_document says why)
            for file in sorted((self.path / TREE_ITEM).rglob("*")):
                if file.is_file():
                    tj.check_json_depth(file.read_bytes(), str(file))
            with (
                checks.reading(self.path),
                self.ocp.Checkpointer(self.ocp.CompositeCheckpointHandler()) as ckptr,
                tj.stack_room(),
            ):
                restored = ckptr.restore(
                    self.path, self.ocp.args.Composite(**{TREE_ITEM: self.ocp.args.JsonRestore()})
                )
            doc = restored[TREE_ITEM]
            if not isinstance(doc, dict) or doc.get("format") != tj.TREE_FORMAT:
                raise FormatError(f"{self.path}: the {TREE_ITEM!r} item is not a treexchange tree")
            tj.document_roots(doc, str(self.path))  # (checked once: a damaged tree is refused here)
            self.document = doc
        elif not (self.path / "_METADATA").is_file():
            inside = checks.checkpoints_inside(self.path, TREE_ITEM)
            raise FormatError(f"{self.path}: neither a treexchange nor a PyTree orbax checkpoint{inside}")

    def _arrays(self) -> list[tuple[TreePath, dict[str, Any]]]:
        """The tree's array nodes stored in the ``state`` item; a damaged tree's are refused
        (:func:`._orbaxchecks.check_tree_arrays`)."""
        assert self.document is not None
        nodes = [
            (p, n)
            for name, root in tj.document_roots(self.document, str(self.path))
            for p, n in tj.array_nodes(root, (name,))
        ]
        stored = [(p, n) for p, n in nodes if not n.get(INLINE)]
        checks.check_tree_arrays(stored, kept=[(p, n) for p, n in nodes if n.get(INLINE)])
        return stored

    def _stored_layouts(self, arrays: list[tuple[TreePath, dict[str, Any]]]) -> dict[str, checks.Layout]:
        """The layouts of the arrays in the ``state`` item (none without one), each of them one
        of the tree's ``arrays``: the restore reads those alone, so an array added to the item
        with orbax (or a tree from another save) is refused (:func:`._orbaxchecks.check_all_named`)
        rather than left out of the values."""
        item = self.path / STATE_ITEM
        stored = checks.zarr_layouts(item, self._zarr_files) if item.is_dir() else {}
        checks.check_all_named(self.path, item, stored, {n["name"] for _, n in arrays})
        return stored

    def mapping_lines(self) -> list[str]:
        """One line per array: ``state/name -> julia.path  shape dtype  none`` (``--dry-run``)."""
        if self.document is None:
            meta = self._plain_metadata()
            return [
                mapping_line(
                    ".".join(k), ("state", *k), *checks.shape_dtype(v, ".".join(k), k), "none", reverse=True
                )
                for k, v in meta
            ]
        arrays = self._arrays()
        self._stored_layouts(arrays)  # (an array the lines would not list is refused here too)
        return [
            mapping_line(n["name"], p, tuple(n["shape"]), tj.DTYPES[n["dtype"]], "none", reverse=True)
            for p, n in arrays
        ]

    def roots(
        self,
        *,
        sharding: ShardingSpec = None,
        batch_bytes: int = 256 << 20,
        spill_dir: str | os.PathLike[str] | None = None,
    ) -> dict[str, Any]:
        """The values of the checkpoint (see :func:`load_orbax`)."""
        if self.document is None:
            return self._plain_roots(sharding)
        arrays = self._restore(sharding, batch_bytes, spill_dir)

        def get(node: dict[str, Any], path: TreePath) -> Any:
            dtype = tj.DTYPES[node["dtype"]]
            shape = tuple(node["shape"])
            if node.get(INLINE):
                return np.zeros(shape, dtype)
            array = arrays[node["name"]]
            if tuple(array.shape) != shape or np.dtype(array.dtype) != dtype:
                raise FormatError(
                    f"array {node['name']!r} is {array.dtype} {tuple(array.shape)}, "
                    f"the tree says {dtype} {shape}",
                    path=path,
                )
            return array

        # (the tree item's files: what the metadata document, which places values again, takes)
        tree_bytes = sum(f.stat().st_size for f in (self.path / TREE_ITEM).rglob("*") if f.is_file())
        sharing = tj.Sharing(tree_bytes, str(self.path))
        return {
            name: tj.decode(root, get, (name,), sharing)
            for name, root in tj.document_roots(self.document, str(self.path))
        }

    def _restore(self, sharding: ShardingSpec, batch_bytes: int, spill_dir: Any) -> dict[str, Any]:
        ocp = self.ocp
        arrays = self._arrays()
        stored = self._stored_layouts(arrays)
        tensors = [
            TensorPlan(n["name"], p, None, tj.DTYPES[n["dtype"]], tuple(n["shape"])) for p, n in arrays
        ]
        choose = _placer_choice(sharding)
        out: dict[str, Any] = {}
        if tensors:
            checks.check_stored(
                self.path, self.path / STATE_ITEM, stored, tensors, held_whole=_on_host(choose)
            )
        with checks.reading(self.path), ocp.Checkpointer(_handler(ocp)) as ckptr, _spill(spill_dir) as spill:
            for batch in _batches(tensors, batch_bytes):
                item = _nested((t.name, 0) for t in batch)
                args = _nested((t.name, _restore_args(ocp, t, choose(t))) for t in batch)
                restore = ocp.args.PyTreeRestore(item=item, restore_args=args, partial_restore=True)
                with tj.stack_room():  # (orbax recurses through the nested names of a deep tree)
                    state = ckptr.restore(self.path, ocp.args.Composite(**{STATE_ITEM: restore}))[STATE_ITEM]
                for t in batch:
                    value = _lookup(state, t.name)
                    if spill is not None and isinstance(value, np.ndarray):
                        value = spill(t.name, value)
                        self._spilled.append(value)
                    out[t.name] = value
                del state
        return out

    def release_pages(self) -> None:
        """Drop the resident pages of spilled arrays from this process (they are read back from
        their files when touched again); a converter calls it while it writes."""
        for array in self._spilled:
            release_map(array)

    def _plain_metadata(self) -> list[tuple[tuple[str, ...], Any]]:
        return [(k, m) for k, m in _stored_metadata(self.ocp, self.path) if checks.is_array(m)]

    def _plain_roots(self, sharding: ShardingSpec) -> dict[str, Any]:
        ocp = self.ocp
        layouts = checks.zarr_layouts(self.path, self._zarr_files)  # (checked before orbax reads them)
        tree = _metadata_tree(ocp, self.path)  # (read once: orbax reads every array's metadata)
        checks.check_plain(self.path, layouts, _leaves(tree))
        choose = _placer_choice(sharding)
        import jax  # jax is costly to import: loaded on first use

        def restore_arg(path: Any, leaf: Any) -> Any:
            if not checks.is_array(leaf):  # (a string's, a Python scalar's: orbax restores it as it is)
                return ocp.RestoreArgs()
            keys = tuple(_key_text(p) for p in path)
            t = TensorPlan(".".join(keys), keys, None, np.dtype(leaf.dtype), tuple(leaf.shape))
            return _restore_args(ocp, t, choose_k(choose, keys, leaf))

        # (arguments in the metadata's own structure: lists and tuples stay so, keys with dots
        # stay whole; None leaves, which orbax skips, stay None)
        args = jax.tree_util.tree_map_with_path(restore_arg, tree)
        with checks.reading(self.path), ocp.PyTreeCheckpointer() as ckptr:
            tree = ckptr.restore(self.path, args=ocp.args.PyTreeRestore(restore_args=args))
        return {"state": _as_namedtuples(tree)}


def _metadata_tree(ocp: Any, directory: Path) -> Any:
    """The tree of the PyTree checkpoint at ``directory`` with orbax's metadata of each leaf
    (nothing restored): an array's has a shape and a dtype (one whose ``_sharding`` orbax cannot
    read has neither, or the whole tree is ``None``)."""
    with checks.reading(directory):
        meta = ocp.PyTreeCheckpointer().metadata(directory)
    tree = getattr(meta, "item_metadata", meta)
    return getattr(tree, "tree", tree)  # orbax >= 0.11: TreeMetadata(tree=...)


def _stored_metadata(ocp: Any, directory: Path) -> list[tuple[tuple[str, ...], Any]]:
    """``(keys, metadata)`` of every leaf of :func:`_metadata_tree` but ``None``."""
    return _leaves(_metadata_tree(ocp, directory))


def _leaves(tree: Any) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    todo: list[tuple[Any, tuple[str, ...]]] = [(tree, ())]
    while todo:  # (a loop: the metadata of a damaged checkpoint may nest deep)
        node, keys = todo.pop()
        if isinstance(node, Mapping):
            todo.extend((v, (*keys, str(k))) for k, v in reversed(list(node.items())))
        elif isinstance(node, (list, tuple)):
            todo.extend((v, (*keys, str(i))) for i, v in reversed(list(enumerate(node))))
        elif node is not None:
            out.append((keys, node))
    return out


def _key_text(entry: Any) -> str:
    """A jax key path entry as :func:`_stored_metadata` names it (a dict key, a position)."""
    for field in ("key", "idx", "name"):
        if hasattr(entry, field):
            return str(getattr(entry, field))
    return str(entry)


def choose_k(choose: Callable[[TensorPlan], Any], keys: tuple[str, ...], meta: Any) -> Any:
    return choose(TensorPlan(".".join(keys), ("state", *keys), None, np.dtype(meta.dtype), tuple(meta.shape)))


def _as_namedtuples(tree: Any) -> Any:
    if isinstance(tree, Mapping):
        return NamedTuple((str(k), _as_namedtuples(v)) for k, v in tree.items())
    if isinstance(tree, (list, tuple)):
        return tuple(_as_namedtuples(v) for v in tree)
    return tree


def _placer_choice(sharding: ShardingSpec) -> Callable[[TensorPlan], Any]:
    if sharding is None:
        return lambda t: None
    import jax  # jax is costly to import: loaded on first use

    def choose(t: TensorPlan) -> Any:
        if callable(sharding) and not isinstance(sharding, jax.sharding.Sharding):
            return sharding(t.path, t.shape, t.dtype)
        try:
            sharding.shard_shape(t.shape)
            return sharding
        except (ValueError, TypeError, IndexError):
            mesh = getattr(sharding, "mesh", None)
            return (
                jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()) if mesh is not None else None
            )

    return choose


def _on_host(choose: Callable[[TensorPlan], Any]) -> Callable[[TensorPlan], bool]:
    """Whether an array is restored whole to this host's memory (no sharding ``choose`` places
    it, or its 64-bit dtype stays numpy: :func:`jax_keeps`), where its size is bounded."""
    return lambda t: choose(t) is None or not jax_keeps(t.dtype)


def jax_keeps(dtype: np.dtype) -> bool:
    """Whether a ``jax.Array`` holds ``dtype`` as it is (64-bit types need ``jax_enable_x64``;
    without it jax would silently narrow them to 32 bits)."""
    import jax  # jax is costly to import: loaded on first use

    return bool(jax.dtypes.canonicalize_dtype(dtype) == np.dtype(dtype))


def _restore_args(ocp: Any, t: TensorPlan, sharding: Any) -> Any:
    if sharding is None or not jax_keeps(t.dtype):
        # (the dtype stored, never cast to the tree's: a float32 array restored as the int8 a
        # damaged tree names would lose its values silently; a difference is refused instead)
        return ocp.RestoreArgs(restore_type=np.ndarray)
    return ocp.ArrayRestoreArgs(sharding=sharding, global_shape=t.shape, dtype=t.dtype)


def _lookup(tree: Mapping[str, Any], name: str) -> Any:
    node: Any = tree
    for part in name.split("."):
        node = node[part]
    return node


def _batches(tensors: list[TensorPlan], max_bytes: int) -> Iterator[list[TensorPlan]]:
    batch: list[TensorPlan] = []
    size = 0
    for t in tensors:
        if batch and size + t.nbytes > max_bytes:
            yield batch
            batch, size = [], 0
        batch.append(t)
        size += t.nbytes
    if batch:
        yield batch


@contextmanager
def _spill(directory: Any) -> Iterator[Callable[[str, np.ndarray], np.ndarray] | None]:
    """With a directory: a function moving an array into a file-backed map there (the maps stay
    valid after the temporary files are unlinked at the end)."""
    if directory is None:
        yield None
        return
    with tempfile.TemporaryDirectory(dir=directory, prefix=".treexchange-spill-") as tmp:
        counter = [0]

        def spill(name: str, array: np.ndarray) -> np.ndarray:
            counter[0] += 1
            path = os.path.join(tmp, f"{counter[0]}.bin")
            mapped = np.lib.format.open_memmap(path, mode="w+", dtype=array.dtype, shape=array.shape)
            mapped[...] = array
            mapped.flush()
            release_map(mapped)  # written back: the pages need not stay resident
            return mapped

        yield spill


def release_map(array: Any) -> None:
    """``MADV_DONTNEED`` on the file map behind a ``numpy.memmap`` (a shared file mapping: the
    data stays in the file and the page cache; this process just stops holding the pages)."""
    m = getattr(array, "_mmap", None)
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if m is not None and advice is not None:
        m.madvise(advice)


def load_orbax(
    directory: str | os.PathLike[str],
    *,
    sharding: ShardingSpec = None,
    batch_bytes: int = 256 << 20,
    spill_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Read an orbax checkpoint directory into values (top-level name -> value).

    A checkpoint written by :func:`save_orbax` gives back exactly the values written (numpy
    arrays, or ``jax.Array``\\ s placed with ``sharding``, each device having read only its
    slice); one whose ``state`` item holds arrays its tree does not name (saved into it with orbax
    since) is refused with a FormatError naming them (``directory/state``, a plain checkpoint,
    reads them all).
    A plain PyTree checkpoint gives ``{"state": nested NamedTuples}``. Arrays are restored
    ``batch_bytes`` at a time; ``spill_dir`` moves each batch into file-backed maps there (for
    checkpoints larger than memory).

    Example:
        >>> import os, tempfile
        >>> import numpy as np
        >>> import treexchange as tx
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> _ = tx.save_orbax(path, {"x": np.arange(6.0).reshape(2, 3), "n": 3})
        >>> back = tx.load_orbax(path, batch_bytes=1 << 20)
        >>> back["x"].shape, back["n"]
        ((2, 3), 3)
    """
    return OrbaxSource(directory).roots(sharding=sharding, batch_bytes=batch_bytes, spill_dir=spill_dir)
