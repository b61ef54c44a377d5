"""The JLD2 reader: JLD2 semantics on top of :mod:`treexchange._hdf5`.

:class:`Reader` opens a file (header check, committed types on demand), describes datasets
without reading their data (:class:`DatasetInfo`), and reads values through a
:class:`Session`, which remembers what it has read so an array referenced from two places is
the same Python object (as it is the same Julia object), and refuses reference cycles.

Arrays of numbers, ``Bool``, ``Complex`` and ``BFloat16`` come back as numpy views of a
*copy-on-write* memory map of the file (``mmap.ACCESS_COPY``): zero-copy, writable, and writing
never touches the file. The map stays alive as long as any array refers to it. A session with
``mmap=False`` reads them instead into fresh arrays of their own with plain reads (one
``preadv`` per array), for callers who want private copies of a file not in the page cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
import os
import struct
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from .._errors import FormatError, LimitError, TreePath, TreexchangeError, UnsupportedError, WrongFormatError
from .._expansion import Expansion
from .._gc import gc_paused
from .._hdf5 import HDF5File, ObjectHeader
from .._hdf5._messages import EXTERNAL_FILES
from .._hdf5._model import H5Class
from .._hdf5._objectheader import RawMessage
from .._juliatype import JuliaType, where_type
from .._limits import DEFAULT_LIMITS, Limits, path_depth, reference_depth
from .._nodeproto import Order
from .._recursion import FRAMES_PER_LEVEL, stack_for_depth
from .._typeof import BOTTOM
from .._values import UNDEF, JuliaArray, JuliaStruct, NamedTuple, Singleton
from ._bulktext import vlen_texts
from ._header import FileHeader, parse_header
from ._plans import (
    CompoundPlan,
    CustomPlan,
    FixedStringPlan,
    GhostPlan,
    Plan,
    ReferencePlan,
    VlenStringPlan,
    mark_mutable,
    type_value,
)
from ._typesread import TypeResolver
from ._typeutil import ANY, array_type

_U64 = struct.Struct("<Q")
_INT64_ATTR_CLASSES = (H5Class.FIXED,)
_GROUP_TYPE = JuliaType("JLD2.Group")
_ARRAY_TYPES_CACHED = 4096  # distinct array types remembered per file (a file uses a handful)
_OFFSET_SHIFT = 32  # Reader._elements: offset << 32 | group (groups: one per kind per prime call)
_GROUP_MASK = (1 << _OFFSET_SHIFT) - 1
_DATATYPE_TYPE = JuliaType("Core.DataType")
_PREFETCH_MIN = 32  # references read together from which prefetching arrays in bulk pays


_TYPE_LIMITS: dict[tuple[Limits, int], Limits] = {}
_TYPE_LIMITS_KEPT = 256


def _type_limits(limits: Limits, max_elements: int) -> Limits:
    """``dataclasses.replace(limits, max_elements=max_elements)``, made once per pair and kept
    for the next file opened with them (a frozen dataclass of many fields is slow to copy, and
    every open needs one: opening the same file again, or any file large enough that the bound
    is ``limits.max_elements`` itself, finds it)."""
    key = (limits, max_elements)
    found = _TYPE_LIMITS.get(key)
    if found is None:
        found = dataclasses.replace(limits, max_elements=max_elements)
        if len(_TYPE_LIMITS) < _TYPE_LIMITS_KEPT:
            _TYPE_LIMITS[key] = found
    return found


def _element_size(info: DatasetInfo) -> int | None:
    """1 for an old file's String stored over its bytes' dataspace (see ``Reader._make_info``):
    its data are the dataspace's count of bytes, not that many strings. Else None (the
    datatype's size)."""
    space = info.obj.dataspace
    return 1 if info.space == "scalar" and space is not None and space.kind == "simple" else None


class DatasetInfo(ObjectHeader):
    """An object header of a JLD2 file together with what its object holds, without its data.

    The reader's :class:`HDF5File` makes every object header it parses a ``DatasetInfo``;
    :meth:`Reader.info` fills in the description on first use (``value_kind`` is ``None``
    until then). One object per dataset rather than a header plus a description: a walk of a
    large model reaches tens of thousands of datasets, and each object kept alive is one more
    for every full collection of the cyclic garbage collector to scan.

    Attributes (besides the object header's own):
        address: relative address of the object header.
        obj: the object header (the object itself).
        kind: ``"group"``, ``"datatype"`` or ``"dataset"``.
        plan: how one element decodes (``None`` for groups).
        space: ``"scalar"``, ``"simple"`` or ``"null"`` (datasets).
        shape: Julia shape for arrays (``dimensions`` attribute honoured), else ``None``.
        eltype: Julia element type for arrays.
        julia_type: Julia type of the value.
        value_kind: the inspect kind; ``"ref"`` for a scalar reference (follow it).
        memory: the ``Memory`` attribute is present (a Julia ``Memory``, not an ``Array``).
        count: stored elements (dataspace count; the array's length for arrays).
        dtype: numpy dtype of a plain-data array (numbers, Bool, Complex, BFloat16, and
            little-endian Int128/UInt128 as labelled 16-byte elements), else None.
    """

    __slots__ = (
        "count",
        "dtype",
        "eltype",
        "julia_type",
        "memory",
        "plan",
        "shape",
        "space",
        "value_kind",
    )

    plan: Plan | None
    space: str
    shape: tuple[int, ...] | None
    eltype: JuliaType | None
    julia_type: JuliaType
    memory: bool
    count: int
    dtype: np.dtype | None

    def __init__(
        self, file: HDF5File, address: int, offset: int, version: int, messages: Sequence[RawMessage]
    ) -> None:
        super().__init__(file, address, offset, version, messages)
        self.value_kind: str | None = None  # not described yet

    def _clone_at(self, address: int, offset: int) -> DatasetInfo:
        """A header rebuilt from this one (see :mod:`treexchange._hdf5._headermemo`), with this
        one's description when it has one.

        The description follows from the header's bytes other than the layout body (datatype,
        dataspace, the attributes -- ``dimensions``, ``julia_type``, ``Memory`` -- and the
        committed types they refer to), which the two headers share; so it is the same, and
        describing the clone again (every limit check included) would reach the same result.
        Copied slot by slot: for a file of many alike arrays this replaces ``_make_info``.
        """
        obj = cast(DatasetInfo, super()._clone_at(address, offset))
        kind = self.value_kind
        if kind is not None:
            obj.plan = self.plan
            obj.space = self.space
            obj.shape = self.shape
            obj.eltype = self.eltype
            obj.julia_type = self.julia_type
            obj.memory = self.memory
            obj.count = self.count
            obj.dtype = self.dtype
        obj.value_kind = kind
        return obj

    @property
    def obj(self) -> DatasetInfo:
        return self

    def _describe(
        self,
        plan: Plan | None,
        space: str,
        shape: tuple[int, ...] | None,
        eltype: JuliaType | None,
        julia_type: JuliaType,
        value_kind: str,
        memory: bool,
        count: int,
    ) -> DatasetInfo:
        self.plan = plan
        self.space = space
        self.shape = shape
        self.eltype = eltype
        self.julia_type = julia_type
        self.memory = memory
        self.count = count
        # Only arrays (a shape) of plain data (a plan with a dtype) that store something
        # (not a null dataspace) have a dtype; fixed here, read at every array node.
        self.dtype = plan.array_dtype if shape is not None and plan is not None and space != "null" else None
        self.value_kind = value_kind  # last: described
        return self

    def __repr__(self) -> str:
        return f"<DatasetInfo {self.kind} at {self.address}: {self.julia_type} {self.shape}>"


