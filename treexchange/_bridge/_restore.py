"""Restore Julia state into a template PyTree, listing every mismatch by path.

The walk runs twice over the (small) tree: first to collect *all* mismatches without touching
array data, then, only if the tree fits, to build the result. Array data are read at the leaves
(zero-copy mmap views) and placed by :class:`~treexchange._bridge._place.Placer`.

Matching rules (docs/jax.md has the long version):

* named containers (``dict``, :class:`NamedTuple`, namedtuple, dataclass, Equinox module, any
  pytree node with named children) match a file ``NamedTuple`` / ``Dict`` / struct by field name;
* ``tuple`` / ``list`` match a file ``Tuple`` / ``Vector`` position by position (lengths must agree:
  a stateless Flux layer ``()`` still occupies a position);
* entries that carry no state -- static dataclass fields, functions, RNG objects, ``None``, ``()`` --
  are taken from the template and may be absent from the file; a file entry that holds only
  ``()`` / function singletons / empty NamedTuples carries no state either and is never "extra";
* arrays must agree in shape, and in dtype unless ``cast``; a conversion (``cast``, or 64-bit data
  going into JAX without x64) must keep every value (checked on the values, ``_exact``) unless the
  caller asked for rounding or an unsafe cast;
* template leaves absent from the file are kept only where ``allow_missing`` allows, and the
  checking pass records what was restored, kept, ignored and converted (``_report.ReportLog``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np

from .._errors import Mismatch, PathSegment, TreePath
from .._values import JuliaArray, JuliaStruct, Missing, NamedTuple, Singleton, Symbol, Undef
from ._classify import (
    describe_file_value,
    is_array_template,
    is_dataclass_instance,
    is_namedtuple_instance,
    is_non_state,
    is_value_model_leaf,
)
from ._exact import cast_mode as _cast_mode, conversion_loss, convert, scalar_loss
from ._place import KeyPath, Placer
from ._report import MissingRule, MissingSpec, ReportLog, fixes_for_conversion, restore_error


class _Absent:
    """Stands for "not in the file" while walking a template subtree (``allow_missing``)."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()


class LeafRef:
    """A stand-in for one array leaf of a model, used to restore through a *layout* function.

    A layout (e.g. :func:`treexchange.flux_state`) maps a model to its Julia state shape by moving
    leaves around. Run on a model whose arrays are LeafRefs, it tells which file entry feeds which
    model leaf. It looks enough like an array (``shape``, ``dtype``, ``ndim``) for layouts to read.

    A layout whose Julia array is an exact permutation of the model's (a Conv kernel,
    docs/porting.md §Kernel flips) returns ``ref.through(julia_shape, transform)``: the file is
    checked against the Julia shape and ``transform`` (Julia array -> model array, element moves
    only) runs when placing. A model leaf with no Julia counterpart gets ``ref.fixed = value``
    (placed instead of restored).
    A model leaf that is the sum of several file arrays (Lux 1's ``bias_ih + bias_hh`` for Flux's one
    recurrent bias) appears once per array as ``ref.addend(k, n)``: it is placed when all ``n`` arrays
    have been read, as their sum (the one arithmetic a restore does, where a convention demands it).
    """

    __slots__ = ("dtype", "fixed", "index", "keypath", "parts", "shape", "template", "transform")

    def __init__(self, index: int, template: Any, keypath: KeyPath) -> None:
        self.index = index
        self.template = template
        self.keypath = keypath
        self.shape = tuple(template.shape)
        self.dtype = np.dtype(template.dtype)
        self.transform: Callable[[np.ndarray], np.ndarray] | None = None
        self.fixed: Any = None
        self.parts: tuple[int, int] | None = None  # (k, n): the k-th of n file arrays summed into it

    def through(self, shape: tuple[int, ...], transform: Callable[[np.ndarray], np.ndarray]) -> LeafRef:
        """This leaf seen through an element permutation: file shape ``shape``, placed via ``transform``."""
        ref = LeafRef(self.index, self.template, self.keypath)
        ref.shape = tuple(shape)
        ref.transform = transform
        ref.parts = self.parts
        return ref

    def addend(self, k: int, n: int) -> LeafRef:
        """The ``k``-th (from 0) of ``n`` file arrays whose sum is this leaf."""
        ref = LeafRef(self.index, self.template, self.keypath)
        ref.shape, ref.transform, ref.parts = self.shape, self.transform, (k, n)
        return ref

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __repr__(self) -> str:
        return f"LeafRef({self.index}, {self.dtype.name}{list(self.shape)})"


