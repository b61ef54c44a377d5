"""treexchange: lossless model-state exchange between Julia (Flux/Lux via JLD2) and Python (JAX).

The public API is exactly the names re-exported here.
"""

from typing import TYPE_CHECKING, Any

from ._bridge import (
    flux_julia as flux_julia,
    flux_state as flux_state,
    restore as restore,
    to_julia as to_julia,
)
from ._errors import (
    ConversionError as ConversionError,
    FormatError as FormatError,
    LimitError as LimitError,
    Mismatch as Mismatch,
    MismatchError as MismatchError,
    PlainHDF5Error as PlainHDF5Error,
    TreexchangeError as TreexchangeError,
    UnsupportedError as UnsupportedError,
    WriteError as WriteError,
    WrongFormatError as WrongFormatError,
)
from ._file import File as File, load as load, open as open
from ._jld2._nodes import Group as Group, Node as Node
from ._juliatype import JuliaType as JuliaType
from ._limits import Limits as Limits
from ._port._fromflux import from_flux as from_flux
from ._save import save as save
from ._values import (
    MISSING as MISSING,
    UNDEF as UNDEF,
    Int128 as Int128,
    JuliaArray as JuliaArray,
    JuliaBits as JuliaBits,
    JuliaStruct as JuliaStruct,
    NamedTuple as NamedTuple,
    Singleton as Singleton,
    Symbol as Symbol,
    UInt128 as UInt128,
    Undef as Undef,
    values_equal as values_equal,
)

# The schema layer (pydantic) is imported on first use of one of its names, so that
# ``import treexchange`` and reading files stay cheap (design.md: the codec never needs pydantic).
if TYPE_CHECKING:
    from ._schema import (
        Schema as Schema,
        SchemaDiff as SchemaDiff,
        diff as diff,
        infer_schema as infer_schema,
        load_schema as load_schema,
        read_embedded_schema as read_embedded_schema,
        schema_to_attributes as schema_to_attributes,
        validate as validate,
    )

_LAZY_SCHEMA_NAMES = frozenset(
    {
        "Schema",
        "SchemaDiff",
        "diff",
        "infer_schema",
        "load_schema",
        "read_embedded_schema",
        "schema_to_attributes",
        "validate",
    }
)


def __getattr__(name: str) -> Any:
    if name in _LAZY_SCHEMA_NAMES:
        from . import _schema

        value = getattr(_schema, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'treexchange' has no attribute {name!r}")


__version__ = "0.1.0"


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY_SCHEMA_NAMES)


__all__ = [
    "MISSING",
    "UNDEF",
    "ConversionError",
    "File",
    "FormatError",
    "Group",
    "Int128",
    "JuliaArray",
    "JuliaBits",
    "JuliaStruct",
    "JuliaType",
    "LimitError",
    "Limits",
    "Mismatch",
    "MismatchError",
    "NamedTuple",
    "Node",
    "PlainHDF5Error",
    "Schema",
    "SchemaDiff",
    "Singleton",
    "Symbol",
    "TreexchangeError",
    "UInt128",
    "Undef",
    "UnsupportedError",
    "WriteError",
    "WrongFormatError",
    "diff",
    "flux_julia",
    "flux_state",
    "from_flux",
    "infer_schema",
    "load",
    "load_schema",
    "open",
    "read_embedded_schema",
    "restore",
    "save",
    "schema_to_attributes",
    "to_julia",
    "validate",
    "values_equal",
]
