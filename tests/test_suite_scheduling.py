"""How `make test` shares the suite between pytest-xdist workers (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import LONGEST_FIRST, files_with_shared_fixtures

pytestmark = pytest.mark.unit


def test_files_with_a_module_fixture_are_one_work_unit_each(tmp_path: Path) -> None:
    shared = files_with_shared_fixtures()
    assert {"tests/services/test_cluster_topology.py", "tests/test_dag_integrity.py"} <= shared
    assert "tests/producer/test_dag_end_to_end.py" not in shared  # a session fixture: once per worker anyway
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_a.py").write_text("import pytest\n\n@pytest.fixture(scope='class')\ndef f(): ...\n")
    (tests / "test_b.py").write_text("import pytest\n\n@pytest.fixture\ndef f(): ...\n")
    assert files_with_shared_fixtures(tests) == {"tests/test_a.py"}


def test_the_longest_tests_named_first_exist() -> None:
    root = Path(__file__).resolve().parents[1]
    for prefix in LONGEST_FIRST:
        assert (root / prefix.split("::", 1)[0]).is_file(), prefix