class NoArrays:
    """Template entry for Julia state that holds no arrays and whose form varies across versions.

    A layout puts it where the Julia side has only hyper-parameters, which ``Flux.loadmodel!``
    never loads (a pool is ``()`` in Flux ≤ 0.14 and ``(k, pad, stride)`` from 0.15; a
    ``ConvTranspose`` gained ``outpad`` in 0.14.17): any file value without arrays fits, and it
    may be absent. A file array there is a mismatch.
    """

    def __call__(self) -> None:  # callable: a "no state" entry for carries_no_state
        return None

    def __repr__(self) -> str:
        return "NoArrays()"


NO_ARRAYS = NoArrays()


class Discarded(NoArrays):
    """Template entry for Julia state a restore ignores on purpose, arrays included.

    A Flux ≤ 0.14 ``Recur``'s ``state0``/``state`` (docs/porting.md §Recurrent layers): the Python
    cells start from zeros, as Flux ≥ 0.15 does, so any file value fits and it may be absent.
    """

    def __repr__(self) -> str:
        return "Discarded()"


DISCARDED = Discarded()


def holds_arrays(v: Any) -> bool:
    """Whether a file value contains an array anywhere."""
    if isinstance(v, np.ndarray):
        return v.dtype != object or any(holds_arrays(x) for x in v.flat)
    if isinstance(v, (JuliaArray, list)):
        return True
    if isinstance(v, NamedTuple):
        return any(holds_arrays(x) for x in v.values())
    if isinstance(v, JuliaStruct):
        return any(holds_arrays(x) for x in v.fields.values())
    if isinstance(v, tuple):
        return any(holds_arrays(x) for x in v)
    if isinstance(v, dict):
        return any(holds_arrays(x) for x in v.values())
    return False


class Options:
    """The matching options of one restore, and its ``log`` (what it did, for the report).

    ``strict=False`` relaxes field order, extra file entries and dtypes (``cast=True`` unless
    ``cast`` says otherwise), never missing entries: those need ``allow_missing`` (a silent
    partial restore is the bug this library exists to prevent)."""

    __slots__ = ("allow_extra", "allow_missing", "cast", "cast_mode", "check_order", "log", "missing")

    def __init__(
        self,
        *,
        strict: bool,
        allow_missing: MissingSpec,
        allow_extra: bool,
        cast: bool | str,
        root: TreePath = (),
    ) -> None:
        self.missing = MissingRule(allow_missing, root)
        self.allow_missing = self.missing.any
        self.allow_extra = allow_extra or not strict
        mode = _cast_mode(cast)
        self.cast_mode = "exact" if mode == "none" and not strict else mode
        self.cast = self.cast_mode != "none"
        self.check_order = strict
        self.log = ReportLog()


