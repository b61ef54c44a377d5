"""The JLD2 file header: the text JLD2 puts in the 512-byte HDF5 user block.

The user block holds two NUL-terminated strings: the format header (``HDF5-based Julia Data
Format, version 0.2.0``) and a producer note (`` (Julia 1.11.1 64-bit LE)``). JLD v1 (the older
HDF5.jl-based format) uses ``Julia data file (HDF5), version 0.1.x``; JLD2 before August 2020
used the same words with version ``0.2.0`` (the *legacy* header).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._errors import PlainHDF5Error, WrongFormatError

JLD2_PREFIX = "HDF5-based Julia Data Format, version "
LEGACY_PREFIX = "Julia data file (HDF5), version "
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


@dataclass(frozen=True)
class FileHeader:
    """What the user block says about a JLD2 file.

    Attributes:
        text: the first string, e.g. ``"HDF5-based Julia Data Format, version 0.2.0"``.
        format_version: the version at its end (``"0.2.0"``, ``"0.1.1"``, ``"0.1"``...). For the
            legacy header it is the legacy number ``"0.2.0"``; see ``legacy``.
        producer: the second string verbatim, e.g. ``" (Julia 1.11.1 64-bit LE)"`` (``""`` if absent).
        legacy: the header is ``Julia data file (HDF5), version 0.2.0`` (JLD2 <= 0.1.x, whose
            type metadata follows format 0.1.x).

    Example:
        >>> ub = b"HDF5-based Julia Data Format, version 0.2.0\\x00 (Julia 1.11.1 64-bit LE)\\x00"
        >>> h = parse_header(ub)
        >>> h.format_version, h.producer, h.new_type_encoding
        ('0.2.0', ' (Julia 1.11.1 64-bit LE)', True)
    """

    text: str
    format_version: str
    producer: str
    legacy: bool = False

    @property
    def new_type_encoding(self) -> bool:
        """Format >= 0.2.0 of current JLD2 (``field_names``/``field_types`` attributes)."""
        return not self.legacy and _version_tuple(self.format_version) >= (0, 2, 0)


def _version_tuple(text: str) -> tuple[int, int, int]:
    m = _VERSION.match(text)
    if m is None:
        return (0, 0, 0)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def _strings(userblock: bytes) -> tuple[str, str]:
    first, _, rest = userblock.partition(b"\x00")
    second = rest.partition(b"\x00")[0]
    return first.decode("utf-8", "replace"), second.decode("utf-8", "replace")


def parse_header(userblock: bytes, *, what: str = "file") -> FileHeader:
    """Classify a user block; raise :class:`WrongFormatError` unless it is a JLD2 header.

    Raises:
        WrongFormatError: a JLD (v1) file, or no JLD2 header (plain HDF5: the subclass
            :class:`PlainHDF5Error`).

    Example:
        >>> try:
        ...     parse_header(b"Julia data file (HDF5), version 0.1.3\\x00")
        ... except WrongFormatError as err:
        ...     print(err.message[:36])
        file is a JLD (v1) file, not JLD2 (h
    """
    text, producer = _strings(bytes(userblock))
    if text.startswith(JLD2_PREFIX):
        version = text[len(JLD2_PREFIX) :].strip()
        if _VERSION.match(version) is None:
            raise WrongFormatError(f"{what} has an unreadable JLD2 version in its header {text!r}", offset=0)
        return FileHeader(text, version, producer)
    if text.startswith(LEGACY_PREFIX):
        version = text[len(LEGACY_PREFIX) :].strip()
        vt = _version_tuple(version)
        if vt >= (0, 2, 0):
            return FileHeader(text, version, producer, legacy=True)
        raise WrongFormatError(
            f"{what} is a JLD (v1) file, not JLD2 (header {text!r}); read it with JLD.jl, "
            "or convert it to JLD2 in Julia",
            offset=0,
        )
    raise PlainHDF5Error(
        f"{what} is a plain HDF5 file, not JLD2 (no JLD2 header in its user block); "
        "pass allow_hdf5=True to read it through h5py",
        offset=0,
    )
