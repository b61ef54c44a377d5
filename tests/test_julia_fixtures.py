"""The bundled corpus (julia_fixtures/): every file as sources.json says, credited, and fetch.py's
fetching by commit with sha256 checks, run against a local mirror built from ../shared."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest
from conftest import BUNDLED_DIR, SHARED

ENTRIES = json.loads((BUNDLED_DIR / "sources.json").read_text(encoding="utf-8"))
BUNDLED = [e for e in ENTRIES if e["bundled"]]
OUTSIDE = [e for e in ENTRIES if not e["bundled"]]
REDISTRIBUTABLE = ("MIT", "BSD", "BSD-style", "MPL-2.0", "Apache", "CC", "Unlicense")


def _fetch_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fetch", BUNDLED_DIR / "fetch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_bundled_file_is_there_with_its_sha256_and_a_redistributable_licence() -> None:
    assert len(BUNDLED) >= 26 and len(OUTSIDE) >= 20
    names = {e["file"] for e in BUNDLED}
    assert {"flux-state/silver-bullet_lenet.jld2", "flux-model/vqvae_autoencoder7x7x16.jld2"} <= names
    assert {"mnist/t10k-images-idx3-ubyte.gz", "mnist/t10k-labels-idx1-ubyte.gz"} <= names
    for entry in BUNDLED:
        data = (BUNDLED_DIR / entry["file"]).read_bytes()
        assert len(data) == entry["size"], entry["file"]
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["file"]
        assert entry["license"].split()[0] in REDISTRIBUTABLE, entry
        assert len(entry["commit"]) == 40, entry


def test_the_files_without_a_licence_are_not_committed_but_git_ignored() -> None:
    ignored = (BUNDLED_DIR / ".gitignore").read_text(encoding="utf-8").splitlines()
    for entry in OUTSIDE:
        assert entry["license"].split()[0] not in REDISTRIBUTABLE, entry
        assert "/" + entry["file"] in ignored, entry["file"]


def test_sources_md_credits_each_bundled_file_and_each_licence_text_is_there() -> None:
    table = (BUNDLED_DIR / "SOURCES.md").read_text(encoding="utf-8")
    for entry in ENTRIES:
        assert f"`{entry['file']}` | {entry['repo']} | `{entry['commit'][:10]}`" in table, entry["file"]
        assert entry["sha256"] in table
    for repo in {e["repo"] for e in BUNDLED if not e["file"].startswith("mnist/")}:
        text = (BUNDLED_DIR / "LICENSES" / (repo.replace("/", "__") + ".txt")).read_text(encoding="utf-8")
        assert f"https://github.com/{repo}" in text
        assert "Copyright" in text or "Mozilla Public License" in text or "unlicense.org" in text, repo
    assert "CC BY-SA 3.0" in table and "creativecommons.org/licenses/by-sa/3.0" in table


def _mirror_from_shared(root: Path) -> None:
    """Lay ../shared's files out as ``{repo}/{commit}/{path}``, the way fetch.py reads a source."""
    for entry in ENTRIES:
        if entry["file"].startswith("mnist/"):
            source = SHARED / "data" / "mnist" / entry["path"]
        elif (SHARED / "julia_fixtures" / entry["file"]).is_file():
            source = SHARED / "julia_fixtures" / entry["file"]
        else:  # bundled from outside ../shared's corpus (SOURCES.md): the repository's copy
            source = BUNDLED_DIR / entry["file"]
        target = root / entry["repo"] / entry["commit"] / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def test_fetch_gets_every_file_not_bundled_by_commit_and_checks_sha256(tmp_path: Path) -> None:
    if not (SHARED / "julia_fixtures" / "CATALOG.md").is_file():
        pytest.skip(f"builds its mirror from ../shared, not found at {SHARED}")
    fetch = _fetch_module()
    mirror, dest = tmp_path / "mirror", tmp_path / "dest"
    _mirror_from_shared(mirror)
    base = mirror.as_uri()
    assert fetch.main(["--dest", str(dest), "--base-url", base]) == 0
    for entry in OUTSIDE:
        assert hashlib.sha256((dest / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    assert not any((dest / e["file"]).exists() for e in BUNDLED)  # bundled ones are not fetched again
    # a second run finds them present; a damaged source is refused and nothing is written for it
    victim = OUTSIDE[0]
    (dest / victim["file"]).unlink()
    source = mirror / victim["repo"] / victim["commit"] / victim["path"]
    source.write_bytes(source.read_bytes()[:-1] + b"\0")
    failures = fetch.fetch(dest, base)
    assert len(failures) == 1 and victim["file"] in failures[0] and "sha256" in failures[0]
    assert not (dest / victim["file"]).exists()
    assert fetch.main(["--dest", str(dest), "--base-url", base]) == 1
    # --all checks the bundled files against their sources too
    assert fetch.fetch(tmp_path / "all", base, everything=True) == failures


def test_fetch_names_the_url_it_reads() -> None:
    fetch = _fetch_module()
    entry = next(e for e in ENTRIES if " " in e["path"])  # "recoverable_changes_in structs.jld2"
    url = fetch.source_url("https://example.org/", entry)
    assert url == f"https://example.org/{entry['repo']}/{entry['commit']}/{entry['path'].replace(' ', '%20')}"