class Walker:
    """One pass over (file value, template).

    The checking pass (``build=False``) collects mismatches and, for every array leaf, a *job*
    (a no-argument callable that materialises it) in visit order. The jobs run only when nothing
    is wrong; the building pass (``build=True``) walks in the same order, takes their results one
    by one, and assembles the template's node types.
    """

    def __init__(
        self,
        options: Options,
        placer: Placer,
        *,
        build: bool,
        results: Any = None,
        log: ReportLog | None = None,
    ) -> None:
        self.o = options
        self.placer = placer
        self.build = build
        self.log = log if log is not None else options.log
        self.hints: set[str] = set()  # which fixes the error message should name
        self.mismatches: list[Mismatch] = []
        self.jobs: list[Callable[[], Any]] = []
        self.job_bytes: list[int] = []  # bytes each job copies (0: a view, a kept value, a scalar)
        self._results = results  # iterator over the jobs' results (building pass)
        self.refs: dict[int, Any] = {}  # LeafRef.index -> restored leaf
        self.addends: dict[int, dict[int, tuple[np.ndarray, Any]]] = {}  # index -> k -> (array, cast)

    def leaf(self, job: Callable[[], Any], copies: int = 0) -> Any:
        if self.build:
            return next(self._results)
        self.jobs.append(job)
        self.job_bytes.append(copies)
        return None

    def report(self, kind: str, path: TreePath, detail: str) -> None:
        self.mismatches.append(Mismatch(kind, path, detail))

    def kind_mismatch(self, v: Any, t: Any, path: TreePath) -> None:
        self.report("kind", path, f"{describe_file_value(v)} in file, {describe_template(t)} in template")

    def restored(self, path: TreePath, *, array: bool = False) -> None:
        if not self.build:
            self.log.restore(path, array=array)

    def may_keep(self, t: Any, path: TreePath, *, array: bool = False) -> bool:
        """A template leaf absent from the file: allowed by ``allow_missing`` (recorded as kept)?"""
        if not self.o.missing.permits(path):
            self.report(
                "missing", path, f"from file, template has {describe_template(t)} (not in allow_missing)"
            )
            return False
        if not self.build:
            self.log.keep(path, array=array)
        return True

    def conversion_fits(
        self, v: np.ndarray, want: np.dtype, dest: np.dtype, path: TreePath, *, kept: bool = False
    ) -> bool:
        """File array ``v`` (the template's own with ``kept``) must become ``dest`` (the dtype the
        result will hold; it differs from the template's ``want`` only for JAX without x64).
        Checks the values; reports if any change."""
        x64 = dest != want
        held = f" (jax without x64 holds {want.name} as {dest.name})" if x64 else ""
        if self.o.cast_mode == "none":  # dtypes agree; the destination cannot hold them
            where = "kept from the template" if kept else "in file and template"
            self.report("dtype", path, f"{v.dtype.name} {where}{held}")
            self.hints |= fixes_for_conversion(dest, "none", x64=x64)
            return False
        if not _castable(v.dtype, dest):
            self.report("dtype", path, f"{v.dtype.name} in file, {want.name} in template")
            return False
        if not self.build:  # the building pass trusts the checking pass (values read once)
            loss = conversion_loss(v, dest, self.o.cast_mode)
            if loss is not None:
                self.report("value", path, f"{v.dtype.name} in file -> {dest.name}{held}: {loss}")
                self.hints |= fixes_for_conversion(dest, self.o.cast_mode, x64=x64)
                return False
            self.log.converted.append((path, v.dtype.name, dest.name))
        return True

    # --- dispatch ---------------------------------------------------------------------------------
    def node(self, v: Any, t: Any, path: TreePath, jpath: KeyPath) -> Any:
        if isinstance(t, LeafRef):
            summed = t.parts is not None
            out = self.array(
                v,
                t.template,
                path,
                t.keypath,
                shape=t.shape,
                dtype=t.dtype,
                transform=t.transform,
                unplaced=summed,
            )
            if self.build and t.parts is not None:
                self.add_part(t, out)
            elif self.build:
                self.refs[t.index] = out
            return out
        if is_array_template(t):
            return self.array(v, t, path, jpath, shape=tuple(t.shape), dtype=np.dtype(t.dtype))
        if isinstance(t, NoArrays):
            if not isinstance(t, Discarded) and v is not ABSENT and holds_arrays(v):
                self.kind_mismatch(v, t, path)
            return t
        if isinstance(t, (bool, int, float, complex, np.generic)) and not isinstance(t, Singleton):
            return self.scalar(v, t, path)
        if isinstance(t, str):
            return self.string(v, t, path)
        if t is None or (isinstance(t, tuple) and t == ()):
            return self.empty(v, t, path)
        if isinstance(t, (NamedTuple, Mapping, JuliaStruct)) or is_namedtuple_instance(t):
            return self.named(v, t, path, jpath)
        if isinstance(t, (tuple, list)):
            return self.positional(v, t, path, jpath)
        if is_dataclass_instance(t):
            return self.named(v, t, path, jpath)
        if is_non_state(t) or isinstance(t, (Singleton, Missing)):
            return self.stateless(v, t, path)
        if isinstance(t, JuliaArray):
            return self.opaque(v, t, path, JuliaArray)
        custom = _custom_children(t)
        if custom is not None:
            return (
                self.named(v, t, path, jpath) if custom[0] == "named" else self.positional(v, t, path, jpath)
            )
        if is_value_model_leaf(t):
            return self.opaque(v, t, path, type(t))
        # An object with no Julia counterpart (to_julia wrote it as ``()`` on request): keep it.
        return self.stateless(v, t, path)

    # --- leaves -----------------------------------------------------------------------------------
    def add_part(self, ref: LeafRef, part: tuple[np.ndarray, Any]) -> None:
        """One addend of a summed leaf read; the last one places the sum."""
        k, n = ref.parts or (0, 1)
        parts = self.addends.setdefault(ref.index, {})
        parts[k] = part
        if len(parts) == n:
            total = parts[0][0].copy()
            for i in range(1, n):
                total += parts[i][0]
            self.refs[ref.index] = self.placer.place(total, parts[0][1], ref.keypath, ref.template)

    def array(
        self,
        v: Any,
        t: Any,
        path: TreePath,
        jpath: KeyPath,
        *,
        shape: tuple[int, ...],
        dtype: np.dtype,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
        unplaced: bool = False,
    ) -> Any:
        """Check one file array against its template leaf; its job places it (``unplaced``: returns
        ``(model-layout numpy array, dtype to cast to)`` for a summed leaf, placed by :meth:`add_part`)."""
        if v is ABSENT and unplaced:  # one addend of a sum cannot be kept from the template
            self.report("missing", path, "from file (a part of a summed leaf)")
            return None
        if v is ABSENT:
            if not _is_concrete(t):
                self.report("missing", path, "from file, and the template is abstract (no value to keep)")
                return None
            if not self.may_keep(t, path, array=True):
                return None
            dest = self.placer.holds(dtype, to_numpy=self.placer.to_numpy(t, jpath))
            keep_as: np.dtype | None = None
            if dest != dtype:  # a numpy template leaf sent to jax by sharding=, without x64
                if not self.conversion_fits(np.asarray(t), dtype, dest, path, kept=True):
                    return None
                keep_as = dest
            return self.leaf(partial(self.placer.keep, t, jpath, keep_as))
        if isinstance(v, np.generic) and v.dtype.kind in "biufc" and shape == ():
            v = np.asarray(v)  # a Julia scalar fits a 0-d array template
        if not isinstance(v, np.ndarray) or v.dtype == object:
            self.kind_mismatch(v, t, path)
            return None
        ok = True
        if tuple(v.shape) != shape:
            self.report("shape", path, f"{_shape(v.shape)} in file, {_shape(shape)} in template")
            ok = False
        cast_to: np.dtype | None = None
        to_numpy = self.placer.to_numpy(t, jpath)
        dest = self.placer.holds(dtype, to_numpy=to_numpy)  # what it will hold
        if v.dtype != dtype and not self.o.cast:
            self.report("dtype", path, f"{v.dtype.name} in file, {dtype.name} in template")
            if _castable(v.dtype, dtype):
                self.hints.add("cast")
            ok = False
        elif v.dtype != dest and ok:
            ok = self.conversion_fits(v, dtype, dest, path)
            cast_to = dest
        if ok:
            self.restored(path, array=True)
        if not ok:
            return None
        if unplaced:
            return self.leaf(partial(_unplaced, transform, v, cast_to))
        copies = 0 if to_numpy else v.nbytes  # (numpy: zero-copy views)
        if transform is not None:
            return self.leaf(partial(_place_permuted, self.placer, transform, v, cast_to, jpath, t), copies)
        return self.leaf(partial(self.placer.place, v, cast_to, jpath, t), copies)

    def scalar(self, v: Any, t: Any, path: TreePath) -> Any:
        if v is ABSENT:
            return t if self.may_keep(t, path) else None
        if isinstance(v, np.ndarray) and v.shape == () and v.dtype.kind in "biufc":
            v = v[()]
        if not isinstance(v, (bool, int, float, complex, np.bool_, np.number)):
            self.kind_mismatch(v, t, path)
            return None
        if isinstance(t, np.generic):
            file_dtype = np.asarray(v).dtype if not isinstance(v, np.generic) else v.dtype
            if file_dtype == t.dtype:
                self.restored(path)
                return v
            if self.o.cast and _castable(file_dtype, t.dtype):
                loss = scalar_loss(v, t.dtype, self.o.cast_mode)
                if loss is not None:
                    self.report("value", path, f"{file_dtype.name} in file -> {t.dtype.name}: {loss}")
                    self.hints |= fixes_for_conversion(t.dtype, self.o.cast_mode, x64=False)
                    return None
                self.restored(path)
                return convert(np.asarray(v), t.dtype)[()]
            self.report("dtype", path, f"{file_dtype.name} in file, {t.dtype.name} in template")
            self.hints.add("cast")
            return None
        want, got = _category(t), _category(v)
        if want == got:
            self.restored(path)
            return type(t)(v)
        if self.o.cast and (want == "complex" or got != "complex"):
            return self.python_scalar(v, t, path)
        self.report("dtype", path, f"{_scalar_type(v)} in file, {type(t).__name__} in template")
        return None

    def python_scalar(self, v: Any, t: Any, path: TreePath) -> Any:
        """A file number converted to a template's Python ``bool``/``int``/``float``/``complex``
        (``cast``), only if its value survives (``cast="unsafe"``: as Python converts it)."""
        kind: type = bool if isinstance(t, bool) else int if isinstance(t, int) else type(t)
        if kind is int and self.o.cast_mode != "unsafe":
            fits = _category(v) in ("bool", "int") or (math.isfinite(v) and float(v).is_integer())
            loss = None if fits else f"{_number_text(v)} is not an integer"
        elif self.o.cast_mode != "unsafe":
            dst = {bool: np.bool_, float: np.float64, complex: np.complex128}.get(kind, np.float64)
            found = scalar_loss(v, np.dtype(dst), self.o.cast_mode)
            loss = None if found is None else str(found)
        else:
            loss = None
        if loss is None:
            try:
                out = kind(v)
            except (ValueError, OverflowError) as err:
                loss = str(err)
            else:
                self.restored(path)
                return out
        self.report("value", path, f"{_scalar_type(v)} in file -> {kind.__name__}: {loss}")
        dest = np.dtype(np.int64 if kind is int else np.float64)
        self.hints |= fixes_for_conversion(dest, self.o.cast_mode, x64=False)
        return None

    def string(self, v: Any, t: str, path: TreePath) -> Any:
        if v is ABSENT:
            return t if self.may_keep(t, path) else None
        if not isinstance(v, str):
            self.kind_mismatch(v, t, path)
            return None
        self.restored(path)
        return Symbol(v) if isinstance(t, Symbol) else str(v)

    def empty(self, v: Any, t: Any, path: TreePath) -> Any:
        """Template ``None`` or ``()``: the file holds nothing there (``False`` is Flux's "no bias")."""
        if v is ABSENT or v is None or carries_no_state(v) or (t is None and v is False):
            return t
        self.kind_mismatch(v, t, path)
        return None

    def stateless(self, v: Any, t: Any, path: TreePath) -> Any:
        """Template functions, RNG objects, singletons: kept from the template."""
        if v is ABSENT or v is None or isinstance(v, Missing) or carries_no_state(v):
            return t
        self.kind_mismatch(v, t, path)
        return None

    def opaque(self, v: Any, t: Any, path: TreePath, cls: type) -> Any:
        if v is ABSENT:
            return t if self.may_keep(t, path) else None
        if not isinstance(v, cls):
            self.kind_mismatch(v, t, path)
            return None
        self.restored(path)
        return v

    # --- containers -------------------------------------------------------------------------------
    def named(self, v: Any, t: Any, path: TreePath, jpath: KeyPath) -> Any:
        entries, static_names, rebuild = named_entries(t)
        if v is not ABSENT:
            if not entries and carries_no_state(v):
                return t  # Lux: NamedTuple() / () for a layer without parameters or state
            fields = file_fields(v)
            if fields is None:
                self.kind_mismatch(v, t, path)
                return None
        else:
            fields = {}
        out: dict[Any, Any] = {}
        names = {name for name, _, _ in entries}
        for name, child, jkey in entries:
            cpath = (*path, _segment(name))
            if v is ABSENT:
                out[name] = self.node(ABSENT, child, cpath, (*jpath, jkey))
            elif name in fields:
                out[name] = self.node(fields[name], child, cpath, (*jpath, jkey))
            elif carries_no_state(child) or self.o.allow_missing:
                out[name] = self.node(ABSENT, child, cpath, (*jpath, jkey))
            else:
                self.report("missing", cpath, f"from file, template has {describe_template(child)}")
        if v is ABSENT:
            return rebuild(out) if self.build else None
        for name, value in fields.items():
            if name in names or name in static_names:
                continue
            if carries_no_state(value):
                continue
            cpath = (*path, _segment(name))
            if not self.o.allow_extra:
                self.report("extra", cpath, f"{describe_file_value(value)} in file, not in template")
            elif not self.build:
                self.log.ignored.append(cpath)
        # Field order is part of a NamedTuple's (and a struct's) type; a Julia Dict has none.
        if self.o.check_order and not isinstance(v, dict):
            order = [n for n, _, _ in entries]
            if static_names:
                order = [n for n in template_field_order(t) if n in names or n in static_names]
            in_template = [n for n in order if n in fields]
            in_file = [n for n in fields if n in set(in_template)]
            if in_file != in_template:
                self.report("order", path, f"{_names(in_file)} in file, {_names(in_template)} in template")
        return rebuild(out) if self.build else None

    def positional(self, v: Any, t: Any, path: TreePath, jpath: KeyPath) -> Any:
        custom = _custom_children(t) if not isinstance(t, (tuple, list)) else None
        children: list[Any] = list(t) if custom is None else [c for _, c in custom[1]]
        if custom is None:
            jkeys = [_seq_key(i) for i in range(len(children))]
        else:
            jkeys = [k for k, _ in custom[1]]
        if v is not ABSENT:
            if not children and carries_no_state(v):
                return t
            if not isinstance(v, (tuple, list)) or isinstance(v, NamedTuple):
                self.kind_mismatch(v, t, path)
                return None
            items: list[Any] = list(v)
        else:
            items = []
        out: list[Any] = []
        for i, child in enumerate(children):
            cpath = (*path, i + 1)
            if v is ABSENT or i < len(items):
                out.append(self.node(ABSENT if v is ABSENT else items[i], child, cpath, (*jpath, jkeys[i])))
            elif self.o.allow_missing:
                out.append(self.node(ABSENT, child, cpath, (*jpath, jkeys[i])))
            else:
                self.report("missing", cpath, f"from file, template has {describe_template(child)}")
                out.append(None)
        if v is not ABSENT and len(items) > len(children):
            for i in range(len(children), len(items)):
                if not self.o.allow_extra:
                    self.report(
                        "extra", (*path, i + 1), f"{describe_file_value(items[i])} in file, not in template"
                    )
                elif not self.build and not carries_no_state(items[i]):
                    self.log.ignored.append((*path, i + 1))
        if not self.build:
            return None
        if custom is not None:
            return custom[2].unflatten(out)
        return type(t)(out)  # tuple or list (namedtuples are named containers)


