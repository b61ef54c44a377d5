"""Fetch the Julia-written files this repository does not carry, by commit, and check their sha256.

``sources.json`` (beside this script) lists every file of the corpus: its public repository, the
commit it is taken at, its path there, its size, sha256 and licence. The files whose licence lets us
redistribute them are in this folder already (``"bundled": true``); the others (no licence visible
in their repository) are fetched by this script from their repository, at that commit::

    python julia_fixtures/fetch.py                 # into julia_fixtures/ (git-ignored there)
    python julia_fixtures/fetch.py --dest DIR      # elsewhere
    python julia_fixtures/fetch.py --base-url file:///path/to/mirror   # from a local mirror

A file is read from ``{base_url}/{repo}/{commit}/{path}`` (the default base URL serves raw files of
public GitHub repositories at a commit), written only when its sha256 matches, and never
overwritten when the copy already there matches. Any mismatch or failure is listed and makes the
exit status 1. ``--all`` fetches the bundled files too (to check them against their sources).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "sources.json"
DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
MAX_BYTES = 64 * 1024 * 1024  # no corpus file comes near; bounds what a wrong URL can make us hold


def load_sources(path: Path = SOURCES) -> list[dict]:
    """The entries of ``sources.json``: file, repo, commit, path, size, sha256, license, bundled."""
    return json.loads(path.read_text(encoding="utf-8"))


def source_url(base_url: str, entry: dict) -> str:
    """Where ``entry`` is read from: ``{base_url}/{repo}/{commit}/{path}`` (path URL-quoted)."""
    return f"{base_url.rstrip('/')}/{entry['repo']}/{entry['commit']}/{urllib.parse.quote(entry['path'])}"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch_one(entry: dict, dest: Path, base_url: str) -> str:
    """Fetch one file into ``dest``; returns "ok", "present" (already there, checked) or raises."""
    target = dest / entry["file"]
    if target.is_file() and sha256(target.read_bytes()) == entry["sha256"]:
        return "present"
    url = source_url(base_url, entry)
    with urllib.request.urlopen(url, timeout=60) as response:
        data = response.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"{url}: more than {MAX_BYTES} bytes")
    digest = sha256(data)
    if digest != entry["sha256"]:
        raise ValueError(f"{url}: sha256 {digest}, expected {entry['sha256']} ({len(data)} bytes)")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    partial.write_bytes(data)
    partial.replace(target)
    return "ok"


def fetch(dest: Path, base_url: str = DEFAULT_BASE_URL, *, everything: bool = False) -> list[str]:
    """Fetch every file not bundled (every file with ``everything``); returns the failures."""
    failures = []
    for entry in load_sources():
        if entry["bundled"] and not everything:
            continue
        try:
            status = fetch_one(entry, dest, base_url)
        except (OSError, ValueError) as exc:
            failures.append(f"{entry['file']}: {exc}")
            print(f"FAILED  {entry['file']}: {exc}", file=sys.stderr)
        else:
            print(f"{status:8}{entry['file']}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=HERE, help="folder to write into (default: this one)")
    parser.add_argument("--base-url", default=DEFAULT_BASE_URL, help="where {repo}/{commit}/{path} is read")
    parser.add_argument("--all", action="store_true", help="fetch the bundled files too")
    args = parser.parse_args(argv)
    failures = fetch(args.dest, args.base_url, everything=args.all)
    if failures:
        print(f"{len(failures)} file(s) failed", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
