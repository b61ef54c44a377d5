"""``import treexchange`` loads none of the heavy parts; reading a file (``open``, or ``load`` without
``like=``/``sharding=``) loads the codec only (the CPU-time figure is in docs/performance.md,
measured by benchmarks/bench_import.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import treexchange

HEAVY = ("jax", "equinox", "flax", "torch", "pydantic", "safetensors", "orbax", "h5py")
OWN_LATER = ("treexchange._save", "treexchange._jld2._writer", "treexchange._bridge", "treexchange._port")


def _modules_after(code: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def _loaded(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_import_treexchange_loads_no_heavy_package_and_none_of_its_layers() -> None:
    modules = _modules_after("import treexchange")
    assert _loaded(modules, HEAVY) == []
    assert _loaded(modules, OWN_LATER) == []
    assert _loaded(modules, ("treexchange._reader", "treexchange._hdf5", "numpy")) == []


def test_reading_a_file_loads_the_codec_but_not_the_writer_bridge_or_porting(tmp_path: object) -> None:
    path = f"{tmp_path}/a.jld2"
    treexchange.save(path, a=treexchange.NamedTuple(w=[1.0, 2.0]))
    modules = _modules_after(f"import treexchange\nwith treexchange.open({path!r}) as f: f['a'].read()")
    assert "treexchange._reader" in modules
    assert _loaded(modules, HEAVY) == []
    assert _loaded(modules, OWN_LATER) == []


def test_load_without_a_template_loads_neither_the_bridge_nor_jax(tmp_path: object) -> None:
    """``tx.load`` reads like ``open``; the JAX bridge comes in only with ``like=`` / ``sharding=``."""
    path = f"{tmp_path}/a.jld2"
    treexchange.save(path, a=treexchange.NamedTuple(w=[1.0, 2.0]), b=[1, 2])
    for call in (f"treexchange.load({path!r})", f"treexchange.load({path!r}, 'a', mmap=False)"):
        modules = _modules_after(f"import treexchange\n{call}")
        assert "treexchange._file" in modules and "treexchange._reader" in modules, call
        assert _loaded(modules, HEAVY) == [], call
        assert _loaded(modules, OWN_LATER) == [], call
    # and with a template it does come in (the check above is not vacuous)
    modules = _modules_after(f"import treexchange\ntreexchange.load({path!r}, 'b', like=[0, 0])")
    assert "treexchange._bridge" in modules


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in treexchange.__all__:
        assert getattr(treexchange, name) is not None, name
    assert set(treexchange.__all__) <= set(dir(treexchange))


def test_no_test_reaches_a_private_module_as_an_attribute() -> None:
    """``tx._port._fromlux`` exists only once something imported it (the package loads its modules
    lazily, for the public names): a test written so passes in a full run and fails alone. A test
    imports a private module by name before reaching it (``from treexchange._port._fromlux import
    ...``, or ``import treexchange._save`` then ``treexchange._save.convert``)."""
    import re  # only this check reads source text
    from pathlib import Path

    use = re.compile(r"(?<![\w.~`:\"'])(tx|treexchange)((?:\._[a-z]\w*)+)\.(?!_)\w")
    here = Path(__file__)
    offenders = []
    for path in sorted(here.parent.rglob("*.py")):
        if path == here:
            continue
        text = path.read_text(encoding="utf-8")
        # every dotted treexchange name on an import line (``import sys, treexchange._save``)
        imports = re.findall(r"\bimport ([^\n]+)", text)
        imported = {m for line in imports for m in re.findall(r"treexchange[\w.]+", line)}
        for n, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            if code.lstrip().startswith(("import ", "from ")):
                continue
            for match in use.finditer(code):
                module = "treexchange" + match.group(2)
                if module not in imported:
                    offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert offenders == []