def _unplaced(
    transform: Callable[[np.ndarray], np.ndarray] | None, v: np.ndarray, cast_to: Any
) -> tuple[np.ndarray, Any]:
    return np.ascontiguousarray(transform(v) if transform is not None else v), cast_to


def _place_permuted(
    placer: Placer,
    transform: Callable[[np.ndarray], np.ndarray],
    v: np.ndarray,
    cast_to: Any,
    jpath: KeyPath,
    t: Any,
) -> Any:
    # No contiguous copy here: the permuted view goes to the placer as it is, so ``numpy=True`` stays
    # zero-copy and JAX makes its one row-major copy straight from the (strided) view.
    return placer.place(transform(v), cast_to, jpath, t)


# --- template structure ----------------------------------------------------------------------------


def named_entries(t: Any) -> tuple[list[tuple[Any, Any, Any]], set[str], Callable[[dict[Any, Any]], Any]]:
    """(entries, static field names, rebuild) for a named template container.

    ``entries`` are ``(name, child template, jax key)`` for the children that carry state or may;
    static dataclass fields are taken from the template as they are.
    """
    tree_util = _jax_tree_util()
    if isinstance(t, NamedTuple):
        return (
            [(k, c, _dict_key(k)) for k, c in t.items()],
            set(),
            lambda out: NamedTuple((k, out[k]) for k in t),
        )
    if isinstance(t, JuliaStruct):
        return (
            [(k, c, _dict_key(k)) for k, c in t.fields.items()],
            set(),
            lambda out: JuliaStruct(t.type, [(k, out[k]) for k in t.fields], layout=t.layout),
        )
    if isinstance(t, Mapping):

        def rebuild_mapping(out: dict[Any, Any]) -> Any:
            if type(t) is dict:
                return {k: out[k] for k in t}
            try:
                clone = copy.copy(t)
                for k in t:
                    clone[k] = out[k]  # type: ignore[index]
                return clone
            except TypeError:  # immutable mappings (FrozenDict): rebuild from items
                return type(t)({k: out[k] for k in t})  # type: ignore[call-arg]

        return [(k, c, _dict_key(k)) for k, c in t.items()], set(), rebuild_mapping
    if is_namedtuple_instance(t):
        names = type(t)._fields
        return (
            [(n, getattr(t, n), _attr_key(n)) for n in names],
            set(),
            lambda out: type(t)(*(out[n] for n in names)),
        )
    custom = _custom_children(t)
    if custom is not None and custom[0] == "named":
        _, pairs, treedef, child_names = custom
        dynamic = [(name, child, key) for (key, child), name in zip(pairs, child_names)]
        all_fields = [f.name for f in dataclasses.fields(t)] if is_dataclass_instance(t) else []
        dynamic_names = {n for n, _, _ in dynamic}
        static = {n for n in all_fields if n not in dynamic_names}
        return dynamic, static, lambda out: treedef.unflatten([out[n] for n, _, _ in dynamic])
    if is_dataclass_instance(t):
        # A dataclass that is not a registered pytree: every field is state-or-empty, rebuilt by copy.
        field_names = [f.name for f in dataclasses.fields(t)]

        def rebuild_dataclass(out: dict[Any, Any]) -> Any:
            clone = copy.copy(t)
            for n in field_names:
                object.__setattr__(clone, n, out[n])
            return clone

        key = tree_util.GetAttrKey if tree_util is not None else _PlainKey
        return [(n, getattr(t, n, None), key(n)) for n in field_names], set(), rebuild_dataclass
    raise TypeError(f"not a named container: {type(t).__name__}")  # pragma: no cover - dispatch guards


