"""The README stays a front door and the docs site builds: short README, its links into docs/
resolve (files and anchors), mkdocs.yml's nav and docs/ hold the same pages, and
``mkdocs build --strict`` passes with the generated settings table and OpenAPI schema in it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 300
# Markdown links and images: [text](target) / ![alt](target); targets without spaces.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"[`*_]", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    prose = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*$", prose, re.MULTILINE)}


def readme_doc_links() -> list[str]:
    prose = FENCE.sub("", README.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(prose) if t.startswith("docs/")]


def nav_pages(nav: Any) -> list[str]:
    """Every Markdown path in a (nested) mkdocs nav."""
    if isinstance(nav, str):
        return [nav] if nav.endswith(".md") else []
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []


def mkdocs_config() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def test_readme_is_at_most_300_lines() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_readme_links_into_docs_resolve() -> None:
    links = readme_doc_links()
    assert links, "README.md links nowhere into docs/"
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.is_file():
            broken.append(f"{link}: no file {path}")
        elif anchor and anchor not in anchors(target):
            broken.append(f"{link}: no heading with anchor #{anchor} in {path}")
    assert not broken, "\n".join(broken)


def test_nav_and_docs_folder_hold_the_same_pages() -> None:
    nav = nav_pages(mkdocs_config()["nav"])
    missing = [page for page in nav if not (DOCS / page).is_file()]
    assert not missing, f"pages in mkdocs.yml's nav that do not exist: {missing}"
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert not on_disk - set(nav), f"pages under docs/ left out of the nav: {on_disk - set(nav)}"
    assert len(nav) == len(set(nav)), "a page appears twice in the nav"


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    # mkdocs and the Material theme come with the dev extra (via [docs]): never skipped.
    from service.settings import Settings

    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr

    # The settings table is generated from Settings: every field's env var is on the page.
    settings_page = (site / "serving" / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "attnserve:settings" not in settings_page
    absent = [
        name for name in Settings.model_fields if f"ATTNSERVE_{name.upper()}" not in settings_page
    ]
    assert not absent, f"settings missing from the generated table: {absent}"

    # The OpenAPI schema is written into the site and rendered into the API page.
    schema = json.loads((site / "api" / "openapi.json").read_text(encoding="utf-8"))
    assert {"/encode", "/v1/embeddings", "/forecast", "/models"} <= set(schema["paths"])
    api_page = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert "attnserve:openapi" not in api_page
    for name in schema["components"]["schemas"]:
        assert f'id="{name.lower()}"' in api_page, f"schema {name} not rendered"

    # The benchmark plots are published, not copied into docs/.
    plots = {p.name for p in (ROOT / "benchmarks" / "results").glob("*.png")}
    assert plots
    assert plots <= {p.name for p in (site / "performance" / "plots").glob("*.png")}
