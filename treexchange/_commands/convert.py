"""``treexchange convert IN OUT``: re-encode a JLD2 file through the value model
(:func:`treexchange._save.convert`), or convert between JLD2 and another format
(:func:`treexchange._interop.convert_formats`).

The output is always JLD2 format 0.2.0 (what JLD2.jl >= 0.5 writes), whatever the input's
version. Re-encoding a 0.2.0 file that Julia wrote reproduces it byte for byte when
``--keep-producer`` keeps the input's producer note (tests/test_byte_identity.py).
"""

from __future__ import annotations

import argparse
import sys

from .._interop import convert_formats
from .._interop._convert import detect_format
from .._save import convert


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "convert",
        help="re-encode a JLD2 file, or convert JLD2 <-> safetensors / orbax",
        description=(
            "Read IN through treexchange's value model and write it to OUT as JLD2 format 0.2.0 "
            "(atomically: OUT is replaced only when the new file is complete). When one side is a "
            "safetensors file (.safetensors, .safetensors.index.json) or an orbax checkpoint "
            "directory, convert between it and JLD2 (format by extension, or --to)."
        ),
    )
    p.add_argument("input", metavar="IN", help="file (or orbax checkpoint directory) to read")
    p.add_argument("output", metavar="OUT", help="file (or orbax checkpoint directory) to write")
    p.add_argument(
        "--to",
        choices=("jld2", "safetensors", "orbax"),
        help="format of OUT (default: from its extension; a directory or *.orbax is orbax)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the mapping (source name -> target name, shape, dtype, transform); write nothing",
    )
    p.add_argument(
        "--architecture",
        metavar="TEXT",
        help=(
            "safetensors -> JLD2: the Flux model as Flux prints it (Chain(...)); the tensors (a PyTorch "
            "state_dict) are matched to it by the layer rules and written as a Flux.loadmodel!-ready "
            "model_state"
        ),
    )
    p.add_argument(
        "--max-shard-size",
        type=_size,
        metavar="SIZE",
        help="safetensors: split into shards of at most SIZE (e.g. 5GB, 500MB) with an index file",
    )
    p.add_argument(
        "--keep-producer",
        action="store_true",
        help="keep the input's producer note (e.g. ' (Julia 1.11.1 64-bit LE)') in the header",
    )
    p.add_argument(
        "--keep-format",
        action="store_true",
        help=(
            "keep a format-0.1.1 input (JLD2.jl 0.3-0.4) in format 0.1.1 instead of writing 0.2.0 "
            "(other inputs are written as 0.2.0), with the rules of the JLD2 release the input "
            "shows; when OUT is not byte for byte IN (from byte 512 on unless --keep-producer), "
            "say from where and why on stderr"
        ),
    )
    p.add_argument(
        "--compress",
        choices=("none", "deflate", "zstd"),
        default="none",
        help="compress numeric arrays (shuffle + deflate or zstd); default: none",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip reading the output back and comparing it with the input's values (faster)",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    src_fmt = detect_format(args.input, existing=True) or "jld2"
    dst_fmt = args.to or detect_format(args.output, existing=False) or "jld2"
    if (src_fmt, dst_fmt) != ("jld2", "jld2") or args.dry_run or args.architecture:
        # Another format on one side: the format-specific converters (treexchange._interop).
        convert_formats(
            args.input,
            args.output,
            to=dst_fmt,
            dry_run=args.dry_run,
            max_shard_size=args.max_shard_size,
            architecture=args.architecture,
        )
        return 0
    compress: bool | str = False if args.compress == "none" else args.compress
    note = convert(
        args.input,
        args.output,
        keep_producer=args.keep_producer,
        keep_format=args.keep_format,
        compress=compress,
        verify=not args.no_verify,
    )
    if note is not None:
        print(f"treexchange convert: {args.input}: {note}", file=sys.stderr)
    return 0


_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KIB": 1 << 10,
    "MIB": 1 << 20,
    "GIB": 1 << 30,
}


def _size(text: str) -> int:
    """``"5GB"`` -> 5_000_000_000 (B, KB, MB, GB, KiB, MiB, GiB; no unit: bytes)."""
    t = text.strip().upper()
    digits = t.rstrip("KMGIB")
    unit = t[len(digits) :]
    try:
        value = float(digits)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if unit not in _UNITS or value <= 0:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(value * _UNITS[unit])