def template_field_order(t: Any) -> list[str]:
    """All field names of a dataclass template in declaration order (static ones included)."""
    return [f.name for f in dataclasses.fields(t)] if is_dataclass_instance(t) else []


def file_fields(v: Any) -> dict[Any, Any] | None:
    """The named fields of a file value, in file order, or None if it has no names."""
    if isinstance(v, NamedTuple):
        return dict(v.items())
    if isinstance(v, JuliaStruct):
        return dict(v.fields)
    if isinstance(v, dict):
        return v
    return None


def carries_no_state(x: Any) -> bool:
    """``()``, ``NamedTuple()``, function singletons, ``#undef`` and containers of only those (file
    side), or template leaves without state (functions, RNG objects, ``None``, static data)."""
    if x is ABSENT or x is None or isinstance(x, (Singleton, Missing, Undef)):
        return True
    if isinstance(x, NamedTuple):
        return all(carries_no_state(c) for c in x.values())
    if isinstance(x, tuple) and not is_namedtuple_instance(x):
        return all(carries_no_state(c) for c in x)
    if isinstance(x, (np.ndarray, str, bool, int, float, complex, np.generic, list, Mapping)):
        return False
    if is_array_template(x) or isinstance(x, (LeafRef, JuliaStruct, JuliaArray)):
        return False
    if is_dataclass_instance(x) or is_namedtuple_instance(x):
        return False
    return is_non_state(x)


