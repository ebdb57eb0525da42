"""``make bench-smoke`` reaches every benchmark script, and none compares with another checkout.

:mod:`benchmarks.smoke` finds its scripts (every package under ``benchmarks/`` but the harness
and the GPU check); this reads the files and checks that every module with a ``__main__`` block is
one of them, a helper that another benchmark module starts by name, or the GPU check that
``make gpu-check-dry`` runs. Results name the commit that made them (git log on the file), so a
script measures this checkout alone: no ``git archive`` / worktree / ``--old-root`` modes.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.smoke import GROUPS, NOT_GROUPS, scripts

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__main__" else parts)


def _runnable() -> dict[str, Path]:
    """Every benchmark module with a ``__main__`` block, by dotted name."""
    return {
        _module(path): path
        for path in sorted(BENCHMARKS.rglob("*.py"))
        if 'if __name__ == "__main__"' in path.read_text(encoding="utf-8")
        and path.relative_to(BENCHMARKS).parts[0] != "harness"
    }


def test_the_groups_are_every_package_of_scripts() -> None:
    packages = {p.parent.name for p in BENCHMARKS.glob("*/__init__.py")}
    assert set(GROUPS) == packages - set(NOT_GROUPS)
    assert set(NOT_GROUPS) <= packages


def test_every_runnable_benchmark_module_is_reached() -> None:
    smoked = set(scripts(list(GROUPS)))
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    sources = {path: path.read_text(encoding="utf-8") for path in BENCHMARKS.rglob("*.py")}
    unreached = []
    for name, path in _runnable().items():
        if name in smoked or f"-m {name} " in makefile:
            continue
        # A helper (an app, an in-process runner) that another module starts by its name (in
        # its own package, the file's name is enough: peers_app("naive_app")).
        started = any(
            name in text or (other.parent == path.parent and f'"{path.stem}"' in text)
            for other, text in sources.items()
            if other != path
        )
        if not started:
            unreached.append(name)
    assert not unreached, f"not run by make bench-smoke (take --smoke via cli.parse): {unreached}"


def test_the_smoke_list_finds_a_new_script_and_skips_helpers() -> None:
    found = scripts(list(GROUPS))
    assert "benchmarks.attention.backends" in found  # a script: cli.parse and __main__
    assert "benchmarks.peers.inprocess" not in found  # a helper started by the peer runs
    assert "benchmarks.attention.common" not in found  # shared code, no __main__


def test_no_script_measures_another_checkout() -> None:
    words = ("git archive", "worktree", "--old-root", "old_root", "root=args.")
    found = [
        f"{path.relative_to(ROOT)}: {word}"
        for path in sorted(BENCHMARKS.rglob("*.py"))
        for word in words
        if word in path.read_text(encoding="utf-8")
    ]
    assert not found, found
