"""treexchange: lossless model-state exchange between Julia (Flux/Lux via JLD2) and Python (JAX, PyTorch).

The public API is exactly the names re-exported here.
"""

import importlib
from typing import TYPE_CHECKING, Any

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
from ._limits import Limits as Limits
from ._version import __version__ as __version__

# Every public name but the exceptions, Limits and __version__ is imported on first use (the table
# below), by package: ``import treexchange`` imports neither numpy nor any of its own layers
# (docs/performance.md, benchmarks/bench_import.py), and reading a file loads the codec only: not the
# writer, the JAX bridge, the porting rules, the schema layer (pydantic) or the other formats.
if TYPE_CHECKING:
    from ._bridge import (
        RestoreReport as RestoreReport,
        RestoreWarning as RestoreWarning,
        restore as restore,
        to_julia as to_julia,
    )
    from ._file import load as load
    from ._interop._orbax import load_orbax as load_orbax, save_orbax as save_orbax
    from ._interop._safetensors import (
        load_safetensors as load_safetensors,
        save_safetensors as save_safetensors,
    )
    from ._interop._torch import (
        flux_to_state_dict as flux_to_state_dict,
        load_into_module as load_into_module,
        state_dict_to_flux as state_dict_to_flux,
    )
    from ._jld2._nodes import Group as Group, Node as Node
    from ._juliatype import JuliaType as JuliaType
    from ._port._flux import flux_julia as flux_julia, flux_state as flux_state, lux_state as lux_state
    from ._port._fromflux import from_flux as from_flux
    from ._port._fromlux import from_lux as from_lux
    from ._reader import File as File, open as open
    from ._save import save as save
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
    from ._values import (
        MISSING as MISSING,
        UNDEF as UNDEF,
        BigFloat as BigFloat,
        BigInt as BigInt,
        Closure as Closure,
        Int128 as Int128,
        JuliaArray as JuliaArray,
        JuliaBits as JuliaBits,
        JuliaDict as JuliaDict,
        JuliaStruct as JuliaStruct,
        NamedTuple as NamedTuple,
        Singleton as Singleton,
        Symbol as Symbol,
        UInt128 as UInt128,
        Undef as Undef,
        values_equal as values_equal,
    )

# Names whose module is imported on first use (name -> module), by package boundary: to add a public
# name, add it here (and under TYPE_CHECKING above, and to __all__). The schema layer needs pydantic,
# the other formats need safetensors / orbax / torch (each imported only inside the functions that
# use it) and the layer rules; ``import treexchange`` and reading files stay cheap (design.md).
_LAZY_NAMES = {
    **dict.fromkeys(("RestoreReport", "RestoreWarning", "restore", "to_julia"), "._bridge"),
    **dict.fromkeys(("File", "open"), "._reader"),
    **dict.fromkeys(("Group", "Node"), "._jld2._nodes"),
    "load": "._file",
    "JuliaType": "._juliatype",
    **dict.fromkeys(
        (
            "MISSING",
            "UNDEF",
            "BigFloat",
            "BigInt",
            "Closure",
            "Int128",
            "JuliaArray",
            "JuliaBits",
            "JuliaDict",
            "JuliaStruct",
            "NamedTuple",
            "Singleton",
            "Symbol",
            "UInt128",
            "Undef",
            "values_equal",
        ),
        "._values",
    ),
    "save": "._save",
    **dict.fromkeys(("flux_julia", "flux_state", "lux_state"), "._port._flux"),
    "from_flux": "._port._fromflux",
    "from_lux": "._port._fromlux",
    **dict.fromkeys(
        (
            "Schema",
            "SchemaDiff",
            "diff",
            "infer_schema",
            "load_schema",
            "read_embedded_schema",
            "schema_to_attributes",
            "validate",
        ),
        "._schema",
    ),
    **dict.fromkeys(("save_safetensors", "load_safetensors"), "._interop._safetensors"),
    **dict.fromkeys(("save_orbax", "load_orbax"), "._interop._orbax"),
    **dict.fromkeys(("state_dict_to_flux", "flux_to_state_dict", "load_into_module"), "._interop._torch"),
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY_NAMES.get(name)
    if module_name is not None:
        value = getattr(importlib.import_module(module_name, __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'treexchange' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_NAMES))


__all__ = [
    "MISSING",
    "UNDEF",
    "BigFloat",
    "BigInt",
    "Closure",
    "ConversionError",
    "File",
    "FormatError",
    "Group",
    "Int128",
    "JuliaArray",
    "JuliaBits",
    "JuliaDict",
    "JuliaStruct",
    "JuliaType",
    "LimitError",
    "Limits",
    "Mismatch",
    "MismatchError",
    "NamedTuple",
    "Node",
    "PlainHDF5Error",
    "RestoreReport",
    "RestoreWarning",
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
    "flux_to_state_dict",
    "from_flux",
    "from_lux",
    "infer_schema",
    "load",
    "load_into_module",
    "load_orbax",
    "load_safetensors",
    "load_schema",
    "lux_state",
    "open",
    "read_embedded_schema",
    "restore",
    "save",
    "save_orbax",
    "save_safetensors",
    "schema_to_attributes",
    "state_dict_to_flux",
    "to_julia",
    "validate",
    "values_equal",
]