def _custom_children(t: Any) -> tuple[Any, ...] | None:
    """One level of a registered pytree node: ("named", pairs, treedef, names) when every child has
    a name, ("positional", pairs, treedef) otherwise; None when JAX sees a leaf (or is not loaded)."""
    tu = _jax_tree_util()
    if tu is None:
        return None
    pairs, treedef = tu.tree_flatten_with_path(t, is_leaf=lambda y: y is not t)
    if treedef.num_nodes == 1 and len(pairs) == 1 and pairs[0][1] is t:
        return None
    flat = [(kp[0], child) for kp, child in pairs]
    names: list[Any] = []
    for key, _ in flat:
        if isinstance(key, tu.GetAttrKey):
            names.append(key.name)
        elif isinstance(key, tu.DictKey):
            names.append(key.key)
        else:
            return ("positional", flat, treedef)
    return ("named", flat, treedef, names)


def _jax_tree_util() -> Any:
    jax = sys.modules.get("jax")
    return jax.tree_util if jax is not None else None


class _PlainKey:
    """Key-path entry when JAX is not loaded (numpy-only restores)."""

    __slots__ = ("name",)

    def __init__(self, name: Any) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _PlainKey) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("_PlainKey", self.name))


def _dict_key(k: Any) -> Any:
    tu = _jax_tree_util()
    return tu.DictKey(k) if tu is not None else _PlainKey(k)


