"""The worker fixtures (sources written to YAML, an in-process batch runner) for the metrics tests."""

from tests.workers.conftest import crawl, runner, worker_settings, write_source

__all__ = ["crawl", "runner", "worker_settings", "write_source"]