class Reader:
    """An open JLD2 file.

    Args:
        source: path, or the file's bytes.
        limits: safety limits.
        verify_checksums: verify HDF5 metadata checksums (JLD2 itself does not).
        require_jld2: raise :class:`WrongFormatError` for plain HDF5 (no JLD2 header).
        refuse: see :class:`HDF5File` (raises :class:`treexchange._hdf5._file.Refused`).
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | bytes,
        *,
        limits: Limits = DEFAULT_LIMITS,
        verify_checksums: bool = False,
        require_jld2: bool = True,
        refuse: Callable[[memoryview], bool] | None = None,
    ) -> None:
        # An attribute of the instance (the class's False stays for a Reader whose __init__
        # failed): a lazy walk asks it per leaf, and Python reads an instance's own attribute
        # faster than one it finds on the class after a miss on the instance.
        self.closed = False
        self.limits = limits
        self.name = "<bytes>" if isinstance(source, (bytes, bytearray, memoryview)) else os.fspath(source)
        self.h5 = HDF5File(
            source, limits=limits, verify_checksums=verify_checksums, header_type=DatasetInfo, refuse=refuse
        )
        self._data: Any = None  # the copy-on-write map (or bytearray), made on first use
        self._type_session: Session | None = None  # see load_type_param
        # Every TypeVar dataset read, by address: one object per file, whichever session reads it
        # (a value's session reads a UnionAll's var, the type session its body's parameter).
        self.typevars: dict[int, JuliaStruct] = {}
        self._source = source if isinstance(source, (bytes, bytearray, memoryview)) else None
        try:
            self.header: FileHeader | None
            if require_jld2:
                self.header = parse_header(self.h5.userblock, what=self._describe())
            else:
                try:
                    self.header = parse_header(self.h5.userblock)
                except WrongFormatError:
                    self.header = None
        except BaseException:
            self.h5.close()
            raise
        # Some values cost no bytes in the file (arrays of ghosts, NTuple{N} of ghosts): their
        # element counts come from header numbers alone, so they are bounded by the file size
        # as well as by Limits.max_elements (a lying header must not drive a huge allocation).
        self.type_limits = _type_limits(limits, limits.virtual_elements_for(self.h5.size))
        # Frames a read as deep as limits.max_depth may need (see treexchange._recursion): entry
        # points make that much room first, so Python's recursion limit is never hit before
        # Limits.max_depth is.
        self.max_refs = reference_depth(limits)
        self.max_path = path_depth(limits)
        self.stack_frames = self.max_refs * FRAMES_PER_LEVEL + 1000
        # Lazy nodes recurse outside any one entry point (a Dict's entries are built when the
        # Dict node is), so the room is made for as long as the file is open.
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(stack_for_depth(reference_depth(limits)))
        self.types = TypeResolver(self)
        self._array_types: dict[tuple[int, int, bool], tuple[JuliaType, JuliaType]] = {}
        self.node_sources: dict[int, Any] = {}  # shared sources of constant nodes (_nodes)
        # element bytes of scalar datasets read in bulk for a walk (prime): address -> where
        # (_element_code: group and offset in one int, so no tuple per dataset for the cyclic
        # collector to track), each group (description, the element bytes of its datasets one
        # after another)
        self._elements: dict[int, int] = {}
        self._element_groups: list[tuple[DatasetInfo, bytes]] = []
        self._texts: dict[int, list[str]] = {}  # id(group's bytes) -> keys of its Pairs (_prime_pairs)
        self._pair_vectors: dict[int, list[int]] = {}  # pair vector -> its Pairs (_prime_pairs)
        # id of such a list of Pairs -> (the list, where _prime_pairs read them: see primed_run)
        self._pair_runs: dict[int, tuple[list[int], DatasetInfo, bytes, range]] = {}
        # id of such a list -> (the list, its Pairs' values: references, described arrays)
        self._run_values: dict[int, tuple[list[int], list[int], list[DatasetInfo | None]]] = {}
        self.nodes_building: set[int] = set()  # scalar datasets whose node is being made (_nodes)
        # the last arrays _primed_elements vouched for when they were one group: (description,
        # their addresses in the order asked), for _run_values_of (see described_all)
        self._primed_arrays: tuple[DatasetInfo, list[int]] | None = None

    def _describe(self) -> str:
        return "file" if self.name == "<bytes>" else repr(self.name)

    def _data_map(self) -> Any:
        """The copy-on-write map that array views share, made on first use (a load with
        ``mmap=False`` never makes it). Mapped from the descriptor the HDF5 layer holds open, so
        it is the file that was opened even if its name has been replaced since."""
        data = self._data
        if data is None:
            fd = self.h5.fileno()
            if fd is None:
                # bytes: arrays must be writable, like the copy-on-write map
                data = bytearray(self._source if self._source is not None else b"")
            else:
                data = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
            self._data = data
        return data

    closed = False

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on a closed treexchange.File")

    def close(self) -> None:
        """Close the file. Arrays already returned stay valid (they keep the map alive)."""
        self.closed = True
        self.h5.close()
        self._stack.close()
        self._elements, self._element_groups, self._texts, self._pair_vectors = {}, [], {}, {}
        self._pair_runs, self._run_values, self._primed_arrays = {}, {}, None
        data, self._data = self._data, None
        if isinstance(data, mmap.mmap):
            try:
                data.close()
            except BufferError:
                pass  # numpy arrays still view it; the map closes when they are gone

    # --- small services (also used by plans and the type resolver) -----------------------------
    def object_kind(self, address: int) -> str:
        # (a header alike to one parsed has its kind: no header object made to ask it, see
        # HDF5File.alike_of; the type parameters of a file are mostly alike datasets)
        return self.h5.alike_of(address).kind

    def heap_bytes(self, buf: Any, off: int) -> memoryview | bytes:
        return self.h5.vlen_at(buf, off)

    # --- groups -----------------------------------------------------------------------------
    @property
    def root_address(self) -> int:
        return self.h5.root_address

    def links(self, address: int, *, hide_types: bool = False) -> dict[str, int]:
        """Links of the group at ``address`` (name -> address), in JLD2's order."""
        self._check_open()
        obj = self.h5.object(address)
        if obj.kind != "group":
            raise FormatError("not a group", offset=obj.offset)
        links = obj.links()
        longest = max(map(len, links), default=0)
        if longest > self.limits.max_name_bytes:
            raise LimitError(
                f"link name of {longest} characters, more than max_name_bytes={self.limits.max_name_bytes}",
                offset=obj.offset,
            )
        if hide_types and "_types" in links:
            links = {k: v for k, v in links.items() if k != "_types"}
        return links

    def attributes(self, address: int) -> dict[str, Any]:
        """The HDF5 attributes of the object at ``address``, decoded (strings as ``str``).

        Scalars decode like dataset elements; 1-d and N-d attributes of plain numbers become
        numpy arrays in Julia order, others lists; empty (null) attributes ``None``.

        Example:
            >>> import os, tempfile, numpy as np, treexchange
            >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
            >>> treexchange.save(path, a=np.zeros(2))
            >>> reader = Reader(path)
            >>> reader.attributes(reader.root_address)
            {}
            >>> reader.close()
        """
        self._check_open()
        obj = self.h5.object(address)
        session = Session(self, "julia")
        out: dict[str, Any] = {}
        for name, attr in obj.attributes.items():
            try:
                plan = self.types.plan_for(attr.type)
                space = attr.space
                if space.kind == "null":
                    out[name] = None
                    continue
                n = space.count
                if n * plan.size > len(attr.data):
                    raise FormatError(f"attribute {name!r} is truncated", offset=attr.data_offset)
                if space.kind == "scalar":
                    out[name] = plan.decode(session, attr.data, 0, (name,))
                elif plan.dtype is not None:
                    flat = np.frombuffer(bytes(attr.data[: n * plan.size]), plan.dtype, n)
                    out[name] = flat.reshape(tuple(space.dims)).T.copy(order="F")
                else:
                    out[name] = plan.decode_many(session, attr.data, n, (name,))
            except TreexchangeError as err:
                err.with_context(offset=attr.data_offset)
                raise
        return out

    # --- datasets ---------------------------------------------------------------------------
    @property
    def _infos(self) -> dict[int, DatasetInfo]:
        """The objects described so far, by address (a view for tests and tools)."""
        return {
            address: obj
            for address, obj in self.h5._objects.items()
            if isinstance(obj, DatasetInfo) and obj.value_kind is not None
        }

    def info(self, address: int, path: TreePath = ()) -> DatasetInfo:
        """Describe the object at ``address`` (described once); reads no array data."""
        if self.closed:
            self._check_open()
        if sys.getrecursionlimit() < self.stack_frames:
            with stack_for_depth(reference_depth(self.limits)):
                return self.info(address, path)
        try:
            info: DatasetInfo = self.h5.object(address)  # type: ignore[assignment]  # header_type
            if info.value_kind is None:
                self._make_info(info, path)
        except TreexchangeError as err:
            err.with_context(offset=self.h5.absolute(address), path=path)
            raise
        except RecursionError as err:
            raise LimitError("structure nested too deeply", path=path) from err
        return info

    def describe(self, address: int, path: TreePath = ()) -> DatasetInfo:
        """What the object at ``address`` is, as :meth:`info` describes it, without making its
        header when one alike to it (but for where its data lie) is described already: then
        that one is returned, so only its description may be used, not its address or
        offset, nor its data (:meth:`element_bytes_at` reads a scalar's bytes for
        ``address``). A lazy walk over many alike arrays keeps no header object per array.
        """
        if self.closed:
            self._check_open()
        try:
            info = cast(DatasetInfo, self.h5.alike_of(address))
        except TreexchangeError as err:
            err.with_context(offset=self.h5.absolute(address), path=path)
            raise
        if info.value_kind is None:
            return self.info(address, path)  # not described yet: the usual way
        return info

    def described_array(self, address: int) -> DatasetInfo | None:
        """What :meth:`describe` gives for ``address`` when that is known already and is a
        numeric array (a lazy walk's leaves, once primed); None otherwise (ask describe)."""
        h5 = self.h5
        info = h5._objects.get(address)
        if info is None:
            info = h5.vouched_for(address)
            if info is None:
                return None
        if info.value_kind is None or self.closed:  # type: ignore[attr-defined]
            return None
        return info if info.dtype is not None else None  # type: ignore[attr-defined,return-value]

    def primed_struct(self, address: int) -> tuple[CompoundPlan, bytes, int] | None:
        """``(plan, buffer, offset)`` of the element of the scalar struct (or NamedTuple, Tuple)
        dataset at ``address`` when :meth:`prime` read it (what :meth:`describe` and
        :meth:`element_bytes_at` then give); None otherwise."""
        found = self._elements.get(address)
        if found is None or self.closed or address in self.h5._objects:
            return None
        info, blob = self._element_groups[found & _GROUP_MASK]
        plan = info.plan
        if type(plan) is not CompoundPlan:
            return None
        return plan, blob, found >> _OFFSET_SHIFT

    def described_arrays(self, addresses: list[int]) -> list[DatasetInfo | None]:
        """:meth:`described_array` of each address (0: None), in one pass."""
        h5 = self.h5
        objects, vouched = h5._objects, h5._vouched
        # In C (map): a walk asks this for every value of every Dict. An address is in one of
        # the two at most (``object`` pops from ``vouched`` the header it makes): the ones not
        # vouched for are looked up in ``objects``. Once primed, those are a few (the header
        # each group of alike ones was parsed from): found by C scans, not a loop over all.
        found: list[Any] = list(map(vouched.get, addresses))
        first = found[0] if found else None
        if first is not None and found.count(first) == len(found):
            # a Dict's values primed with it: every one vouched for as alike to one header (a
            # header has no ``__eq__``: the count is of identities; no ``None`` counted), checked
            # once as below
            return found if first.value_kind is not None and first.dtype is not None else [None] * len(found)
        missing = found.count(None)
        if missing and missing <= _FEW_MISSING:
            i = -1
            for _ in range(missing):
                i = found.index(None, i + 1)
                found[i] = objects.get(addresses[i])
        elif missing and not objects.keys().isdisjoint(addresses):
            found = [objects.get(a) if f is None else f for a, f in zip(addresses, found)]
        if missing and h5._pending and None in found:
            # (vouched for in a large group not entered yet, see HDF5File.vouch_as: entered now)
            vouched = h5.enter_vouched()
            found = [vouched.get(a) if f is None else f for a, f in zip(addresses, found)]
        # each distinct description (a few: one per kind of header) checked once; one for all
        # (the usual case) told by a count of identities, cheaper than a set of them
        probe = found[-1] if found else None
        kinds = (probe,) if found.count(probe) == len(found) else set(found)
        unusable = {f for f in kinds if f is not None and (f.value_kind is None or f.dtype is None)}
        if unusable:
            found = [None if f in unusable else f for f in found]
        return found

    def prime(
        self,
        addresses: np.ndarray,
        path: TreePath = (),
        *,
        dicts: bool = False,
        refs: bool = True,
        keys: tuple[bytes, range] | None = None,
    ) -> list[str] | None:
        """Get ready to describe many datasets (a lazy walk about to visit the elements of a
        vector of references): their headers are checked in bulk (:meth:`alike`), each dataset
        is then described from one alike to it (:meth:`describe`) without a check of its own,
        the element bytes of small scalar datasets (layers, Pairs) are kept for
        :meth:`element_bytes_at`, and (``refs``) the datasets those refer to are checked the
        same way. ``dicts``: the datasets that are Dicts get the same for their Pairs, all
        Dicts' Pairs together (:meth:`_prime_pairs`; one level: not the Dicts inside those).
        ``keys``: with ``dicts``, the String keys (their vlen elements: buffer, offsets) of the
        Dict holding these Dicts, decoded with their Pairs' keys (they lie in the same heap
        collections); returns their texts, or None when they were not decoded so.
        """
        texts = None
        for info, found, blob in self._primed_elements(addresses, path):
            plan = info.plan
            assert plan is not None
            self._keep_elements(info, found, blob)
            if isinstance(plan, CompoundPlan) and blob and refs:
                found_refs = _refs_in(plan, blob)
                if found_refs is not None:
                    self.h5.vouch(found_refs)
            if dicts and type(plan) is CustomPlan and plan.kind == "dict" and blob and len(found) > 1:
                at = _pairs_at(plan)
                if at is not None:
                    rows = np.frombuffer(blob, np.uint8).reshape(-1, plan.size)
                    vectors = rows[:, at : at + 8].copy().view("<u8").ravel().tolist()
                    texts = self._prime_pairs(vectors, path, keys)
        return texts

    def _primed_elements(
        self, addresses: np.ndarray, path: TreePath
    ) -> list[tuple[DatasetInfo, np.ndarray, bytes]]:
        """:meth:`scalar_elements`, the arrays' headers vouched for (:meth:`HDF5File.vouch_as`);
        the scalar datasets' groups returned (for :meth:`_keep_elements`). The arrays are
        described only: not located (describing needs neither where their data lie nor a check of
        it; a read checks them)."""
        scalars, arrays = self.scalar_elements(addresses, path, arrays_data=False)
        for info, found, _ in arrays:
            listed = found.tolist()
            self.h5.vouch_as(listed, info)
            self._primed_arrays = (info, listed)
        return scalars

    def _keep_elements(self, info: DatasetInfo, found: np.ndarray, blob: bytes, *, each: bool = True) -> None:
        """Vouch for the headers of the scalar datasets at ``found`` (described by ``info``) and
        keep their element bytes ``blob``: for :meth:`_prime_pairs` and (``each``) by address
        for :meth:`element_bytes_at` and :meth:`primed_struct`."""
        assert info.plan is not None
        group = len(self._element_groups)
        self._element_groups.append((info, blob))
        listed = found.tolist()
        self.h5.vouch_as(listed, info)
        step = info.plan.size << _OFFSET_SHIFT  # (ints only: not tracked by the collector)
        if each and group <= _GROUP_MASK:
            self._elements.update(zip(listed, range(group, group + len(listed) * step, step)))

    def _prime_pairs(
        self, vectors: list[int], path: TreePath, keys: tuple[bytes, range] | None = None
    ) -> list[str] | None:
        """:meth:`prime` for the Pairs of many Dicts at once (their pair vectors at
        ``vectors``), then for the values the Pairs refer to. Anything unusual stops it: the
        lazy path then meets it (and reports it) where it lies. ``keys``: see :meth:`prime`
        (the texts returned)."""
        try:
            read = self._reference_vectors(vectors, path)
        except TreexchangeError:
            return None
        if read is None:
            return None
        listed, pairs = read
        self._pair_vectors.update(zip(vectors, listed))
        if pairs is None:
            pairs = np.array([address for found in listed for address in found], np.uint64)
        if len(pairs) < 2:
            return None
        scalars_before = len(self._element_groups)
        scalars = self._primed_elements(pairs, path)
        # all of them in one group, in the order asked (alike keeps the order of its input,
        # picking by masks): each Dict's Pairs a run of it (primed_run), none kept by address
        whole = len(scalars) == 1 and len(scalars[0][1]) == len(pairs)
        for info, found, blob in scalars:
            self._keep_elements(info, found, blob, each=not whole)
        if whole:
            self._pair_runs_of(listed, scalars[0][0], scalars[0][2])
        outer = None
        for info, blob in self._element_groups[scalars_before:]:
            # the String keys of all these Dicts, decoded together (see keys_of)
            plan = info.plan
            if isinstance(plan, CompoundPlan) and len(plan.fields) == 2 and blob:
                first = plan.fields[0]
                if type(first.plan) is VlenStringPlan and not first.plan.symbol:
                    at = range(first.offset, first.offset + len(blob), plan.size)
                    texts = self._pair_keys(blob, at, keys) if outer is None else None
                    if texts is not None and keys is not None:
                        outer, texts = texts[len(at) :], texts[: len(at)]
                    if texts is None:
                        texts = vlen_texts(self.h5, blob, at)
                    if texts is not None:
                        self._texts[id(blob)] = texts
        values = [
            found
            for info, blob in self._element_groups[scalars_before:]
            if isinstance(info.plan, CompoundPlan) and blob
            for found in [_refs_in(info.plan, blob)]
            if found is not None
        ]
        if values:
            self.prime(np.concatenate(values), path)
            if whole:
                self._run_values_of(listed, scalars[0][0], scalars[0][2])
        return outer

    def _run_values_of(self, listed: list[list[int]], info: DatasetInfo, blob: bytes) -> None:
        """Each Dict's values (``listed``: its Pairs, read into ``blob`` one Dict after the
        other, see :meth:`_pair_runs_of`) when every one is a reference to an array described
        already: their references and :meth:`described_arrays` of them, found for all the
        Dicts in one pass (not a pass per Dict when it is first looked in), for
        :meth:`primed_values`."""
        plan = info.plan
        if type(plan) is not CompoundPlan or len(plan.fields) != 2:
            return
        second = plan.fields[1]
        n, size = sum(map(len, listed)), plan.size
        if type(second.plan) is not ReferencePlan or size < 8 or n * size > len(blob) or not n:
            return
        refs = np.ndarray((n,), "<u8", blob, second.offset, (size,)).tolist()
        arrays = self.described_all(refs)
        # every value described (one description for all, the usual case, told by a count of
        # identities: ``None in`` would call a header's ``__eq__`` per value)
        described = arrays[0] is not None and arrays.count(arrays[0]) == n
        start = 0
        for found in listed:
            stop = start + len(found)
            part = arrays[start:stop]
            if described or None not in part:  # (else the Dict's own pass primes what is missing)
                self._run_values[id(found)] = (found, refs[start:stop], part)
            start = stop

    def described_all(self, refs: list[int]) -> list[DatasetInfo | None]:
        """:meth:`described_arrays` of ``refs``, at once when they are exactly the arrays the
        last :meth:`_primed_elements` vouched for as one group (the values of the Pairs it just
        primed: each described by that group's header, or by its own when parsed before, which
        describes it alike), not looked up one by one."""
        primed = self._primed_arrays
        if primed is not None and primed[1] == refs and not self.closed:
            info = primed[0]
            if info.value_kind is not None and info.dtype is not None:
                return [info] * len(refs)
        return self.described_arrays(refs)

    def primed_values(self, addresses: list[int]) -> tuple[list[int], list[DatasetInfo | None]] | None:
        """The references of the values of the Pairs at ``addresses`` (a list :meth:`primed_pairs`
        gave) and :meth:`described_arrays` of them, when :meth:`_prime_pairs` found them all
        arrays described already; None otherwise."""
        found = self._run_values.get(id(addresses))
        if found is None or found[0] is not addresses or self.closed:
            return None
        return found[1], found[2]

    def _pair_runs_of(self, listed: list[list[int]], info: DatasetInfo, blob: bytes) -> None:
        """Where each Dict's Pairs (``listed``) lie in ``blob``, the element bytes of all of them
        one after the other in that order (described by ``info``), for :meth:`primed_run`."""
        size = info.plan.size if info.plan is not None else 0
        start = 0
        for found in listed:
            stop = start + len(found) * size
            self._pair_runs[id(found)] = (found, info, blob, range(start, stop, size))
            start = stop

    def _pair_keys(self, blob: bytes, at: range, keys: tuple[bytes, range] | None) -> list[str] | None:
        """:func:`vlen_texts` of the Pairs' keys at ``at`` of ``blob``, then of ``keys`` (an
        outer Dict's, see :meth:`prime`); None if any of them stops the bulk pass, or raises
        (the one-by-one path then reports it where it lies, as without ``keys``)."""
        if keys is None:
            return None
        try:
            return vlen_texts(self.h5, blob, at, keys)
        except TreexchangeError:
            return None

    def _reference_vectors(
        self, vectors: list[int], path: TreePath
    ) -> tuple[list[list[int]], np.ndarray | None] | None:
        """The references held by each vector of references at ``vectors`` (the pair vectors of
        many Dicts): the alike ones gathered in bulk (:meth:`alike`), the others read one by
        one; None when one of them is not such a vector. With them, all of them in one array
        when every vector was gathered in one piece (the usual case), else None."""
        if 0 in vectors:
            return None
        h5, total = self.h5, 0
        found: dict[int, list[int]] = {}
        groups = self.alike(np.array(vectors, np.uint64), path, refs=True)
        for info, at, data_at in groups:
            n = self._vector_length(info)
            if n is None:  # (a group of other datasets: not a Dict's pairs)
                return None
            total += len(at) * n
            if total > self.limits.max_elements:  # (the usual path's bound, over all of them)
                return None
            rows = _gather(h5.buffer, data_at, 8 * n).view("<u8")
            listed = rows.tolist()
            if len(groups) == 1 and at.tolist() == vectors:
                # every vector alike, in the order asked: their references, all in one array too
                return listed, rows.ravel()
            found.update(zip(at.tolist(), listed))
        out = []
        for address in vectors:
            refs = found.get(address)
            if refs is None:
                info = self.info(address, path)
                if info.kind != "dataset" or info.shape is None or type(info.plan) is not ReferencePlan:
                    return None
                total += info.count
                if info.space == "null" or total > self.limits.max_elements:
                    return None
                refs = self.element_addresses(info).tolist()
            out.append(refs)
        return out, None

    def pair_vector(
        self, plan: CustomPlan, buf: Any, off: int, path: TreePath
    ) -> tuple[list[int], np.ndarray | None] | None:
        """The addresses of the Pairs of the Dict (of ``plan``) whose element is at ``buf[off:]``,
        read from its vector of Pairs as :meth:`_reference_vectors` reads the vectors of many
        Dicts (the vector is not described: its element type is not decoded), and the same as
        an array when read in one piece; None for any other form, or anything unusual (the
        usual path, through the vector's node, then reports it where it lies)."""
        at = _pairs_at(plan)
        if at is None or off < 0 or off + at + 8 > len(buf):
            return None
        try:
            read = self._reference_vectors([_U64.unpack_from(buf, off + at)[0]], path)
        except TreexchangeError:
            return None
        return None if read is None else (read[0][0], read[1])

    def _vector_length(self, obj: DatasetInfo) -> int | None:
        """The number of references of the vector of references whose header is ``obj``,
        described or not (without describing it: see :meth:`alike`); None for anything else
        (another dataset, a null dataspace, a ``dimensions`` attribute: the usual path)."""
        if obj.value_kind is not None:
            if obj.shape is None or type(obj.plan) is not ReferencePlan or obj.space == "null":
                return None
            return obj.count
        dt, space = obj.datatype, obj.dataspace
        if obj.kind != "dataset" or dt is None or space is None or space.kind != "simple":
            return None
        if type(self.types.plan_for(dt)) is not ReferencePlan:
            return None
        attrs = obj.attributes
        if attrs and "dimensions" in attrs:
            return None
        return space.count

    def primed_pairs(self, plan: CustomPlan, buf: Any, off: int) -> list[int] | None:
        """The addresses of the Pairs of the Dict (of ``plan``) whose element is at ``buf[off:]``,
        when :meth:`_prime_pairs` read its pair vector (a Dict inside a Dict being walked);
        None otherwise."""
        if not self._pair_vectors or self.closed:
            return None
        at = _pairs_at(plan)
        if at is None or off < 0 or off + at + 8 > len(buf):
            return None
        return self._pair_vectors.get(int.from_bytes(buf[off + at : off + at + 8], "little"))

    def keys_of(self, blob: bytes, offsets: range) -> list[str] | None:
        """The String keys of Pairs :meth:`_prime_pairs` read into ``blob``, at ``offsets``
        (as :meth:`primed_run` gives them); None when they were not decoded in bulk."""
        texts = self._texts.get(id(blob))
        if texts is None or offsets.step <= 0 or offsets.start % offsets.step:
            return None
        first = offsets.start // offsets.step
        return texts[first : first + len(offsets)]

    def primed_run(self, addresses: list[int]) -> tuple[DatasetInfo, bytes, range] | None:
        """When :meth:`prime` read the scalar datasets at ``addresses`` one after the other
        into one buffer (a Dict's Pairs): their description, that buffer and their offsets."""
        run = self._pair_runs.get(id(addresses))
        if run is not None and run[0] is addresses and not self.closed:  # (a list _prime_pairs made)
            return run[1], run[2], run[3]
        return self._run_of(addresses)

    def _run_of(self, addresses: list[int]) -> tuple[DatasetInfo, bytes, range] | None:
        """:meth:`primed_run`, found from where :meth:`prime` put each address."""
        if not addresses:
            return None
        elements = self._elements
        first = elements.get(addresses[0])
        if first is None:
            return None
        info, blob = self._element_groups[first & _GROUP_MASK]
        assert info.plan is not None
        size, start, n = info.plan.size, first >> _OFFSET_SHIFT, len(addresses)
        step = size << _OFFSET_SHIFT
        if list(map(elements.get, addresses)) != list(range(first, first + n * step, step)):
            return None  # not one after the other in one group
        return info, blob, range(start, start + n * size, size)

    def element_bytes_at(self, info: DatasetInfo, address: int, path: TreePath = ()) -> bytes:
        """:meth:`element_bytes` of the scalar dataset at ``address``, described by ``info``
        (itself, or one alike to it: :meth:`describe`)."""
        assert info.plan is not None
        size = info.plan.size
        found = self._elements.get(address)
        if found is not None:
            off = found >> _OFFSET_SHIFT
            described, blob = self._element_groups[found & _GROUP_MASK]
            if described is info:  # read in bulk (prime), checked as below
                return blob[off : off + size]
        if info.address == address:
            return self.element_bytes(info)
        h5 = self.h5
        self._check_open()
        fast = h5._stored_range(info, h5.absolute(address) - info.offset)
        if fast is not None:
            data_at, stored = fast
            nbytes = h5._expected_bytes(info, _element_size(info))
            if data_at is not None and size <= nbytes <= stored and data_at + nbytes <= h5.size:
                return bytes(h5.buffer[data_at : data_at + size])
        return self.element_bytes(self.info(address, path))  # anything else: the usual way

    def _make_info(self, obj: DatasetInfo, path: TreePath) -> DatasetInfo:
        kind = obj.kind
        if kind == "group":
            return obj._describe(None, "scalar", None, None, _GROUP_TYPE, "group", False, 0)
        if kind == "datatype":
            plan = self.types.committed(obj.address)
            return obj._describe(plan, "scalar", None, None, _DATATYPE_TYPE, "singleton", False, 0)
        if kind != "dataset":
            raise FormatError("object is neither a dataset, a group nor a datatype", offset=obj.offset)
        dt, space = obj.datatype, obj.dataspace
        if dt is None or space is None:
            raise FormatError("dataset without datatype or dataspace message", offset=obj.offset)
        plan = self.types.plan_for(dt)
        attrs = obj.attributes
        memory = "Memory" in attrs if attrs else False
        dims = self._dimensions(obj) if attrs and "dimensions" in attrs else None
        space_kind = space.kind
        if space_kind == "scalar":
            return obj._describe(plan, "scalar", None, None, plan.julia_type, plan.kind, memory, 1)
        if isinstance(plan, FixedStringPlan) and space_kind == "simple" and dims is None:
            # JLD2 0.1.12-0.3.1 (2019-2021, file format <= 0.1.1) wrote a String with the
            # dataspace of its bytes as a Vector{UInt8} (n elements) and an n-byte string
            # datatype. JLD2 still reads that (backwards_compatibility.jl): a string datatype
            # over a simple dataspace is the String of the dataspace's count of bytes.
            text = FixedStringPlan(space.count, plan.padding, plan.julia_type, plan.h5type)
            return obj._describe(text, "scalar", None, None, text.julia_type, text.kind, memory, 1)
        ghost = isinstance(plan, GhostPlan)
        if space_kind == "null" and dims is None:
            if ghost:
                return obj._describe(plan, "null", None, None, plan.julia_type, plan.kind, memory, 0)
            # an array that holds nothing: Vector{Union{}}
            return obj._describe(plan, "null", (0,), BOTTOM, array_type(BOTTOM, 1), "vector", memory, 0)
        shape = dims if dims is not None else space.dims[::-1]
        n = 1
        for d in shape:
            n *= d
        # Each dimension on its own too: a zero-size array may claim a 2**64-1 long side, which
        # numpy cannot even describe (its shapes are int64 and their byte size must fit).
        widest = max(shape, default=0)
        if widest > self.limits.max_elements:
            raise LimitError(
                f"array dimension {widest} exceeds max_elements={self.limits.max_elements}", offset=obj.offset
            )
        if dims is not None and space_kind == "simple" and n != space.count:
            raise FormatError(
                f"dimensions attribute {shape} disagrees with the dataspace {space.dims}", offset=obj.offset
            )
        if space_kind == "null" and not ghost and n:
            raise FormatError("null dataspace for an array of non-empty elements", offset=obj.offset)
        if (space_kind == "null" or ghost) and n > self.type_limits.max_elements:
            raise LimitError(
                f"array of {n} zero-size elements exceeds {self.type_limits.max_elements} "
                "(max_elements, or max_virtual_elements: by default 16 per byte of file)",
                offset=obj.offset,
            )
        eltype = self._element_type(obj, path) if isinstance(plan, ReferencePlan) else plan.element_type
        jt = self._array_type(eltype, len(shape), memory)
        value_kind = "array" if plan.array_dtype is not None and space_kind != "null" else "vector"
        return obj._describe(plan, space_kind, shape, eltype, jt, value_kind, memory, n)

    def _array_type(self, eltype: JuliaType, ndims: int, memory: bool) -> JuliaType:
        """``Array{eltype, ndims}`` (or ``Memory``): one shared object per array type.

        Shared objects are cheap and print once. Keyed by the element type's identity (it
        comes from a cached plan or type parameter) rather than its hash, which walks the
        whole type; the entry keeps the element type alive, so the id is not reused.
        """
        key = (id(eltype), ndims, memory)
        hit = self._array_types.get(key)
        if hit is not None and hit[0] is eltype:
            return hit[1]
        jt = array_type(eltype, ndims, memory=memory)
        if len(self._array_types) < _ARRAY_TYPES_CACHED:
            self._array_types[key] = (eltype, jt)
        return jt

    def _dimensions(self, obj: ObjectHeader) -> tuple[int, ...]:
        attr = obj.attributes["dimensions"]
        t = attr.type
        if (
            t.cls not in _INT64_ATTR_CLASSES
            or t.size != 8
            or attr.space.kind != "simple"
            or len(attr.space.dims) != 1
        ):
            raise FormatError("dimensions attribute is not a vector of Int64", offset=attr.data_offset)
        n = attr.space.dims[0]
        if n > 64 or n * 8 > len(attr.data):
            raise FormatError("dimensions attribute is malformed", offset=attr.data_offset)
        order = ">" if t.byte_order == ">" else "<"
        vals = np.frombuffer(bytes(attr.data[: 8 * n]), f"{order}i8", n)
        if (vals < 0).any():
            raise FormatError("negative array dimension", offset=attr.data_offset)
        total = 1
        for v in vals:
            total *= int(v)
            if total > self.limits.max_elements:
                raise LimitError("array dimensions exceed max_elements", offset=attr.data_offset)
        return tuple(int(v) for v in vals[::-1])

    def _element_type(self, obj: ObjectHeader, path: TreePath) -> JuliaType:
        attr = obj.attributes.get("julia_type")
        if attr is None:
            return ANY
        if attr.type.cls != H5Class.REFERENCE or len(attr.data) < 8:
            raise FormatError(
                "julia_type attribute of a reference array is not a reference", offset=attr.data_offset
            )
        ref = _U64.unpack_from(attr.data, 0)[0]
        if ref == 0:
            return ANY
        value = self.types._param(ref, path)
        if isinstance(value, JuliaStruct) and value.type.name == "Core.UnionAll":
            return where_type(value)  # Vector{Foo{T} where T}: elements of any Foo
        return value if isinstance(value, JuliaType) else ANY

    # --- values -----------------------------------------------------------------------------
    def load_standalone(self, address: int, path: TreePath) -> Any:
        """Read one object in a fresh session (type parameter datasets)."""
        return Session(self, "julia").load_ref(address, path)

    def load_type_param(self, address: int, path: TreePath) -> Any:
        """Read a type parameter dataset in the one session every type parameter of the file is
        read in: a ``TypeVar`` (mutable in Julia) used in several ``where`` types, or in the
        ``var`` and the body of one, is one object, as JLD2 wrote it once."""
        if self._type_session is None:
            # (through a proxy: a session the reader keeps must not hold the reader, see
            # TypeResolver.__init__)
            self._type_session = Session(weakref.proxy(self), "julia")
        return self._type_session.load_ref(address, path)

    def shared_type_var(self, address: int, value: JuliaStruct) -> JuliaStruct:
        """The one ``TypeVar`` object of the dataset at ``address``, whichever session reads it.

        JLD2 writes a ``TypeVar`` (mutable in Julia) once per write session and refers to it
        after, so a ``UnionAll`` value's ``var`` field and the parameter of its body
        (``Foo{T} where T``: the body a DataType whose parameter is ``T``) point to one dataset.
        Values are read in their own session and type parameters in the file's type session
        (:meth:`load_type_param`); both return the object first read (:attr:`typevars`, which
        every session asks before reading one), so that a re-encode writes it once again."""
        return self.typevars.setdefault(address, value)

    def raw(self, info: DatasetInfo, nbytes: int) -> memoryview | bytes:
        """At least ``nbytes`` of the dataset's raw (storage-order) bytes."""
        self._check_open()
        raw = self.h5.raw_data(info.obj, _element_size(info))
        if len(raw) < nbytes:
            raise FormatError(f"dataset holds {len(raw)} bytes, needs {nbytes}", offset=info.obj.offset)
        return raw

    def element_bytes(self, info: DatasetInfo) -> bytes:
        """A copy of the first element's bytes (``plan.size`` of them; a scalar dataset's value).

        Lazy nodes keep these to build their children from. A copy of a few bytes, where a view
        of the map would be one more object for the cyclic garbage collector to track per node
        (and would keep the map exported). Bounds are checked as :meth:`raw` checks them.
        """
        assert info.plan is not None
        size = info.plan.size
        self._check_open()
        loc = self.h5.raw_location(info.obj, keep=False, element_size=_element_size(info))
        if loc is None or loc[1] < size:
            return bytes(self.raw(info, size)[:size])
        return bytes(self.h5.buffer[loc[0] : loc[0] + size])

    def numeric_array(self, info: DatasetInfo, order: Order = "julia", *, mmap: bool = True) -> np.ndarray:
        """A plain-data array in Julia or storage order: a zero-copy view of the copy-on-write
        map when stored uncompressed, or (``mmap=False``) a fresh array read with one plain read.
        Compressed arrays are decoded into new arrays either way."""
        assert info.shape is not None and info.dtype is not None
        self._check_open()
        dtype = info.dtype
        count = info.count
        if count == 0:
            flat = np.empty(0, dtype)
        else:
            if count * dtype.itemsize > self.limits.max_array_bytes:
                raise LimitError(
                    f"array of {count * dtype.itemsize} bytes exceeds max_array_bytes", offset=info.obj.offset
                )
            loc = self.h5.raw_location(info.obj)
            if loc is not None:
                off, nbytes = loc
                need = count * dtype.itemsize
                if nbytes < need or off + need > self.h5.size:
                    raise FormatError("array data runs past its storage", offset=off)
                if not mmap:
                    # allocated in its final shape, so the array returned owns its data
                    if order == "julia":
                        arr = np.empty(info.shape, dtype, order="F")
                    else:
                        arr = np.empty(tuple(reversed(info.shape)), dtype)
                    self.h5.read_into(off, arr.reshape(-1, order="A").view(np.uint8).data)
                    return arr
                flat = np.frombuffer(self._data_map(), dtype, count, off)
            else:
                raw = self.raw(info, count * dtype.itemsize)
                flat = np.frombuffer(raw, dtype, count)
                if not flat.flags.writeable:
                    flat = flat.copy()
        if order == "julia":
            return flat.reshape(info.shape, order="F")
        return flat.reshape(tuple(reversed(info.shape)))

    def alike(
        self, addresses: np.ndarray, path: TreePath, *, refs: bool = False, arrays_data: bool = True
    ) -> list[tuple[DatasetInfo, np.ndarray, np.ndarray]]:
        """Many datasets at once: ``[(description, relative addresses, absolute data offsets)]``
        for the groups of datasets among ``addresses`` alike but for where their data lie
        (:meth:`HDF5File.alike`), that are plain-data arrays or scalar datasets stored in one
        piece (``refs``: or vectors of references, as :meth:`element_addresses` reads them),
        whose data pass every check the usual path (:meth:`numeric_array`, :meth:`raw`) makes.
        Datasets in no group are for the usual path (which raises where a check fails). No
        object header is made for the datasets of a group.

        ``arrays_data=False``: the plain-data arrays are not located (no data offsets: an empty
        array in their place) nor their data checked, for a caller that only describes them
        (:meth:`prime`): a header alike to a described one has its description whatever its
        data (:meth:`describe` gives it so too), and reading the data checks them then.
        """
        out: list[tuple[DatasetInfo, np.ndarray, np.ndarray]] = []
        h5 = self.h5
        for proto, offsets in h5.alike(addresses):
            if (
                not isinstance(proto, DatasetInfo)
                or proto.kind != "dataset"
                or EXTERNAL_FILES in proto._types
            ):
                continue
            try:
                # a vector of references, described or not, needs only its length (one not
                # described stays so: its element type, which describe decodes from parameter
                # datasets of its own, waits for a look at the vector itself)
                n = self._vector_length(proto) if refs else None
                if n is not None:
                    info, expected, located = proto, h5._expected_bytes(proto), True
                    if not 0 < n <= self.limits.max_elements or expected < 8 * n:
                        continue
                else:
                    info = self.info(proto.address, path)
                    plan = info.plan
                    if plan is None:
                        continue
                    expected = h5._expected_bytes(info, _element_size(info))
                    if refs and info.shape is not None and type(plan) is ReferencePlan:
                        # (described only now: a ``dimensions`` attribute, see _vector_length)
                        if info.space == "null" or not 0 < info.count <= self.limits.max_elements:
                            continue
                        if expected < 8 * info.count:
                            continue
                    elif info.shape is not None:
                        dtype = info.dtype
                        if plan.dtype is None or dtype is None or info.count == 0:
                            continue
                        need = info.count * dtype.itemsize
                        if need > self.limits.max_array_bytes or expected < need:
                            continue
                    elif info.space != "scalar" or not 0 < plan.size <= expected:
                        continue
                    located = arrays_data or info.shape is None or type(plan) is ReferencePlan
            except TreexchangeError:
                continue
            if not located:
                out.append((info, offsets - h5.base, _NOT_LOCATED))
                continue
            which, data_at, stored = h5.stored_ranges(info, offsets)
            good = (stored >= expected) & (data_at + expected <= h5.size)
            out.append((info, offsets[which][good] - h5.base, data_at[good]))
        return out

    def scalar_elements(
        self, addresses: np.ndarray, path: TreePath, *, arrays_data: bool = True
    ) -> tuple[list[tuple[DatasetInfo, np.ndarray, bytes]], list[tuple[DatasetInfo, np.ndarray, np.ndarray]]]:
        """:meth:`alike` split by kind: for the groups of scalar datasets, ``(description,
        relative addresses, their element bytes one after the other)`` (``plan.size`` bytes
        each, as :meth:`element_bytes` reads them); the groups of arrays as they are
        (``arrays_data``: as for :meth:`alike`)."""
        scalars: list[tuple[DatasetInfo, np.ndarray, bytes]] = []
        arrays: list[tuple[DatasetInfo, np.ndarray, np.ndarray]] = []
        for info, found, data_at in self.alike(addresses, path, arrays_data=arrays_data):
            if info.shape is not None:
                arrays.append((info, found, data_at))
            else:
                assert info.plan is not None
                scalars.append((info, found, _gather(self.h5.buffer, data_at, info.plan.size).tobytes()))
        return scalars, arrays

    def read_value(self, address: int, path: TreePath, session: Session) -> Any:
        elements = session.elements
        if elements:
            found = elements.pop(address, None)
            if found is not None:  # a scalar's bytes, read in bulk (Session.prefetch)
                info, raw, off = found
                try:
                    return self._read_element(info, address, raw, off, path, session)
                except TreexchangeError as err:
                    err.with_context(offset=self.h5.absolute(address), path=path)
                    raise
        info = self.info(address, path)
        try:
            return self._read(info, path, session)
        except TreexchangeError as err:
            err.with_context(offset=info.obj.offset, path=path)
            raise

    def _read_element(
        self, info: DatasetInfo, address: int, raw: Any, off: int, path: TreePath, session: Session
    ) -> Any:
        """The value of the scalar dataset at ``address`` described by ``info``, from its bytes."""
        plan = info.plan
        assert plan is not None
        if isinstance(plan, CompoundPlan) and plan.kind == "struct":
            # Made before its fields: a field referring back to it (a mutable struct in a
            # cycle, JLD2 reads those too) closes on this very object.
            target = session.partial[address] = plan.new_struct()
            by_name = self.types.by_name_params
            if (session.mutable_types and target.type.qualified() in session.mutable_types) or (
                by_name and target.type in by_name
            ):
                target.mutable = True  # by_name_params: see TypeResolver.decode_datatype
            return plan.fill(target, session, raw, off, path)
        return plan.decode(session, raw, off, path)

    def _read(self, info: DatasetInfo, path: TreePath, session: Session) -> Any:
        plan = info.plan
        if info.kind == "group":
            return session.fill_group(info.address, self.links(info.address, hide_types=True), path)
        assert plan is not None
        if info.kind == "datatype":
            return type_value(plan.julia_type)
        if info.shape is None:
            if info.space == "null":
                if isinstance(plan, GhostPlan):
                    return plan.value
                raise FormatError("null dataspace for a non-empty type")
            return self._read_element(info, info.address, self.raw(info, plan.size), 0, path, session)
        if plan.dtype is not None and info.dtype is not None:
            return self.numeric_array(info, session.order, mmap=session.mmap)
        # Int128 arrays too: presented as arrays (info.dtype), loaded as Int128 values.
        return self.object_array(info, path, session)

    def object_array(self, info: DatasetInfo, path: TreePath, session: Session) -> Any:
        """An array whose elements are Python objects: list or :class:`JuliaArray`."""
        plan = info.plan
        assert plan is not None and info.shape is not None
        n = info.count
        if n > self.limits.max_elements:
            raise LimitError(f"array of {n} elements exceeds max_elements={self.limits.max_elements}")
        eltype = info.eltype or ANY
        as_list = (
            isinstance(plan, ReferencePlan) and len(info.shape) == 1 and eltype == ANY and not info.memory
        )
        if isinstance(plan, GhostPlan):
            items = [plan.value] * n
        elif info.space == "null":
            items = []  # a null dataspace of non-ghost elements holds nothing (checked: n == 0)
        else:
            raw = self.raw(info, n * plan.size)
            if isinstance(plan, ReferencePlan) and n >= _PREFETCH_MIN and session.mmap:
                session.prefetch(np.frombuffer(bytes(raw[: 8 * n]), "<u8", n), path)
            if as_list:
                # made before its elements: an element referring back to it closes the cycle
                items = session.partial[info.address] = []
                items.extend(plan.decode_many(session, raw, n, path))
            else:
                items = plan.decode_many(session, raw, n, path)
        if as_list:
            return items
        if isinstance(plan, ReferencePlan):
            mark_mutable(session, items, eltype)  # elements of a concrete struct type stored by reference
            if any(type(item) is Singleton and item.type == eltype for item in items[:1]):
                # a zero-size struct is stored inline (as nothing): by reference means mutable
                session.mutable_ghosts.add(eltype.qualified())
        flat = np.empty(n, dtype=object)
        flat[:] = items
        if session.order == "julia":
            shaped = flat.reshape(info.shape, order="F")
        else:
            shaped = flat.reshape(tuple(reversed(info.shape)))
        return JuliaArray(eltype, shaped)

    def element_addresses(self, info: DatasetInfo) -> np.ndarray:
        """The references of a reference array, in Julia (column-major) order (``uint64``)."""
        n = info.count
        if n > self.limits.max_elements:
            raise LimitError(f"array of {n} elements exceeds max_elements={self.limits.max_elements}")
        raw = self.raw(info, 8 * n)
        return np.frombuffer(bytes(raw[: 8 * n]), "<u8", n)