def _attr_key(n: str) -> Any:
    tu = _jax_tree_util()
    return tu.GetAttrKey(n) if tu is not None else _PlainKey(n)


def _seq_key(i: int) -> Any:
    tu = _jax_tree_util()
    return tu.SequenceKey(i) if tu is not None else _PlainKey(i)


# --- descriptions -----------------------------------------------------------------------------------


def describe_template(t: Any) -> str:
    """Short text for a template entry: ``array float32 (5, 32)``, ``Linear``, ``tuple of 3``."""
    if isinstance(t, LeafRef):
        return f"array {t.dtype.name} {_shape(t.shape)}"
    if is_array_template(t):
        return f"array {np.dtype(t.dtype).name} {_shape(tuple(t.shape))}"
    if t is None:
        return "None"
    if isinstance(t, tuple) and t == ():
        return "()"
    if isinstance(t, NamedTuple):
        return "NamedTuple"
    if isinstance(t, (bool, int, float, complex, str)):
        return type(t).__name__
    if isinstance(t, np.generic):
        return t.dtype.name
    if isinstance(t, (tuple, list)) and not is_namedtuple_instance(t):
        return f"{type(t).__name__} of {len(t)}"
    if isinstance(t, NoArrays):
        return "no arrays (hyper-parameters only)"
    if is_non_state(t) and not is_dataclass_instance(t):
        return "function (no state)" if callable(t) else f"{type(t).__name__} (no state)"
    return type(t).__name__


def _shape(shape: tuple[int, ...]) -> str:
    return str(tuple(int(s) for s in shape))


def _names(names: list[Any]) -> str:
    return "(" + ", ".join(str(n) for n in names) + ")"


def _segment(name: Any) -> PathSegment:
    return name if isinstance(name, str) else repr(name)


