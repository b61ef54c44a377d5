"""The Julia layer of BSON.jl files: raw BSON trees -> treexchange's value model.

BSON.jl lowers every Julia value to BSON documents tagged with a ``tag`` key (BSON.jl's
``src/extensions.jl``, read to learn the format; nothing here is taken from it):

=================  ===========================================  ==================================
tag                keys                                         value model
=================  ===========================================  ==================================
(none)             a ``Dict{Symbol}``: the keys themselves      :class:`JuliaDict` (Symbol keys)
``struct``         ``type`` (a type), ``data``: the fields in   :class:`JuliaStruct` (fields named
                   order (no names), or a binary for a          ``"1"``, ``"2"``... : the file has no
                   primitive type                               field names), numpy scalar,
                                                                :class:`JuliaBits`, ``Dict``
                                                                (``data`` = keys, values),
                                                                :class:`NamedTuple` (names from the
                                                                type), :class:`Singleton` (no fields)
``array``          ``type`` (element type), ``size``, ``data``  numpy array in Julia's shape (zero-
                   (binary of the column-major bytes for bits   copy), :class:`JuliaArray` otherwise
                   types, else an array of elements)            (bits structs: ``_bitsstruct``)
(BSON array)       a ``Vector{Any}`` or any 1-d array of        ``list``
                   non-bits elements (element type not kept)
(BSON binary)      a ``Vector{UInt8}``                          uint8 array
``tuple``/``svec`` ``data``                                     ``tuple``
``symbol``         ``name``                                     :class:`Symbol`
``datatype``       ``name`` (module path), ``params``           a :class:`JuliaType` (as a value:
                                                                ``Singleton(Type{T})``)
``unionall``       ``var`` (a TypeVar struct), ``body``         ``T where var``
``jl_anonymous``   ``typename`` (a ``Core.TypeName`` with its   the closure's type; its instances
                   methods and their compiled code), ``params`` :class:`Closure` (never run)
``jl_bottom_type`` (none)                                       ``Union{}``
``ref``            ``path`` (a module)                          ``JuliaStruct("Core.Module")``
``backref``        ``ref``: 1-based index into the root         the same Python object at every
                   document's ``_backrefs`` array               place (mutable values); a struct,
                                                                Vector{Any} or Dict that refers
                                                                back to itself is a cycle on it
=================  ===========================================  ==================================

Scalars: BSON int64 / int32 / double / bool / string / null are ``Int64`` / ``Int32`` /
``Float64`` / ``Bool`` / ``String`` / ``nothing``. Every other number is a ``struct`` of a
primitive type with its bytes: :class:`Int128` / :class:`UInt128` for those two (as the JLD2
reader gives them; an ``array`` of them is a :class:`JuliaArray` of them), :class:`JuliaBits` for
one numpy has no dtype for.

Flux-era details: module paths ``Main.Core`` / ``Main.Base`` (old Julia) read as ``Core`` /
``Base``; Tracker's ``TrackedArray`` (``tracker``, ``data``, ``grad``; Flux 0.3.4-0.4's ``ref``,
``f``, ``data``, ``grad``) reads as its ``data`` and
``TrackedReal`` as its value, also inside type parameters (``Dense{typeof(relu),
TrackedArray{Float64,2,Matrix{Float64}}}`` reads as ``Dense{typeof(relu), Matrix{Float64}}``),
with a note at its path (:attr:`Session.notes`); a ``CuArray`` saved by mistake is a struct of
device pointers (:func:`is_device_array`).

Every number from the file is checked before it sizes anything (array sizes against the bytes
present and ``Limits``), backrefs are followed once each (cached). A struct reached through a
backref is made before its fields, and so are a BSON array (a ``Vector{Any}``) and a Dict reached
through one, so an element referring back to it (BSON.jl writes a mutable value that contains itself
so) closes the cycle on that very object, as the JLD2 reader does; any other cycle of backrefs
(through a tuple, an N-d ``array``, a type, or a backref that is itself) is refused (BSON.jl's
load builds no cycle of them either: an N-d ``array`` is cached only once its elements are copied in),
and the nesting is bounded: BSON documents by :func:`treexchange._bson._container.bson_depth`,
values with their types (backref hops counted) by ``_limits.type_depth``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import FormatError, LimitError, TreePath, UnsupportedError
from .._expansion import Expansion
from .._juliatype import JuliaType, where_type
from .._limits import Limits, type_depth
from .._typeof import BOTTOM, numpy_dtype
from .._values import (
    MISSING,
    UNDEF,
    Closure,
    Int128,
    JuliaArray,
    JuliaBits,
    JuliaDict,
    JuliaStruct,
    NamedTuple,
    Singleton,
    Symbol,
    UInt128,
)
from ._bitsstruct import bits_struct_dtype, bits_struct_value
from ._container import Blob, Doc, Lazy, Parser, Seq
from ._lowered import lowered_text

_DICT_TYPES = frozenset({"Base.Dict", "Base.IdDict"})
_TRACKED_ARRAYS = frozenset({"Flux.Tracker.TrackedArray", "Tracker.TrackedArray"})
_TRACKED_REALS = frozenset({"Flux.Tracker.TrackedReal", "Tracker.TrackedReal"})
_DEVICE_ARRAYS = frozenset(
    {"CUDA.CuArray", "CuArrays.CuArray", "CUDAnative.CuDeviceArray", "AMDGPU.ROCArray", "Metal.MtlArray"}
)
# Field names of Core and Base types whose definition has not changed across Julia versions (the
# file stores fields by position only); every other struct gets positional names "1", "2", ...
_KNOWN_FIELDS: dict[str, tuple[str, ...]] = {
    "Core.TypeVar": ("name", "lb", "ub"),
    "Core.UnionAll": ("var", "body"),
    "Core.Union": ("a", "b"),
    "Base.Pair": ("first", "second"),
    "Base.RefValue": ("x",),
    "Base.Some": ("value",),
    "Base.UnitRange": ("start", "stop"),
    "Base.OneTo": ("stop",),
    "Base.Complex": ("re", "im"),
    "Base.Rational": ("num", "den"),
}
_IMPLICIT_PARENT = ("Main.Core.", "Main.Base.")
# Struct types read as a value other than a JuliaStruct (their fields read first): never a cycle's
# closing point
_VALUE_STRUCTS = frozenset({"Core.NamedTuple", "Base.Complex", "Base.Missing", "Core.Nothing"})
# BSON.jl writes a 128-bit integer as its 16 native (little-endian) bytes; read as the int-keeping
# values the JLD2 reader gives for the same Julia value
_WIDE_INTS: dict[str, type[Int128] | type[UInt128]] = {"Core.Int128": Int128, "Core.UInt128": UInt128}
_INTEGERS = frozenset({np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32, np.uint16, np.uint8, int})
_TYPE_TAGS = frozenset({"datatype", "unionall", "jl_anonymous", "jl_bottom_type"})
# Struct types read otherwise than as their fields by position (see Session._struct)
_SPECIAL_STRUCTS = (
    _TRACKED_ARRAYS
    | _TRACKED_REALS
    | _DICT_TYPES
    | frozenset(_KNOWN_FIELDS)
    | {"BSON.Undef", "Core.NamedTuple", "Base.Complex", "Base.Missing", "Core.Nothing"}
)


def _tracked_data_index(name: str, n_fields: int) -> int:
    """Where a Tracker struct of ``n_fields`` stored fields keeps its value: ``TrackedReal``'s
    first; ``TrackedArray``'s second, ``(tracker, data, grad)`` from Flux 0.5 on, but third in
    Flux 0.3.4-0.4's ``(ref, f, data, grad)``, whose second field is the ``Tracker.Call`` that
    made it (BSON.jl keeps no field names: the count tells the eras apart).

    Example:
        >>> name = "Flux.Tracker.TrackedArray"
        >>> _tracked_data_index(name, 3), _tracked_data_index(name, 4)
        (1, 2)
    """
    if name not in _TRACKED_ARRAYS:
        return 0
    return 2 if n_fields == 4 else 1


def is_device_array(value: Any) -> bool:
    """Whether a value read from a BSON file is a GPU array saved by mistake (``CuArray``...):
    the file then holds its device pointers, not its numbers.

    Example:
        >>> from treexchange import JuliaStruct
        >>> gpu = JuliaStruct("CUDA.CuArray{Float32, 4, CUDA.Mem.DeviceBuffer}", {})
        >>> is_device_array(gpu), is_device_array(1)
        (True, False)
    """
    return isinstance(value, JuliaStruct) and value.type.name in _DEVICE_ARRAYS


def type_name(parts: list[Any], offset: int, path: TreePath) -> str:
    """A ``datatype``'s module path joined (``["Main", "Core", "Float32"]`` -> ``Core.Float32``)."""
    if not parts or not all(isinstance(p, str) and p for p in parts):
        raise FormatError("BSON.jl datatype name is not a list of strings", offset=offset, path=path)
    name = ".".join(parts)
    if name.startswith(_IMPLICIT_PARENT):  # old Julia: parentmodule(Core) was Main
        name = name[len("Main.") :]
    return name


