"""treexchange: lossless model-state exchange between Julia (Flux/Lux via JLD2) and Python (JAX).

The public API is exactly the names re-exported here.
"""

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
from ._juliatype import JuliaType as JuliaType
from ._limits import Limits as Limits
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

__version__ = "0.1.0"
