"""treexchange: lossless model-state exchange between Julia (Flux/Lux via JLD2) and Python (JAX).

The public API is exactly the names re-exported here.
"""

from typing import TYPE_CHECKING, Any

from ._bridge import flux_julia as flux_julia
from ._bridge import flux_state as flux_state
from ._bridge import restore as restore
from ._bridge import to_julia as to_julia
from ._errors import (
    ConversionError as ConversionError,
)
from ._errors import (
    FormatError as FormatError,
)
from ._errors import (
    LimitError as LimitError,
)
from ._errors import (
    Mismatch as Mismatch,
)
from ._errors import (
    MismatchError as MismatchError,
)
from ._errors import (
    TreexchangeError as TreexchangeError,
)
from ._errors import (
    UnsupportedError as UnsupportedError,
)
from ._errors import (
    WriteError as WriteError,
)
from ._errors import (
    WrongFormatError as WrongFormatError,
)
from ._file import File as File
from ._file import load as load
from ._file import open as open
from ._jld2._nodes import Group as Group
from ._jld2._nodes import Node as Node
from ._juliatype import JuliaType as JuliaType
from ._limits import Limits as Limits
from ._save import save as save
from ._values import (
    MISSING as MISSING,
)
from ._values import (
    Int128 as Int128,
)
from ._values import (
    JuliaArray as JuliaArray,
)
from ._values import (
    JuliaBits as JuliaBits,
)
from ._values import (
    JuliaStruct as JuliaStruct,
)
from ._values import (
    NamedTuple as NamedTuple,
)
from ._values import (
    Singleton as Singleton,
)
from ._values import (
    Symbol as Symbol,
)
from ._values import (
    UInt128 as UInt128,
)
from ._values import (
    values_equal as values_equal,
)

# The schema layer (pydantic) is imported on first use of one of its names, so that
# ``import treexchange`` and reading files stay cheap (design.md: the codec never needs pydantic).
if TYPE_CHECKING:
    from ._schema import Schema as Schema
    from ._schema import SchemaDiff as SchemaDiff
    from ._schema import diff as diff
    from ._schema import infer_schema as infer_schema
    from ._schema import load_schema as load_schema
    from ._schema import read_embedded_schema as read_embedded_schema
    from ._schema import schema_to_attributes as schema_to_attributes
    from ._schema import validate as validate

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
