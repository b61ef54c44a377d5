"""The documentation's code runs: every Python block of the guides is executed, every public name is
documented in the API reference.

Which pages: ``docs/index.md``, ``docs/getting-started.md`` and ``docs/guides/*.md`` (the pages
written to be followed step by step). The topic pages (reading.md, jax.md, ...) show fragments
against the reader's own files and are not run.

The convention, for authors of those pages:

- Every fenced block whose info string is exactly ``python`` runs. The blocks of one page run in
  order, in **one namespace**, in a fresh **temporary working directory**: a guide makes the files
  it uses (``tx.save("mlp.jld2", ...)``) and later blocks find them there by their relative names.
- An HTML comment on its own line right before a fence (several may be stacked) controls the block:

  - ``<!-- test: skip REASON -->``: shown, never run (a fragment that needs the reader's own files).
  - ``<!-- test: requires treexchange.NAME -->``: runs only when ``treexchange`` has ``NAME``;
    otherwise this block and every later block of the page are skipped, with that reason.
  - ``<!-- test: shared RELPATH -->``: the file ``../shared/RELPATH`` (the shared fixtures, see
    tests/conftest.py) is linked into the working directory under its base name before the block
    runs, so the page can say ``tx.load("silver-bullet_lenet.jld2", ...)``; when it is absent this
    block and the rest of the page are skipped, with the reason.

- ``console`` blocks run too, line by line: each line ``$ treexchange ARGS`` calls the CLI in the
  same working directory (other lines are output, not checked) and must exit 0, or the exit code
  named by a ``<!-- test: exit N -->`` marker before the block. Other languages (``julia``,
  ``bash``, ``text``, ``json``) are never run.

A failing block is reported with its page and line (tracebacks point into the Markdown file). A page
that stopped early for a missing requirement is reported as skipped, saying how many blocks ran.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import SHARED, shared_file

DOCS = Path(__file__).resolve().parents[1] / "docs"
RUN_PAGES = sorted(
    [DOCS / "index.md", DOCS / "getting-started.md", *(DOCS / "guides").glob("*.md")],
    key=lambda p: str(p),
)

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>[^\n`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*test:\s*(?P<verb>\w+)\s*(?P<arg>.*?)\s*-->\s*$")


@dataclass
class Block:
    """One fenced block of a page: its language, source, first line (1-based) and markers."""

    lang: str
    source: str
    line: int
    markers: list[tuple[str, str]] = field(default_factory=list)


def blocks_of(text: str) -> list[Block]:
    """The fenced blocks of a Markdown page, with the ``<!-- test: ... -->`` markers before each."""
    lines = text.splitlines()
    out: list[Block] = []
    pending: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        marker = _MARKER.match(lines[i])
        if marker:
            pending.append((marker["verb"], marker["arg"]))
            i += 1
            continue
        fence = _FENCE.match(lines[i])
        if not fence:
            if lines[i].strip():
                pending = []  # a marker belongs to the fence right below it only
            i += 1
            continue
        indent, ticks = len(fence["indent"]), fence["fence"]
        body: list[str] = []
        start = i + 2  # the first line of the block's body, 1-based
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(ticks):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1  # the closing fence
        out.append(Block(fence["info"].strip(), "\n".join(body) + "\n", start, pending))
        pending = []
    return out


def _run_python(block: Block, page: Path, namespace: dict[str, object]) -> None:
    # Leading newlines put the code at its own line numbers, so a traceback names the Markdown line.
    code = compile("\n" * (block.line - 1) + block.source, str(page), "exec")
    exec(code, namespace)


def _run_console(block: Block, page: Path, expected: int) -> None:
    from treexchange._cli import main

    for offset, text in enumerate(block.source.splitlines()):
        if not text.startswith("$ treexchange "):
            continue
        argv = shlex.split(text[len("$ treexchange ") :].split(" #")[0])
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(argv)
        assert code == expected, (
            f"{page.name}:{block.line + offset}: `treexchange {' '.join(argv)}` exited {code}, "
            f"expected {expected}:\n{out.getvalue()}"
        )


def _unmet(verb: str, arg: str, cwd: Path) -> str | None:
    """The reason a marker's requirement is not met (None when it is), linking shared files."""
    if verb == "requires":
        import treexchange

        name = arg.removeprefix("treexchange.")
        if not hasattr(treexchange, name):
            return f"needs treexchange.{name}, which this build does not have yet"
    elif verb == "shared":
        source = shared_file(arg)
        if source is None:
            return f"needs {SHARED / arg} (clone ../shared beside the repository or set TREEXCHANGE_SHARED)"
        target = cwd / source.name
        if not target.exists():
            target.symlink_to(source)
    elif verb not in ("skip", "exit"):
        raise AssertionError(f"unknown docs-test marker {verb!r}")
    return None