class Session:
    """One read of a BSON.jl file's values: the backrefs met (each raised once; the same object
    at every place), the notes made, the array options.

    ``backrefs`` lists ``(element type, offset, end)`` of the root's ``_backrefs`` elements
    (parsed when first referenced). ``notes`` maps tree paths to what the reader did there
    (a Tracker array read as its data).
    """

    def __init__(
        self,
        parser: Parser,
        backrefs: list[tuple[int, int, int]],
        *,
        order: str = "julia",
        mmap: bool = True,
    ) -> None:
        self.parser = parser
        self.buf = parser.buf
        self.limits: Limits = parser.limits
        self.backrefs = backrefs
        self.order = order
        self.mmap = mmap
        # Values and their types, one count (a value max_depth deep has a type about twice as
        # deep; backref hops counted too): the reader's type_depth.
        self.max_depth = type_depth(self.limits)
        self.max_virtual = self.limits.virtual_elements_for(parser.size)
        self.notes: dict[TreePath, str] = {}
        self.expansion = Expansion(self.limits.nodes_for(parser.size))  # (values placed again)
        self.shared: dict[int, int] = {}  # id(value) -> backref index, for values reached by backref
        self._raw: dict[int, Any] = {}
        self._values: dict[int, Any] = {}
        self._types: dict[int, Any] = {}
        self._busy: set[tuple[int, str]] = set()
        # backref index -> the mutable container (struct, Vector{Any}, Dict) being filled from it:
        # an element referring back closes the cycle on it
        self._partial: dict[int, Any] = {}
        self._closed: set[int] = set()  # the backrefs whose cycle closed on their partial value
        self._keep: list[Any] = []  # values whose id is in ``shared`` stay alive
        # id(a Lazy type document) -> (it, its type): the parser hands out one Lazy for
        # identical bytes (a layer's type at every layer), so each distinct type is read once.
        self._type_of_doc: dict[int, tuple[Lazy, Any]] = {}
        self._shapes: dict[int, tuple[Seq, tuple[int, ...]]] = {}  # id(an array's size) -> shape
        # (id(an array's type), id(its size)) -> (them, its byte length, dtype, count, shape):
        # the checks of an array's first read, for the arrays whose documents repeat them.
        self._array_plans: dict[tuple[int, int], tuple[Any, ...]] = {}
        self._names: dict[int, tuple[Doc, str]] = {}  # id(datatype document) -> its name
        self._dtypes: dict[int, tuple[JuliaType, np.dtype | None]] = {}  # id(element type) -> dtype
        # id(a struct's type document) -> (it, its raw name, its type): a layer type read once
        self._struct_types: dict[int, tuple[Any, str, JuliaType]] = {}
        # id(a struct's stored type: the document or a backref to it) -> (it, its type), for
        # the types read as positional fields (the fast path of _struct)
        self._plain_structs: dict[int, tuple[Any, JuliaType]] = {}
        # A file whose root document is a lowered Dict (BsonDocument.lowered_root): its value by name.
        self.lowered_root: dict[str, Any] | None = None

    # --- backrefs --------------------------------------------------------------------------
    def raw_backref(self, ref: Any, offset: int, path: TreePath) -> Any:
        """The raw tree of backref ``ref`` (1-based), parsed once."""
        return self._raw_backref(ref, offset, path)[1]

    def _raw_backref(self, ref: Any, offset: int, path: TreePath) -> tuple[int, Any]:
        if not isinstance(ref, (int, np.integer)) or isinstance(ref, (bool, np.bool_)):
            raise FormatError("BSON.jl backref index is not an integer", offset=offset, path=path)
        i = int(ref)
        if not 1 <= i <= len(self.backrefs):
            raise FormatError(
                f"backref {i} out of range (the file has {len(self.backrefs)})", offset=offset, path=path
            )
        raw = self._raw.get(i)
        if raw is None:
            etype, off, end = self.backrefs[i - 1]
            raw = self._raw[i] = self.parser.value(etype, off, end, ("_backrefs", i))
        return i, raw

    def deref(self, raw: Any, path: TreePath) -> Any:
        """``raw`` itself, or the raw tree a backref points to (followed through chains)."""
        hops = 0
        if type(raw) is Lazy:
            raw = raw.tree if raw.tree is not None else self.parser.materialize(raw, path)
        while isinstance(raw, Doc) and raw.get("tag") == "backref":
            hops += 1
            if hops > len(self.backrefs):
                raise FormatError("backrefs refer to each other in a cycle", offset=raw.offset, path=path)
            raw = self.raw_backref(raw.get("ref"), raw.offset, path)
            if type(raw) is Lazy:
                raw = raw.tree if raw.tree is not None else self.parser.materialize(raw, path)
        return raw

    def _follow(self, raw: Doc, role: str, path: TreePath, depth: int) -> Any:
        index, target = self._raw_backref(raw.get("ref"), raw.offset, path)
        cache = self._values if role == "value" else self._types
        if index in cache:
            if role == "value":
                self.expansion.again(cache[index], path, raw.offset)
            return cache[index]
        key = (index, role)
        if key in self._busy:
            partial = self._partial.get(index) if role == "value" else None
            if partial is not None:
                self._closed.add(index)
                return partial  # a mutable container holding itself: the cycle closes on it
            raise UnsupportedError(
                f"cycle of backrefs: backref {index} contains itself (a self-referential value)",
                offset=raw.offset,
                path=path,
            )
        self._busy.add(key)
        try:
            if role == "value":
                result = self.value(target, path, depth + 1, shared=True, ref=index)
            else:
                result = self.type_param(target, path, depth + 1)
        finally:
            self._busy.discard(key)
        cache[index] = result
        if role == "value" and not isinstance(result, (np.generic, str, bool, type(None))):
            self.shared[id(result)] = index
            self._keep.append(result)
        return result

    # --- values ----------------------------------------------------------------------------
    def _deeper(self, depth: int, raw: Any, path: TreePath) -> None:
        if depth > self.max_depth:
            raise LimitError(
                f"BSON.jl values and types nested deeper than {self.max_depth} levels",
                offset=getattr(raw, "offset", None),
                path=path,
            )

    def value(
        self, raw: Any, path: TreePath, depth: int = 0, *, shared: bool = False, ref: int | None = None
    ) -> Any:
        """The value of a raw tree (``shared``: it was reached through backref ``ref``)."""
        if depth > self.max_depth:
            self._deeper(depth, raw, path)
        if type(raw) is Lazy:
            raw = raw.tree if raw.tree is not None else self.parser.materialize(raw, path)
        if type(raw) is Doc:
            tag = raw.get("tag")
            if tag == "struct":
                return self._struct(raw, path, depth, shared, ref)
            if tag == "array":
                return self._array(raw, path, depth)
            if tag is None or not isinstance(tag, str):
                return self._symbol_dict(raw, path, depth, ref)
            if tag == "backref":
                return self._follow(raw, "value", path, depth)
            if tag in ("tuple", "svec"):
                return tuple(self._items(self._field(raw, "data", Seq, path), path, depth))
            if tag == "symbol":
                return Symbol(self._field(raw, "name", str, path))
            if tag in _TYPE_TAGS:
                t = self.type_param(raw, path, depth)
                return Singleton(JuliaType("Core.Type", (t,)))
            if tag == "ref":
                parts = self._field(raw, "path", Seq, path)
                return JuliaStruct("Core.Module", {"name": Symbol(".".join(str(p) for p in parts))})
            return self._symbol_dict(raw, path, depth, ref)  # an unknown tag: BSON.jl keeps the Dict too
        if isinstance(raw, Seq):
            if ref is not None:
                return self._shared_items(ref, raw, path, depth)
            return self._items(raw, path, depth)
        if isinstance(raw, Blob):
            return self._bytes_array(raw, np.dtype(np.uint8), (raw.length,), path)
        return raw  # scalars: numpy int32 / int64 / float64, bool, str, None

    def _check_elements(self, n: int, offset: int, path: TreePath) -> None:
        if n > self.limits.max_elements:
            raise LimitError(
                f"array of {n} elements exceeds max_elements={self.limits.max_elements}",
                offset=offset,
                path=path,
            )

    def _items(self, seq: Seq, path: TreePath, depth: int) -> list[Any]:
        self._check_elements(len(seq), seq.offset, path)
        return [self.value(x, (*path, i), depth + 1) for i, x in enumerate(seq, 1)]

    def _shared_items(self, ref: int, seq: Seq, path: TreePath, depth: int) -> list[Any]:
        """The ``Vector{Any}`` of backref ``ref``, made before its elements: BSON.jl writes
        ``a = Any[]; push!(a, a)`` as a backref whose element is a backref to itself, and an element
        referring back is this very list (the cycle the JLD2 reader returns for the same value)."""
        self._check_elements(len(seq), seq.offset, path)
        out: list[Any] = []
        with _Filling(self._partial, ref, out):
            for i, x in enumerate(seq, 1):
                out.append(self.value(x, (*path, i), depth + 1))
        return out

    def _field(self, raw: Doc, key: str, kind: type | tuple[type, ...], path: TreePath = ()) -> Any:
        x = raw.get(key)
        if not isinstance(x, kind):
            tag = raw.get("tag")
            raise FormatError(
                f"BSON.jl {tag!r} document without a valid {key!r}", offset=raw.offset, path=path
            )
        return x

    def _symbol_dict(self, raw: Doc, path: TreePath, depth: int, ref: int | None = None) -> JuliaDict:
        """A ``Dict{Symbol,Any}`` (BSON.jl stores it as a plain document). Reached through backref
        ``ref`` it is made before its values, so a value referring back (the Dict holding itself)
        is this very object."""
        out = JuliaDict()
        out.julia_type = JuliaType("Base.Dict", (JuliaType("Core.Symbol"), JuliaType("Core.Any")))
        with _Filling(self._partial, ref, out):
            for k, v in raw.items():
                if k != "_backrefs":
                    out[Symbol(k)] = self.value(v, (*path, k), depth + 1)
        return out

    # --- types -----------------------------------------------------------------------------
    def type_param(self, raw: Any, path: TreePath, depth: int) -> Any:
        """A type, or a value standing as a type parameter (``2``, ``(:a, :b)``, a TypeVar).
        ``depth`` counts the levels above: the value's, then the type's own."""
        if depth > self.max_depth:
            self._deeper(depth, raw, path)
        if type(raw) is Lazy:  # one object per distinct type document: its type read once
            hit = self._type_of_doc.get(id(raw))
            if hit is not None and hit[0] is raw:
                return hit[1]
            doc = raw.tree if raw.tree is not None else self.parser.materialize(raw, path)
            t = self.type_param(doc, path, depth)
            self._type_of_doc[id(raw)] = (raw, t)
            return t
        if not isinstance(raw, Doc):
            if isinstance(raw, np.int32):
                return np.int64(raw)  # a 32-bit Julia wrote Int parameters as Int32
            return self.value(raw, path, depth)
        tag = raw.get("tag")
        if tag in _TYPE_TAGS:
            return self._type_doc(raw, tag, path, depth)
        if tag == "backref":
            return self._follow(raw, "type", path, depth)
        if tag == "struct":
            t = self.deref(raw.get("type"), path)
            if isinstance(t, Doc) and t.get("tag") == "datatype" and self._raw_name(t, path) == "Core.Union":
                members = [self.type_param(x, path, depth + 1) for x in self._field(raw, "data", Seq, path)]
                flat: list[Any] = []
                for m in members:
                    is_union = isinstance(m, JuliaType) and m.name == "Core.Union"
                    flat.extend(m.params if is_union else (m,))
                return JuliaType("Core.Union", tuple(flat))
        return self.value(raw, path, depth)

    def _type_doc(self, raw: Doc, tag: str, path: TreePath, depth: int) -> Any:
        """The type a ``datatype`` / ``jl_anonymous`` / ``unionall`` / ``jl_bottom_type``
        document stands for."""
        if tag == "datatype":
            name = type_name(self._field(raw, "name", Seq, path), raw.offset, path)
            params = tuple(self._params(raw.get("params"), raw, path, depth))
            if name in _TRACKED_ARRAYS and len(params) == 3:
                return params[2]  # TrackedArray{T,N,A} reads as A
            if name in _TRACKED_REALS and len(params) == 1:
                return params[0]
            return JuliaType(name, params)
        if tag == "jl_anonymous":
            info = self._closure_info(raw, path)
            params = tuple(self._params(raw.get("params"), raw, path, depth))
            return JuliaType(f"{info['module'] or 'Main'}.{info['type_name']}", params)
        if tag == "unionall":
            var = self.value(raw.get("var"), path, depth + 1)
            body = self.type_param(raw.get("body"), path, depth + 1)
            return where_type(JuliaStruct("Core.UnionAll", {"var": var, "body": body}))
        return BOTTOM  # jl_bottom_type

    def _params(self, raw: Any, owner: Doc, path: TreePath, depth: int) -> list[Any]:
        """A datatype's parameters: a BSON array, or (all of them Ints) a BSON.jl ``array``."""
        if isinstance(raw, Doc) and raw.get("tag") in ("svec", "tuple") and isinstance(raw.get("data"), Seq):
            raw = raw["data"]  # BSON.jl of early 2018 stored the parameters' SimpleVector itself
        if isinstance(raw, Seq):
            return [self.type_param(p, path, depth + 1) for p in raw]
        if isinstance(raw, Doc) and raw.get("tag") in ("array", "backref"):
            arr = self.value(raw, path, depth + 1)
            if isinstance(arr, np.ndarray) and arr.ndim == 1:
                return [np.int64(x) if arr.dtype == np.int32 else x for x in arr]
            if isinstance(arr, list):
                return arr
        raise FormatError("BSON.jl datatype parameters are not a list", offset=owner.offset, path=path)

    def _raw_name(self, raw: Doc, path: TreePath) -> str:
        hit = self._names.get(id(raw))
        if hit is not None and hit[0] is raw:
            return hit[1]
        parts = raw.get("name")
        name = type_name(parts if isinstance(parts, Seq) else [], raw.offset, path)
        self._names[id(raw)] = (raw, name)
        return name

    def _numpy_dtype(self, t: JuliaType) -> np.dtype | None:
        hit = self._dtypes.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        dtype = numpy_dtype(t)
        self._dtypes[id(t)] = (t, dtype)
        return dtype

    def _closure_info(self, raw: Doc, path: TreePath) -> dict[str, Any]:
        """What names a closure, read from the raw ``Core.TypeName`` (never raised: it holds the
        method's compiled code, and refers back to the closure's own type)."""
        info: dict[str, Any] = {
            "type_name": None, "name": None, "module": None, "file": None, "line": None, "names": (),
            "code": None,
        }  # fmt: skip
        tn = self.deref(raw.get("typename"), path)
        data = tn.get("data") if isinstance(tn, Doc) else None
        if not isinstance(data, Seq) or len(data) < 3:
            raise FormatError("BSON.jl jl_anonymous without a TypeName", offset=raw.offset, path=path)
        info["type_name"] = _symbol_text(self.deref(data[1], path)) or "#anonymous"
        names = self.deref(data[2], path)  # (the closure type's field names: its captured variables)
        names = self.deref(names.get("data"), path) if isinstance(names, Doc) else names
        if isinstance(names, Seq):
            texts = [_symbol_text(self.deref(n, path)) for n in names]
            info["names"] = tuple(t for t in texts if t) if all(texts) else ()
        mt = self.deref(data[-1], path)  # the method table: [name, methods, max_args, kwsorter]
        methods = self.deref(mt[1], path) if isinstance(mt, Seq) and len(mt) > 1 else None
        method = self.deref(methods[0], path) if isinstance(methods, Seq) and methods else None
        fields = method.get("data") if isinstance(method, Doc) else None
        if isinstance(fields, Seq) and len(fields) >= 4:
            module = self.deref(fields[0], path)
            if isinstance(module, Doc) and isinstance(module.get("path"), Seq):
                info["module"] = ".".join(str(p) for p in module["path"])
            info["name"] = _symbol_text(self.deref(fields[1], path))
            info["file"] = _symbol_text(self.deref(fields[2], path))
            line = fields[3]
            if isinstance(line, (int, np.integer)) and not isinstance(line, (bool, np.bool_)):
                info["line"] = int(line)
            info["code"] = lowered_text(fields, lambda x: self.deref(x, path))
        return info

    # --- structs ---------------------------------------------------------------------------
    def _struct(self, raw: Doc, path: TreePath, depth: int, shared: bool, ref: int | None = None) -> Any:
        data = raw.get("data")
        stored_type = raw.get("type")
        plain = self._plain_structs.get(id(stored_type))
        if (
            plain is not None
            and plain[0] is stored_type
            and type(data) is Seq
            and len(data) <= len(_POSITIONS)
        ):
            # a struct of an ordinary type (a layer) whose type document was read before (the
            # parser hands out one document for equal bytes): positional fields, no special case
            t = plain[1]
            if not data and not shared:
                return Singleton(t)
            positions = _POSITIONS[: len(data)]
            if ref is not None:
                return self._shared_struct(ref, t, positions, data, path, depth)
            values = [self.value(x, (*path, k), depth + 1) for k, x in zip(positions, data)]
            return JuliaStruct(t, zip(positions, values), mutable=shared)
        rtype = self.deref(stored_type, path)
        is_datatype = isinstance(rtype, Doc) and rtype.get("tag") == "datatype"
        if is_datatype and self._raw_name(rtype, path) == "Core.Union":
            # Union{A, B} is a type: BSON.jl stores it as a struct of its members, and as a value
            # it is Type{Union{A, B}}, as a datatype is (one flat Union, as type parameters read)
            return Singleton(JuliaType("Core.Type", (self.type_param(raw, path, depth),)))
        if isinstance(rtype, Doc) and rtype.get("tag") == "jl_anonymous":
            t = self.type_param(raw.get("type"), path, depth + 1)
            info = self._closure_info(rtype, path)
            captures = tuple(self._items(data, path, depth)) if isinstance(data, Seq) else ()
            where = f" defined at {info['file']}:{info['line']}" if info["file"] else ""
            names = info["names"] if len(info["names"]) == len(captures) else ()
            held = ""
            if captures:  # (data the closure holds: trained layers, sizes; shown, never dropped)
                shown = [_capture_text(n, v) for n, v in zip(names or map(str, range(1, 99)), captures)]
                held = f"; captures {', '.join(shown[:4])}{', …' if len(shown) > 4 else ''}"
            code = f": {info['code']}" if info["code"] and not captures else ""
            self.notes[path] = f"closure {info['name'] or t.basename}{where}{code} (never run{held})"
            return Closure(
                t,
                name=info["name"],
                module=info["module"],
                file=info["file"],
                line=info["line"],
                captures=captures,
                capture_names=names,
                code=info["code"] if not captures else None,
            )
        known = self._struct_types.get(id(rtype))
        if known is not None and known[0] is rtype:
            _, raw_name, t = known
        else:
            is_datatype = isinstance(rtype, Doc) and rtype.get("tag") == "datatype"
            raw_name = self._raw_name(rtype, path) if is_datatype else ""
            t = self.type_param(raw.get("type"), path, depth + 1)
            if not isinstance(t, JuliaType):
                raise FormatError("BSON.jl struct whose type is not a type", offset=raw.offset, path=path)
            if isinstance(rtype, Doc):  # a document kept alive by the caches: its id stays unique
                self._struct_types[id(rtype)] = (rtype, raw_name, t)
                if raw_name not in _SPECIAL_STRUCTS and t.name not in _SPECIAL_STRUCTS:
                    self._plain_structs[id(stored_type)] = (stored_type, t)
        if isinstance(data, Blob):
            return self._primitive(t, data, path)
        if not isinstance(data, Seq):
            raise FormatError("BSON.jl struct without its data", offset=raw.offset, path=path)
        if raw_name in _TRACKED_ARRAYS or raw_name in _TRACKED_REALS:
            at = _tracked_data_index(raw_name, len(data))
            if len(data) > at:
                self.notes[path] = f"{raw_name}: read as its data (the stored gradient is dropped)"
                return self.value(data[at], path, depth + 1)
        if t.name in _DICT_TYPES and len(data) == 2:
            return self._dict(t, data, path, depth, ref)
        if t.name == "BSON.Undef" and not data:
            return UNDEF
        names = _field_names(t, len(data))
        if ref is not None and t.name not in _VALUE_STRUCTS:
            return self._shared_struct(ref, t, names, data, path, depth)
        values = [self.value(x, (*path, k), depth + 1) for k, x in zip(names, data)]
        if t.name == "Core.NamedTuple" and t.params and isinstance(t.params[0], tuple):
            if len(t.params[0]) == len(values) and len(set(names)) == len(names):
                return NamedTuple(zip(names, values))
        if t.name == "Base.Complex" and len(values) == 2:  # a number, as JLD2 reads it
            dtype = self._numpy_dtype(t)
            if dtype is not None and all(isinstance(x, np.floating) for x in values):
                return dtype.type(complex(float(values[0]), float(values[1])))
        if t.name == "Base.Missing" and not values:
            return MISSING
        if t.name == "Core.Nothing" and not values:
            return None
        if not values and not shared:
            return Singleton(t)
        return JuliaStruct(t, zip(names, values), mutable=shared)

    def _shared_struct(
        self, ref: int, t: JuliaType, names: Any, data: Seq, path: TreePath, depth: int
    ) -> JuliaStruct:
        """The struct of backref ``ref``, made before its fields: a field referring back to it
        (a mutable struct containing itself) is this very object."""
        out = JuliaStruct(t, mutable=True)
        with _Filling(self._partial, ref, out):
            for k, x in zip(names, data):
                out.fields[k] = self.value(x, (*path, k), depth + 1)
        return out

    def _primitive(self, t: JuliaType, data: Blob, path: TreePath) -> Any:
        dtype = self._numpy_dtype(t)
        if dtype is not None and dtype.itemsize == data.length:
            return np.frombuffer(self.buf, dtype, 1, data.offset)[0]
        if data.length > self.limits.max_string_bytes:
            raise LimitError("primitive value larger than max_string_bytes", offset=data.offset, path=path)
        return _bits_value(t, bytes(self.buf[data.offset : data.offset + data.length]))

    def _dict(
        self, t: JuliaType, data: Seq, path: TreePath, depth: int, ref: int | None = None
    ) -> JuliaDict | JuliaStruct:
        """A ``Dict`` / ``IdDict`` (fields: its keys, its values). Reached through backref ``ref``
        it is made before them, so a key or value referring back (the Dict holding itself, as
        BSON.jl's load builds it: the Dict first, then its pairs) is this very object."""
        out = JuliaDict()
        out.julia_type = t
        with _Filling(self._partial, ref, out):
            keys = _elements(self.value(data[0], (*path, "keys"), depth + 1))
            vals = _elements(self.value(data[1], (*path, "vals"), depth + 1))
        if keys is None or vals is None or len(keys) != len(vals):
            raise FormatError(
                "BSON.jl Dict whose keys and values do not pair up", offset=data.offset, path=path
            )
        try:
            for k, v in zip(keys, vals):
                out[k] = v  # type: ignore[index]
        except TypeError:  # a key Python cannot hash (an array, a struct): the pairs as stored
            out.clear()
        if len(out) != len(keys):  # or two keys distinct in Julia, equal in Python
            if ref is not None and ref in self._closed:
                raise UnsupportedError(
                    "a Dict holding itself whose keys Python cannot hold as dict keys",
                    offset=data.offset,
                    path=path,
                )
            return JuliaStruct(t, {"keys": list(keys), "vals": list(vals)})
        return out

    # --- arrays ----------------------------------------------------------------------------
    def _array(self, raw: Doc, path: TreePath, depth: int) -> Any:
        data = raw.get("data")
        if type(data) is Blob:  # the common case: a layer's weights as raw bytes
            rtype, size = raw.get("type"), raw.get("size")
            plan = self._array_plans.get((id(rtype), id(size)))
            if plan is not None and plan[0] is rtype and plan[1] is size and plan[2] == data.length:
                return self._view(data.offset, *plan[3:])
        eltype = self.type_param(raw.get("type"), path, depth + 1)
        if not isinstance(eltype, JuliaType):
            raise FormatError("BSON.jl array whose element type is not a type", offset=raw.offset, path=path)
        shape = self._shape(raw, path)
        count = 1
        for d in shape:
            count *= d
        if isinstance(data, Seq):
            if len(data) != count:
                raise FormatError(
                    f"BSON.jl array of size {shape} holds {len(data)} elements", offset=data.offset, path=path
                )
            items = self._items(data, path, depth)
            return self._object_array(eltype, items, shape)
        if not isinstance(data, Blob):
            raise FormatError("BSON.jl array without its data", offset=raw.offset, path=path)
        dtype = self._numpy_dtype(eltype)
        if dtype is not None:
            arr = self._bytes_array(data, dtype, shape, path)
            rtype, size = raw.get("type"), raw.get("size")
            if type(rtype) in (Lazy, Doc) and type(size) is Seq:  # objects the parser shares
                self._array_plans[(id(rtype), id(size))] = (rtype, size, data.length, dtype, count, shape)
            return arr
        if data.length == 0 and count > 0:  # zero-size elements (nothing, a singleton type)
            if count > self.max_virtual:
                raise LimitError(
                    f"array of {count} zero-size elements exceeds max_virtual_elements",
                    offset=raw.offset,
                    path=path,
                )
            one = (
                None if eltype.name == "Core.Nothing" else MISSING if eltype.name == "Base.Missing" else None
            )
            element = one if eltype.name in ("Core.Nothing", "Base.Missing") else Singleton(eltype)
            return self._object_array(eltype, [element] * count, shape)
        if count == 0 or data.length % count:
            if count == 0 and data.length == 0:
                return self._object_array(eltype, [], shape)
            raise FormatError(
                f"BSON.jl array of {count} elements with {data.length} bytes", offset=data.offset, path=path
            )
        if count > self.limits.max_elements:
            raise LimitError(
                f"array of {count} elements exceeds max_elements={self.limits.max_elements}",
                offset=data.offset,
                path=path,
            )
        size = data.length // count
        start = data.offset
        layout = bits_struct_dtype(eltype)
        if layout is not None and layout.itemsize == size:  # Complex{Int64}, a Tuple of numbers...
            records = np.frombuffer(self.buf, layout, count, start)
            return self._object_array(eltype, [bits_struct_value(eltype, r) for r in records], shape)
        items = [
            _bits_value(eltype, bytes(self.buf[start + i * size : start + (i + 1) * size]))
            for i in range(count)
        ]
        return self._object_array(eltype, items, shape)

    def _shape(self, raw: Doc, path: TreePath) -> tuple[int, ...]:
        size = raw.get("size")
        known = self._shapes.get(id(size))
        if known is not None and known[0] is size:  # one parsed list for identical bytes
            return known[1]
        shape = self._read_shape(raw, path)
        if type(size) is Seq:
            self._shapes[id(size)] = (size, shape)
        return shape

    def _read_shape(self, raw: Doc, path: TreePath) -> tuple[int, ...]:
        size = self.deref(raw.get("size"), path)
        dims: Any
        if isinstance(size, Seq):
            dims = size
        elif isinstance(size, Doc) and size.get("tag") == "array":
            arr = self.value(size, path)
            dims = list(arr) if isinstance(arr, np.ndarray) else None
        else:
            dims = None
        if dims is None:
            raise FormatError("BSON.jl array size is not a list of integers", offset=raw.offset, path=path)
        if len(dims) > 64:
            raise LimitError(f"array of {len(dims)} dimensions", offset=raw.offset, path=path)
        out = []
        for d in dims:
            if type(d) not in _INTEGERS:
                raise FormatError(
                    "BSON.jl array size is not a list of integers", offset=raw.offset, path=path
                )
            if d < 0:
                raise FormatError(
                    f"BSON.jl array size {tuple(dims)} has a negative dimension", offset=raw.offset, path=path
                )
            out.append(int(d))
        return tuple(out)

    def _bytes_array(self, data: Blob, dtype: np.dtype, shape: tuple[int, ...], path: TreePath) -> np.ndarray:
        count = 1
        for d in shape:
            count *= d
            if count * dtype.itemsize > data.length:
                break
        nbytes = count * dtype.itemsize
        if nbytes != data.length:
            raise FormatError(
                f"BSON.jl array of size {shape} ({dtype}) needs {nbytes} bytes, the file holds {data.length}",
                offset=data.offset,
                path=path,
            )
        if nbytes > self.limits.max_array_bytes:
            raise LimitError(
                f"array of {nbytes} bytes exceeds max_array_bytes", offset=data.offset, path=path
            )
        return self._view(data.offset, dtype, count, shape)

    def _view(self, offset: int, dtype: np.dtype, count: int, shape: tuple[int, ...]) -> np.ndarray:
        """The array of ``count`` elements at ``offset`` (its size checked against the file)."""
        arr = np.frombuffer(self.buf, dtype, count, offset).reshape(shape, order="F")
        if self.order == "storage":
            arr = arr.T
        return arr if self.mmap else arr.copy(order="K")  # "K": an array of its own, same layout

    def _object_array(self, eltype: JuliaType, items: list[Any], shape: tuple[int, ...]) -> JuliaArray:
        flat = np.empty(len(items), dtype=object)
        flat[:] = items
        data = flat.reshape(shape, order="F")
        return JuliaArray(eltype, data.T if self.order == "storage" else data)


