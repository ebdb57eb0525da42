"""Readers for the deployment files: compose YAML (with its ``!reset``/``!override`` tags), the
Dockerfile's instructions and ``.dockerignore`` matching, so the tests can check them statically
(there is no Docker engine where the tests run)."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
# The alerts docker/prometheus/alerts.yml must define, written out here rather than read from it,
# so a rule that goes missing (or a new one nobody tests) fails.
ALERTS = frozenset(
    {
        "AttnserveLatencySLO",
        "AttnserveQueueNearFull",
        "AttnserveErrorRate",
        "AttnserveNotReady",
        "AttnserveHostMemoryNearLimit",
        "AttnserveDeviceMemoryNearLimit",
    }
)


@dataclass(frozen=True)
class Tagged:
    """A value carrying a compose merge tag (``!reset``, ``!override``)."""

    tag: str
    value: Any


class ComposeLoader(yaml.SafeLoader):
    """SafeLoader that keeps compose's custom tags instead of refusing them."""


def _construct_tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Tagged:
    value: Any
    if isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_scalar(node)  # type: ignore[arg-type]
    return Tagged("!" + suffix, value)


ComposeLoader.add_multi_constructor("!", _construct_tagged)


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as handle:
        return yaml.load(handle, Loader=ComposeLoader)


# ----------------------------------------------------------------------------- Dockerfile


@dataclass(frozen=True)
class Instruction:
    stage: int  # index of the FROM it belongs to
    keyword: str
    args: str


def dockerfile_instructions(path: Path) -> list[Instruction]:
    """Instructions with line continuations joined and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    out, stage = [], -1
    for line in lines:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        out.append(Instruction(stage, keyword, args.strip()))
    return out


# ----------------------------------------------------------------------------- .dockerignore


def dockerignore_patterns(path: Path) -> list[tuple[bool, str]]:
    """(exclude?, pattern) in file order."""
    patterns = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line[1:] if negated else line
        patterns.append((not negated, pattern.strip().strip("/")))
    return patterns


def _to_regex(pattern: str) -> str:
    """Docker's .dockerignore syntax (Go ``filepath.Match`` per component, ``**`` for any
    number of folders) as a Python regex."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[" and "]" in pattern[i:]:
            j = pattern.index("]", i)
            out, i = out + pattern[i : j + 1], j + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out


def _matches(pattern: str, path: str) -> bool:
    return re.fullmatch(_to_regex(pattern), path) is not None


def excluded(patterns: list[tuple[bool, str]], path: str) -> bool:
    """Whether ``path`` (relative, '/'-separated) is left out of the build context: the last
    pattern matching the path or one of its parent folders decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for exclude, pattern in patterns:
        if any(_matches(pattern, c) for c in candidates):
            verdict = exclude
    return verdict


def prometheus_binary(name: str) -> str:
    """The path of Debian's ``prometheus`` / ``promtool`` (package ``prometheus``). Missing, the
    test fails rather than skips: ``make test`` installs the package (``make test-deps``), so a
    machine without it did not run the documented set-up, and a skip would hide untested alerts
    and dashboards."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: run `make test-deps` (or `make test`, which runs it), "
            "or apt-get install prometheus (Debian/Ubuntu)"
        )
    return path
