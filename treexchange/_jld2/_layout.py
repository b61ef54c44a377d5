"""How a Julia struct was laid out on disk: shared by the JLD2 reader and writer.

The reader attaches a :class:`StructLayout` to every :class:`treexchange.JuliaStruct` it builds
(``JuliaStruct.layout``) so the writer can re-encode the struct byte for byte: the committed HDF5
compound (member names, offsets, member types), the ``julia_type`` / ``written_type`` attributes,
which type-metadata attributes were present, and for every *Julia* field (ghost fields included,
in declaration order) how it was stored.

Storage kinds of a field (see docs/jld2-format.md §5.1):

* ``"inline"``: the value lives inside the compound (numbers, Bool, vlen strings, Symbols, nested
  isbits / immutable compounds such as Tuples and NamedTuples);
* ``"reference"``: the compound member is an 8-byte object reference to another dataset
  (arrays, mutable structs, abstractly typed fields, immutables over 1024 bytes);
* ``"ghost"``: a zero-size field (``()``, ``nothing``, functions ...) with no compound member; it
  exists only in ``field_names`` / ``field_types``.

Everything here is immutable plain data and holds no reference to an open file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .._hdf5._model import H5Type, Member
from .._juliatype import JuliaType

FieldStorage = Literal["inline", "reference", "ghost"]
FieldAttrs = Literal["field_names", "field_datatypes", "none"]


@dataclass(frozen=True)
class FieldLayout:
    """One Julia field of a struct as stored.

    Attributes:
        name: the Julia field name (``"σ²"``).
        storage: ``"inline"``, ``"reference"`` or ``"ghost"``.
        member: the compound member holding the field (name, byte offset, member H5Type) for
            inline and reference fields; ``None`` for ghosts. For a reference field
            ``member.type`` is the 8-byte reference type.
        field_type: the ``julia_type`` of the committed datatype that the field's ``field_types``
            (format 0.2.0) or ``field_datatypes`` (format 0.1.x) entry points to; ``None`` when the
            entry is NULL or the attribute is absent.

    Example:
        >>> from treexchange._hdf5._model import H5Class, H5Type, Member
        >>> ref = H5Type(H5Class.REFERENCE, 1, 0, 8)
        >>> FieldLayout("weight", "reference", Member("weight", 0, ref)).h5type.size
        8
        >>> FieldLayout("σ", "ghost", None, JuliaType("Tuple")).h5type is None
        True
    """

    name: str
    storage: FieldStorage
    member: Member | None = None
    field_type: JuliaType | None = None

    @property
    def h5type(self) -> H5Type | None:
        """The member's HDF5 type (``None`` for a ghost field)."""
        return None if self.member is None else self.member.type


@dataclass(frozen=True)
class StructLayout:
    """The on-disk description of one committed struct type (``JuliaStruct.layout``).

    Attributes:
        julia_type: the committed type's ``julia_type`` (the read-as type).
        h5type: the committed HDF5 datatype (a compound for ordinary structs, an opaque type for
            primitive bits types, a reference for custom-serialized types);
            ``h5type.committed_at`` is its relative address in the file it was read from.
        fields: every Julia field in declaration order, ghost fields included.
        written_type: the ``written_type`` attribute (custom serialization), or ``None``.
        field_attrs: which per-field attributes the committed type carried: ``"field_names"``
            (format 0.2.0: ``field_names`` + ``field_types``), ``"field_datatypes"`` (format
            0.1.x) or ``"none"`` (all fields stored with their natural HDF5 types).

    Example:
        >>> from treexchange._hdf5._model import H5Class, H5Type, Member
        >>> f64 = H5Type(H5Class.FLOAT, 1, 0x20 | (0x3F << 8), 8)
        >>> lay = StructLayout(
        ...     JuliaType.parse("Main.P"),
        ...     H5Type(H5Class.COMPOUND, 3, 1, 8, members=(Member("p", 0, f64),)),
        ...     (FieldLayout("p", "inline", Member("p", 0, f64)), FieldLayout("f", "ghost")),
        ... )
        >>> [f.name for f in lay.fields], lay.stored_fields()[0].member.offset
        (['p', 'f'], 0)
    """

    julia_type: JuliaType
    h5type: H5Type
    fields: tuple[FieldLayout, ...]
    written_type: JuliaType | None = None
    field_attrs: FieldAttrs = "none"

    def stored_fields(self) -> tuple[FieldLayout, ...]:
        """The fields that have a compound member (inline or reference), in field order."""
        return tuple(f for f in self.fields if f.storage != "ghost")