class _Filling:
    """``with _Filling(partial, ref, container)``: while ``container`` (the mutable value of backref
    ``ref``, made before its elements) is filled, ``partial[ref]`` is it, so an element referring
    back to ``ref`` is this very object (the cycle closes on it). ``ref`` ``None`` (a value not
    reached through a backref): nothing to close."""

    __slots__ = ("container", "partial", "ref")

    def __init__(self, partial: dict[int, Any], ref: int | None, container: Any) -> None:
        self.partial, self.ref, self.container = partial, ref, container

    def __enter__(self) -> None:
        if self.ref is not None:
            self.partial[self.ref] = self.container

    def __exit__(self, *exc: object) -> None:
        if self.ref is not None:
            del self.partial[self.ref]


def _bits_value(t: JuliaType, raw: bytes) -> Any:
    """A value of primitive type ``t`` numpy has no dtype for: an ``Int128`` / ``UInt128`` as the
    number, any other as its bits (:class:`JuliaBits`)."""
    wide = _WIDE_INTS.get(t.name) if len(raw) == 16 and not t.params else None
    if wide is not None:
        return wide(int.from_bytes(raw, "little", signed=wide is Int128))
    return JuliaBits(t, raw)


def _field_names(t: JuliaType, n: int) -> list[str]:
    """Names for the ``n`` fields of a struct of type ``t``: a NamedTuple's from its type, the
    known ones of a few Core/Base types, else positions (``"1"``, ``"2"``...)."""
    if t.name == "Core.NamedTuple" and t.params and isinstance(t.params[0], tuple) and len(t.params[0]) == n:
        return [str(x) for x in t.params[0]]
    known = _KNOWN_FIELDS.get(t.name)
    if known is not None and len(known) == n:
        return list(known)
    return list(_POSITIONS[:n]) if n <= len(_POSITIONS) else [str(i) for i in range(1, n + 1)]


_POSITIONS = tuple(str(i) for i in range(1, 65))


def _capture_text(name: str, value: Any) -> str:
    """``name`` and what a closure's captured value is, in a few words (``downsample: Flux.Chain``)."""
    if isinstance(value, np.ndarray):
        return f"{name}: {value.dtype} {'×'.join(map(str, value.shape)) or 'scalar'}"
    kind = value.type.name if isinstance(value, (JuliaStruct, Singleton)) else type(value).__name__
    return f"{name}: {kind}"


def _symbol_text(raw: Any) -> str | None:
    if isinstance(raw, Doc) and raw.get("tag") == "symbol" and isinstance(raw.get("name"), str):
        return str(raw["name"])
    return raw if isinstance(raw, str) else None


def _elements(value: Any) -> list[Any] | None:
    """The elements of a Dict's keys or values vector, whatever form the file gave it."""
    if isinstance(value, list):
        return value
    if isinstance(value, JuliaArray):
        return value.tolist()
    if isinstance(value, np.ndarray) and value.ndim == 1:
        return list(value)
    return None