_NOT_LOCATED = np.zeros(0, np.int64)  # (Reader.alike's data offsets of arrays it did not locate)
_NOT_LOCATED.flags.writeable = False
_FEW_MISSING = 16  # described_arrays: addresses not vouched for, looked up one by one below this


def _zero_size_struct(value: Any) -> bool:
    """Whether ``value`` is a struct with no stored field (a singleton), not a type value."""
    return type(value) is Singleton and not (value.type.name == "Core.Type" and value.type.params)


def _own_object(value: Any) -> Any:
    """The value of a dataset of a zero-size struct type: one object per dataset. JLD2 writes a
    mutable object once, wherever it is referenced (PyCall's ``PyObject``, whose one field, a
    ``Ptr``, is written as ``nothing``), and an immutable one again at each reference; given one
    object per dataset, the writer (tracking singletons by identity) does the same."""
    return Singleton(value.type) if _zero_size_struct(value) else value


def _pairs_at(plan: CustomPlan) -> int | None:
    """Where a Dict's element holds the reference to its vector of Pairs: the element itself,
    or its ``kvvec`` field (JLD2's ``SerializedDict``); None for other forms."""
    inner = plan.inner
    if type(inner) is ReferencePlan:
        return 0
    if type(inner) is CompoundPlan:
        for f in inner.fields:
            if f.name == "kvvec" and type(f.plan) is ReferencePlan and f.offset + 8 <= inner.size:
                return f.offset
    return None


