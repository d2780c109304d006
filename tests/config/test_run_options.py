"""What a manual trigger may override for one run."""

from __future__ import annotations

import pytest
from harvester.config.run_options import RunOptions
from pydantic import ValidationError

from tests.config.helpers import source, with_lines

pytestmark = pytest.mark.unit


def test_without_params_a_run_uses_the_source_batch_settings() -> None:
    options = RunOptions.for_run(source(with_lines("batch: {size: 20, max_packages: 3}")))
    assert (options.batch_size, options.max_packages, options.urls) == (20, 3, [])


def test_params_override_batch_size_max_packages_and_urls() -> None:
    options = RunOptions.for_run(source(), {"batch_size": 5, "max_packages": 2, "urls": ["https://a.example/1", " "]})
    assert (options.batch_size, options.max_packages, options.urls) == (5, 2, ["https://a.example/1"])


def test_null_params_keep_the_source_settings() -> None:
    options = RunOptions.for_run(source(), {"batch_size": None, "max_packages": None, "urls": None})
    assert (options.batch_size, options.max_packages) == (100, 100)


@pytest.mark.parametrize("params", [{"batch_size": 0}, {"batch_size": 10_001}, {"urls": ["ftp://a.example/x"]}])
def test_bad_params_are_rejected(params: dict) -> None:
    with pytest.raises(ValidationError):
        RunOptions.for_run(source(), params)
