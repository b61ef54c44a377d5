"""``treexchange convert IN OUT``: re-encode a JLD2 file through the value model
(:func:`treexchange._save.convert`), or convert between JLD2 and another format
(:func:`treexchange._interop.convert_formats`).

The output is always JLD2 format 0.2.0 (what JLD2.jl >= 0.5 writes), whatever the input's
version. Re-encoding a 0.2.0 file that Julia wrote reproduces it byte for byte when
``--keep-producer`` keeps the input's producer note (tests/test_byte_identity.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .._bson._document import sniff as is_bson
from .._errors import UnsupportedError
from .._interop import convert_formats
from .._interop._convert import detect_format
from .._interop._fluxmigrate import migrate_flux_state
from .._interop._progress import ProgressLine
from .._save import convert

# The routes (input format, output format) on which each option does something: given on another
# route it would be ignored, so it is refused instead.
_JLD2 = ("jld2", "jld2")
_ROUTES = {
    "architecture": {("safetensors", "jld2"), ("jld2", "safetensors"), ("flux-state", "jld2")},
    "max_shard_size": {("jld2", "safetensors")},
    "keep_producer": {_JLD2},
    "keep_format": {_JLD2},
    "compress": {_JLD2},
    "no_verify": {_JLD2},
}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "convert",
        help="re-encode a JLD2 or BSON.jl file as JLD2, convert JLD2 <-> safetensors / orbax, or migrate "
        "old Flux models (--flux-state)",
        description=(
            "Read IN through treexchange's value model and write it to OUT as JLD2 format 0.2.0 "
            "(atomically: OUT is replaced only when the new file is complete). When one side is a "
            "safetensors file (.safetensors, .safetensors.index.json) or an orbax checkpoint "
            "directory, convert between it and JLD2 (format by extension, or --to). IN may be a BSON.jl "
            "file (told by its content); --flux-state writes its Flux models as Flux.state."
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
            "the Flux model as Flux prints it (Chain(...)). safetensors -> JLD2: the tensors (a PyTorch "
            "state_dict) are matched to it by the layer rules and written as a Flux.loadmodel!-ready "
            "model_state. JLD2 -> safetensors: the file's Flux.state becomes a PyTorch state_dict "
            "(nn.Sequential names: 0.weight, ...; torch.load_state_dict-ready). With --flux-state: the "
            "model a parameter list (Flux.params) belongs to, or that names a whole model's closures"
        ),
    )
    p.add_argument(
        "--flux-state",
        action="store_true",
        help=(
            "write each Flux model in IN (a BSON.jl or whole-model JLD2 file of any Flux version) as "
            "its Flux.state under the same name, for Flux.loadmodel!(model, JLD2.load(OUT, name)) in "
            "a current Flux; other entries are written as they are"
        ),
    )
    p.add_argument(
        "--flux",
        choices=("0.14", "0.15"),
        default=None,
        help="with --flux-state: the Flux whose Flux.state to write (0.15 = Flux >= 0.15, the default)",
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
        help=(
            "keep the input's producer note (e.g. ' (Julia 1.11.1 64-bit LE)') in the header, and "
            "compress again what JLD2 compressed (its own layout, which libhdf5 2 cannot read)"
        ),
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
    if args.flux_state:
        if args.to not in (None, "jld2"):  # (a Flux.state is a JLD2 file: never another format silently)
            raise UnsupportedError(f"--flux-state writes a JLD2 file (Flux.state), not --to {args.to}")
        _refuse_idle_options(args, ("flux-state", "jld2"))
        migrate_flux_state(
            args.input,
            args.output,
            flux=args.flux or "0.15",
            architecture=args.architecture,
            dry_run=args.dry_run,
        )
        return 0
    if args.flux is not None:
        raise UnsupportedError("--flux does nothing without --flux-state (the Flux.state it writes)")
    src_fmt = detect_format(args.input, existing=True) or "jld2"
    dst_fmt = args.to or detect_format(args.output, existing=False) or "jld2"
    _refuse_idle_options(args, (src_fmt, dst_fmt))
    if (src_fmt, dst_fmt) != _JLD2 or args.dry_run:
        # Another format on one side: the format-specific converters (treexchange._interop).
        route = convert_formats(
            args.input,
            args.output,
            to=dst_fmt,
            dry_run=args.dry_run,
            max_shard_size=args.max_shard_size,
            architecture=args.architecture,
        )
        if not args.dry_run:  # say what was written, as the JLD2 -> JLD2 route does
            said = route.replace("->", " -> ")
            if src_fmt == "jld2" and is_bson(args.input):  # (the "jld2" route reads BSON.jl files too)
                said = "bson" + said[len("jld2") :]
            print(f"{args.input} -> {args.output}: {said}", file=sys.stdout)
        return 0
    compress: bool | str = False if args.compress == "none" else args.compress
    bar = ProgressLine(os.path.getsize(args.input), f"{Path(args.input).name} -> jld2")
    try:
        summary = convert(
            args.input,
            args.output,
            keep_producer=args.keep_producer,
            keep_format=args.keep_format,
            compress=compress,
            verify=not args.no_verify,
            on_write=bar,
        )
    finally:
        bar.close()
    first, *notes = summary.split("\n")
    print(first, file=sys.stdout)
    for note in notes:  # --keep-format could not reproduce the input byte for byte: where and why
        print(f"treexchange convert: {args.input}: {note}", file=sys.stderr)
    return 0


def _refuse_idle_options(args: argparse.Namespace, route: tuple[str, str]) -> None:
    """An option that would do nothing on this route is an error, never silently ignored."""
    given = {
        "architecture": args.architecture is not None,
        "max_shard_size": args.max_shard_size is not None,
        "keep_producer": args.keep_producer,
        "keep_format": args.keep_format,
        "compress": args.compress != "none",
        "no_verify": args.no_verify,
    }
    for option, routes in _ROUTES.items():
        if given[option] and route not in routes:
            flag = "--" + option.replace("_", "-")
            where = ", ".join(f"{a} -> {b}" for a, b in sorted(routes))
            raise UnsupportedError(
                f"{flag} does nothing for {route[0]} -> {route[1]} (it applies to: {where})"
            )
    if args.architecture is not None and args.max_shard_size is not None:
        raise UnsupportedError("--max-shard-size does nothing with --architecture (one state_dict file)")


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
