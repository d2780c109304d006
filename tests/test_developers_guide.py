"""DEVELOPERS.md's layout table stays current: every component of ``include/harvester`` has its row, and
every module a row names exists (a module's parenthesised remark is prose, not checked). The section "Where
a new kind of thing goes" names files and tests that exist."""

from __future__ import annotations

import re

import pytest
from harvester.settings import REPOSITORY_ROOT

pytestmark = pytest.mark.unit

GUIDE = REPOSITORY_ROOT / "DEVELOPERS.md"
PACKAGE = REPOSITORY_ROOT / "include" / "harvester"
DEMO = REPOSITORY_ROOT / "demo" / "harvester_demo"
BACKTICKED = re.compile(r"`([^`]+)`")
REMARK = re.compile(r"\([^()]*\)")


def layout_rows(text: str) -> dict[str, list[str]]:
    """component (``harvester.X``, or ``harvester_demo``) -> the modules its row names."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[1].startswith("`harvester"):
            continue
        component = BACKTICKED.findall(cells[1])[0]
        rows[component] = BACKTICKED.findall(REMARK.sub("", cells[2]))
    return rows


def components() -> set[str]:
    names = {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    names |= {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    return {f"harvester.{name}" for name in names}


def missing_modules(rows: dict[str, list[str]]) -> list[str]:
    missing = []
    for component, modules in rows.items():
        base = DEMO if component == "harvester_demo" else PACKAGE / component.removeprefix("harvester.")
        missing += [f"{component}: {module}" for module in modules
                    if not (base / f"{module}.py").exists() and not (base / module / "__init__.py").exists()]
    return missing


def test_every_component_has_its_row() -> None:
    assert components() - set(layout_rows(GUIDE.read_text(encoding="utf-8"))) == set()


def test_every_module_a_row_names_exists() -> None:
    assert missing_modules(layout_rows(GUIDE.read_text(encoding="utf-8"))) == []


def test_the_table_check_sees_a_stale_module_and_a_missing_component() -> None:
    rows = layout_rows("| c | `harvester.config` | `model` (`not_a_module` is prose), `gone` |\n")
    assert rows == {"harvester.config": ["model", "gone"]}
    assert missing_modules(rows) == ["harvester.config: gone"]
    assert "harvester.storage" in components() - set(rows)


def test_where_a_new_kind_of_thing_goes_names_files_that_exist() -> None:
    section = GUIDE.read_text(encoding="utf-8").split("## Where a new kind of thing goes", 1)[1].split("\n## ", 1)[0]
    # repository paths (a file, or a folder ending in /); bare names such as `commands.py` are prose
    paths = {token for token in BACKTICKED.findall(section)
             if "/" in token and re.fullmatch(r"[\w.-]+(/[\w.-]+)*(/|\.(py|md|json|yaml|lua|sh))", token)}
    assert len(paths) > 20, f"the section names too few files: {sorted(paths)}"
    assert sorted(path for path in paths if not (REPOSITORY_ROOT / path).exists()) == []