def _category(x: Any) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "bool"
    if isinstance(x, (int, np.integer)):
        return "int"
    if isinstance(x, (float, np.floating)):
        return "float"
    return "complex"


def _number_text(v: Any) -> str:
    return repr(v.item() if isinstance(v, np.generic) else v)


def _scalar_type(v: Any) -> str:
    return v.dtype.name if isinstance(v, np.generic) else type(v).__name__


def _castable(src: np.dtype, dst: np.dtype) -> bool:
    numeric = "biufc"
    return (src.kind in numeric or src.name == "bfloat16") and (dst.kind in numeric or dst.name == "bfloat16")


def _is_concrete(t: Any) -> bool:
    return isinstance(t, np.ndarray) or (hasattr(t, "shape") and not _is_abstract_struct(t))


def _is_abstract_struct(t: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(t, jax.ShapeDtypeStruct)


def check_and_build(
    values: Any,
    like: Any,
    options: Options,
    placer: Placer,
    path: TreePath,
    *,
    header: str | None = None,
    log: ReportLog | None = None,
) -> tuple[Any, dict[int, Any]]:
    """Run the checking pass; raise one MismatchError listing everything; then build.

    ``log`` (default: ``options.log``) receives what the restore does: leaves restored, kept,
    ignored, converted.
    """
    log = log if log is not None else options.log
    checker = Walker(options, placer, build=False, log=log)
    checker.node(values, like, path, ())
    if checker.mismatches:
        head = header or _header(checker.mismatches, path)
        raise restore_error(checker.mismatches, head, checker.hints, log.ignored)
    if options.missing.bare and log.nothing_restored():
        raise restore_error(
            [
                Mismatch("missing", p, "from file (allow_missing=True would keep the template's value)")
                for p in log.kept
            ],
            f"nothing in the file's state{f' of {path[0]}' if path else ''} fits the template: "
            f"allow_missing=True would keep all {len(log.kept)} template leaves",
            {"names", "allow"},
            log.ignored,
        )
    results = run_jobs(checker.jobs, checker.job_bytes)
    builder = Walker(options, placer, build=True, results=iter(results))
    result = builder.node(values, like, path, ())
    return result, builder.refs


PARALLEL_MIN_BYTES = 4 << 20
"""Leaves copying at least this many bytes are placed on worker threads (see :func:`run_jobs`)..."""

PARALLEL_MIN_TOTAL = 512 << 20
"""... when those leaves copy this much in all (below it, one thread is as fast or faster)."""


def run_jobs(jobs: list[Callable[[], Any]], copies: list[int] | None = None) -> list[Any]:
    """Materialise the leaves; returns their values in order.

    Placing a leaf into JAX is one copy out of the memory map (a transposing one for a Julia
    matrix) into memory the process has not touched yet, made by ``jax.device_put`` with the GIL
    released. For a large state the first touch of that memory is most of the time, and two
    threads fault it in at once: on a quiet 2-core machine 1 GiB into an Equinox MLP takes
    0.41 s instead of 0.79 s; below half a GiB one thread was as fast or faster
    (docs/performance.md, "Restore"). So when the leaves copying at least
    :data:`PARALLEL_MIN_BYTES` each copy :data:`PARALLEL_MIN_TOTAL` in all, they go to a pool of
    one worker per core (at most 4) while this thread does the small ones. An exception is
    raised for the first failing leaf in order, once every started copy has finished.
    """
    sizes = copies or [0] * len(jobs)
    large = [i for i, n in enumerate(sizes) if n >= PARALLEL_MIN_BYTES]
    workers = min(len(large), os.cpu_count() or 1, 4)
    if workers < 2 or sum(sizes[i] for i in large) < PARALLEL_MIN_TOTAL:
        return [job() for job in jobs]
    results: list[Any] = [None] * len(jobs)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="treexchange-place") as pool:
        futures = {i: pool.submit(jobs[i]) for i in large}
        failed: tuple[int, BaseException] | None = None
        for i, job in enumerate(jobs):
            if i not in futures:
                try:
                    results[i] = job()
                except BaseException as err:  # raised below, unless an earlier large leaf failed
                    failed = (i, err)
                    break
        try:
            for i in range(len(jobs) if failed is None else failed[0] + 1):
                if i in futures:
                    results[i] = futures[i].result()
                elif failed is not None and i == failed[0]:
                    raise failed[1]
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # copies not started are not made
            raise
    return results


def _header(mismatches: list[Mismatch], path: TreePath) -> str:
    n = len(mismatches)
    where = f" of {path[0]}" if path else ""
    return f"the file's state{where} does not fit the template ({n} mismatch{'es' if n != 1 else ''})"