def _refs_in(plan: CompoundPlan, blob: bytes) -> np.ndarray | None:
    """The nonzero references in the reference fields of elements of ``plan`` laid out one
    after the other in ``blob``; None when it has no such field."""
    size = plan.size
    at = [f.offset for f in plan.fields if isinstance(f.plan, ReferencePlan) and f.offset + 8 <= size]
    if not at:
        return None
    if size % 8 == 0 and all(a % 8 == 0 for a in at):
        # (the usual layout: references on 8-byte boundaries) the elements as rows of words,
        # the reference columns taken at once, field by field as below
        words = np.frombuffer(blob, "<u8").reshape(-1, size // 8).T
        refs = words[[a // 8 for a in at]].ravel()
    else:
        rows = np.frombuffer(blob, np.uint8).reshape(-1, size)
        refs = np.concatenate([rows[:, a : a + 8].copy().view("<u8").ravel() for a in at])
    return refs[refs != 0]


def _gather(buf: Any, at: np.ndarray, size: int) -> np.ndarray:
    """The ``size`` bytes at each absolute offset ``at`` of ``buf``, one row each (a copy;
    every range was checked to lie in the file).

    Each row taken whole from a window sliding over ``buf`` (a strided view: one copy a row),
    not byte by byte through an index array of ``len(at) * size`` offsets (half the time, and
    no such temporary to fill)."""
    if not len(at):
        return np.zeros((0, size), np.uint8)
    data = np.frombuffer(buf, np.uint8)
    try:
        if 0 < size <= len(data):
            # rows of a window sliding over the file (a read-only strided view): taking them
            # copies each row with one memcpy, where a gather by byte index costs an index per byte
            return np.ndarray((len(data) - size + 1, size), np.uint8, data, strides=(1, 1))[at]
        return data[at[:, None] + np.arange(size)]
    finally:
        del data


class Session:
    """One traversal: identity memo (shared objects read once), cycle and depth guards.

    ``mmap=False``: plain-data arrays are read into arrays of their own (see
    :meth:`Reader.numeric_array`) instead of being views of the copy-on-write map.
    """

    def __init__(self, reader: Reader, order: Order = "julia", *, mmap: bool = True) -> None:
        if order not in ("julia", "storage"):
            raise ValueError(f"order must be 'julia' or 'storage', not {order!r}")
        self.reader = reader
        self.limits = reader.limits
        self.type_limits = reader.type_limits
        self.order = order
        self.mmap = mmap
        self.memo: dict[int, Any] = {}
        self.expansion = Expansion(self.limits.nodes_for(reader.h5.size))  # (values placed again)
        self.max_refs = reference_depth(self.limits)
        self._busy: set[int] = set()
        # values being filled, by address (lists, dicts, and structs made before their fields):
        # a reference back to one closes the cycle on the same Python object
        self.partial: dict[int, Any] = {}
        self.mutable_types: set[str] = set()  # struct types the file shows are mutable
        # Zero-size struct types the file shows are mutable (PyCall's PyObject): one dataset
        # referenced twice, or the elements of a reference array of their own type.
        self.mutable_ghosts: set[str] = set()
        # scalar datasets read in bulk (prefetch): address -> (description, bytes, offset)
        self.elements: dict[int, tuple[DatasetInfo, bytes, int]] = {}
        self._depth = 0
        self.heap_bytes = reader.h5.vlen_at  # (Reader.heap_bytes, bound to no reader)
        self.decode_datatype = reader.types.decode_datatype
        self.decode_union = reader.types.decode_union
        # String datasets read by reference: text -> (address, top-level name). The same text in
        # two datasets, or one dataset reached from two names, tells how JLD2's write sessions
        # were scoped (TypeResolver.writer_traits, treexchange._jld2._era).
        self._strings: dict[str, tuple[int, Any]] = {}

    def fill_group(self, address: int, links: dict[str, int], path: TreePath) -> dict[str, Any]:
        """A group's values as a dict, made before its entries: a hard link back to the group
        (legal in HDF5) closes on this very dict."""
        group: dict[str, Any] = {}
        self.partial[address] = group
        added = address not in self._busy
        self._busy.add(address)
        try:
            for name, addr in links.items():
                group[name] = self.load_ref(addr, (*path, name))
        finally:
            if added:
                self._busy.discard(address)
            self.partial.pop(address, None)
        self.memo[address] = group
        return group

    def prefetch(self, addresses: np.ndarray, path: TreePath, *, depth: int = 0) -> None:
        """Read many of the datasets at ``addresses`` in bulk, ahead of the usual path.

        For a vector of many references (a Dict's pairs, a long tuple of layers): the datasets
        are sorted into groups alike but for where their data lie (:meth:`Reader.alike`). A
        group of plain-data arrays becomes arrays in the memo -- views of the map, as
        :meth:`Reader.numeric_array` makes them -- with no object header parsed per array. Of
        a group of small scalar datasets (Pairs, NamedTuples of references) the element bytes
        are kept for :meth:`Reader.read_value` (which then parses no header either), and the
        arrays their references point to are prefetched the same way, one level down.

        Only arrays are read early: they hold no references, so reading them first changes
        nothing else (no cycle, no mutability flag, no other identity). Scalars are decoded
        in the usual order, from bytes read early. Every check of the usual path is made on
        each dataset; one that fails is left to the usual path, which raises there.
        """
        if not self.mmap:
            return
        memo, elements = self.memo, self.elements
        scalars, arrays = self.reader.scalar_elements(addresses, path)
        for info, found, data_at in arrays:
            self._prefetch_arrays(info, found, data_at)
        for info, found, blob in scalars:
            plan = info.plan
            assert plan is not None
            size = plan.size
            for i, address in enumerate(found.tolist()):
                if address not in memo:
                    elements[address] = (info, blob, i * size)
            if depth == 0 and isinstance(plan, CompoundPlan) and blob:
                refs_at = (f.offset for f in plan.fields if isinstance(f.plan, ReferencePlan))
                rows = np.frombuffer(blob, np.uint8).reshape(-1, size)
                at = [a for a in refs_at if a + 8 <= size]
                if at:
                    refs = np.concatenate([rows[:, a : a + 8].copy().view("<u8").ravel() for a in at])
                    self.prefetch(refs[refs != 0], path, depth=1)

    def _prefetch_arrays(self, info: DatasetInfo, addresses: np.ndarray, data_at: np.ndarray) -> None:
        memo = self.memo
        dtype = info.dtype
        assert dtype is not None and info.shape is not None
        count = info.count
        itemsize = dtype.itemsize
        aligned = data_at % itemsize == 0  # (others: the usual path, one frombuffer each)
        keys = addresses[aligned].tolist()
        starts = (data_at[aligned] // itemsize).tolist()
        if not keys:
            return
        data = self.reader._data_map()
        flat = np.frombuffer(data, dtype, len(data) // itemsize)
        julia = self.order == "julia"
        shape = info.shape if julia else tuple(reversed(info.shape))
        one_d = len(shape) == 1
        for address, start in zip(keys, starts):
            if address not in memo:
                view = flat[start : start + count]
                if not one_d:
                    view = view.reshape(shape, order="F") if julia else view.reshape(shape)
                memo[address] = view

    def flag_mutable(self, value: JuliaStruct) -> None:
        """Mutability is a property of the type: once the file shows one struct of a type is
        mutable, every struct of that type read so far (each its own dataset, so in the memo or
        being filled) and read later is flagged."""
        value.mutable = True
        key = value.type.qualified()
        if key in self.mutable_types:
            return
        self.mutable_types.add(key)
        for seen in (*self.memo.values(), *self.partial.values()):
            if isinstance(seen, JuliaStruct) and not seen.mutable and seen.type.qualified() == key:
                seen.mutable = True

    def load_ref(self, address: int, path: TreePath) -> Any:
        if address == 0:
            return UNDEF  # an undefined reference: a #undef field or element
        memo = self.memo
        if address in memo:
            value = memo[address]
            if isinstance(value, JuliaStruct) and not value.mutable:
                self.flag_mutable(value)  # one struct referenced twice: JLD2 shares mutable ones only
            elif _zero_size_struct(value):
                self.mutable_ghosts.add(value.type.qualified())  # (the same: a mutable one)
            elif type(value) is str:
                self._note_string(value, address, path)
            elif type(value) is tuple or type(value) is NamedTuple:
                # (one dataset placed twice: what walks the tree visits it at both places)
                self.expansion.again(value, path, self.reader.h5.absolute(address))
            return value
        typevar = self.reader.typevars.get(address)
        if typevar is not None:  # read by another session (Reader.typevars)
            memo[address] = typevar
            return typevar
        if address in self._busy:
            # A cycle: legal in Julia (a Vector{Any} holding itself, a mutable struct pointing
            # back to its parent) and in HDF5 (a hard link to an ancestor group). Lists, dicts and
            # structs are made before their contents, so the cycle closes on the same Python
            # object; other values cannot be made before their parts.
            partial = self.partial.get(address)
            if isinstance(partial, JuliaStruct):
                if not partial.mutable:
                    self.flag_mutable(partial)  # only a mutable struct can contain itself
                return partial
            if partial is not None:
                return partial
            raise UnsupportedError(
                "reference cycle through an immutable value (an array or a value that contains "
                "itself); only Vector{Any}, mutable struct and group cycles can be loaded",
                path=path,
                offset=self.reader.h5.absolute(address),
            )
        if self._depth > self.max_refs:  # the leaf under max_refs containers is one more
            raise LimitError(
                f"references nested deeper than {self.max_refs} (3 * max_depth={self.limits.max_depth}: "
                "a Julia Dict is three datasets per level)",
                path=path,
            )
        if self._depth == 0 and sys.getrecursionlimit() < self.reader.stack_frames:
            with stack_for_depth(reference_depth(self.limits)):
                return self.load_ref(address, path)
        self._busy.add(address)
        self._depth += 1
        try:
            if self._depth == 1:
                with gc_paused():
                    value = self.reader.read_value(address, path, self)
            else:
                value = self.reader.read_value(address, path, self)
        except RecursionError as err:
            raise LimitError("values nested too deeply for Python's stack", path=path) from err
        finally:
            self._busy.discard(address)
            self.partial.pop(address, None)
            self._depth -= 1
        if isinstance(value, JuliaStruct) and value.type.name == "Core.TypeVar":
            value = self.reader.shared_type_var(address, value)
        elif _zero_size_struct(value):
            value = _own_object(value)  # (a zero-size struct's dataset: one object per dataset)
        memo[address] = value
        if type(value) is str:
            self._note_string(value, address, path)
        return value

    def _note_string(self, text: str, address: int, path: TreePath) -> None:
        name = path[0] if path else None
        seen = self._strings.setdefault(text, (address, name))
        if seen[0] != address:
            self.reader.types.writer_traits.add("strings:rewritten")  # not one session
        elif seen[1] != name:
            self.reader.types.writer_traits.add("strings:shared")  # one session across names