def run_page(page: Path, cwd: Path) -> tuple[int, int, str | None]:
    """Run a page's blocks in ``cwd``: ``(blocks run, blocks runnable, reason it stopped or None)``."""
    runnable = [b for b in blocks_of(page.read_text()) if b.lang in ("python", "console")]
    runnable = [b for b in runnable if not any(v == "skip" for v, _ in b.markers)]
    namespace: dict[str, object] = {"__name__": "__docs__"}
    before = os.getcwd()
    os.chdir(cwd)
    try:
        for done, block in enumerate(runnable):
            for verb, arg in block.markers:
                reason = _unmet(verb, arg, cwd)
                if reason:
                    return done, len(runnable), f"line {block.line}: {reason}"
            if block.lang == "python":
                _run_python(block, page, namespace)
            else:
                exits = [int(a) for v, a in block.markers if v == "exit"]
                _run_console(block, page, exits[0] if exits else 0)
        return len(runnable), len(runnable), None
    finally:
        os.chdir(before)


@pytest.mark.parametrize("page", RUN_PAGES, ids=[str(p.relative_to(DOCS)) for p in RUN_PAGES])
def test_page_runs(page: Path, tmp_path: Path) -> None:
    done, total, reason = run_page(page, tmp_path)
    assert total > 0 or page.name == "index.md", f"{page} has no runnable block"
    if reason:
        pytest.skip(f"{page.relative_to(DOCS)}: ran {done} of {total} blocks; stopped at {reason}")


def test_guides_exist() -> None:
    names = {p.name for p in (DOCS / "guides").glob("*.md")}
    assert {"flux-cnn-to-equinox.md", "jax-to-flux.md", "read-any-jld2.md", "schema-in-ci.md"} <= names


def test_every_public_name_is_in_the_api_reference() -> None:
    import treexchange

    documented = set()
    for page in (DOCS / "api").glob("*.md"):
        documented |= set(re.findall(r"^::: treexchange\.(\w+)\s*$", page.read_text(), re.MULTILINE))
    missing = sorted(set(treexchange.__all__) - documented)
    assert not missing, f"add `::: treexchange.NAME` to a page of docs/api/ for: {missing}"
    unknown = sorted(documented - set(treexchange.__all__))
    assert not unknown, f"docs/api/ documents names that are not public: {unknown}"


def test_block_parser_reads_markers_and_lines() -> None:
    text = (
        "intro\n"
        "<!-- test: shared a/b.jld2 -->\n"
        "<!-- test: requires treexchange.from_flux -->\n"
        "```python\n"
        "x = 1\n"
        "```\n"
        "text between\n"
        "```julia\n"
        "y = 2\n"
        "```\n"
    )
    first, second = blocks_of(text)
    assert (first.lang, first.source, first.line) == ("python", "x = 1\n", 5)
    assert first.markers == [("shared", "a/b.jld2"), ("requires", "treexchange.from_flux")]
    assert (second.lang, second.markers) == ("julia", [])


def test_a_failing_block_names_its_markdown_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nx = 1\nraise ValueError(x)\n```\n")
    with pytest.raises(ValueError) as info:
        run_page(page, tmp_path)
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(info.value.__traceback__)]
    assert (str(page), 5) in frames


@pytest.mark.parametrize("page", RUN_PAGES, ids=[str(p.relative_to(DOCS)) for p in RUN_PAGES])
def test_pages_use_public_names_only(page: Path) -> None:
    code = [b for b in blocks_of(page.read_text()) if b.lang == "python"]
    private = [f"{page.name}:{b.line}" for b in code if re.search(r"\b(treexchange|tx)\._[a-z]", b.source)]
    assert not private, f"guide code reaches into private modules at {private}"


def test_getting_started_inspect_sample_is_what_inspect_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page shows inspect's output for the file its first Python block writes: exactly that."""
    from treexchange._cli import main

    page = DOCS / "getting-started.md"
    blocks = blocks_of(page.read_text())
    monkeypatch.chdir(tmp_path)
    exec(next(b for b in blocks if b.lang == "python").source, {})
    console = next(
        b for b in blocks if b.lang == "console" and "$ treexchange inspect model.jld2\n" in b.source
    )
    lines = console.source.split("$ treexchange inspect model.jld2\n", 1)[1].split("$")[0].splitlines()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["inspect", "model.jld2"]) == 0
    assert out.getvalue().splitlines() == lines


def test_the_api_index_lists_every_public_name() -> None:
    import treexchange

    index = (DOCS / "api" / "index.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`(\w+)`", index))
    assert sorted(set(treexchange.__all__) - listed) == []
