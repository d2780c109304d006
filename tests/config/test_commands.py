"""`harvester validate`, `harvester sources` and `harvester schema`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from harvester.cli import main

from tests.config.helpers import MINIMAL, with_lines

pytestmark = pytest.mark.unit

HARVESTER = Path(sys.executable).parent / "harvester"


def test_validate_passes_the_committed_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "with problems" in err and " 0 with problems" in err


def test_validate_prints_each_problem_and_exits_non_zero(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text(MINIMAL)
    (tmp_path / "bad.yaml").write_text(with_lines("retries: -1", "rate_limit: {max_active: 0}").replace("shop", "bad"))
    result = subprocess.run([str(HARVESTER), "validate", str(tmp_path)], capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'bad.yaml'}:6: retries: Input should be greater than or equal to 0",
        f"{tmp_path / 'bad.yaml'}:7: rate_limit.max_active: Input should be greater than or equal to 1",
    ]
    assert "2 file(s): 1 valid, 1 with problems" in result.stderr


def test_validate_given_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(MINIMAL)
    assert main(["validate", "-q", str(good)]) == 0
    duplicate = tmp_path / "again.yaml"
    duplicate.write_text(MINIMAL)
    assert main(["validate", "-q", str(good), str(duplicate)]) == 1
    assert "duplicate source name 'shop'" in capsys.readouterr().out


def test_sources_lists_schedule_queue_and_limits(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sources"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SOURCE", "SCHEDULE", "QUEUE", "RENDER", "ACTIVE", "PER", "MIN", "BATCH", "LAG",
                                "RETRIES", "FILE"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert re.search(r"demo_shop\s+0 \*/6 \* \* \*\s+priority\s+http\s+8\s+600\s+50x20\s+6h\s+3", rows["demo_shop"])
    assert re.search(r"\s@daily\s+pageslots\s+browser\s", rows["demo_shop_browser"])


def test_schema_check_and_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--check"]) == 0
    target = tmp_path / "source.schema.json"
    assert main(["schema", "--check", "--output", str(target)]) == 1
    assert main(["schema", "--output", str(target)]) == 0
    assert main(["schema", "--check", "--output", str(target)]) == 0
