"""Planning a source's sitemaps: they are the run's first packages, of kind ``sitemap``.

The workers fetch them like any page (admitted, rate-limited, leased, retried) and turn what they list
into detail tasks of the same package (:mod:`harvester.workers.sitemaps`). Sitemaps are always due, as
listing pages are: the pages they list carry the harvesting lag and the ``lastmod`` check. A manual run
with explicit ``urls`` plans no sitemaps. A plan that died half-way made them first, so it never makes
them twice (the packages' unique index would refuse them anyway).
"""

from __future__ import annotations

from harvester.config import SourceConfig
from harvester.storage import PackageStore
from harvester.urls import canonicalise_url


def planned_sitemaps(source: SourceConfig) -> list[str]:
    """The sitemap URLs a run starts from, canonical, each once."""
    urls = (canonicalise_url(url) for url in source.input.sitemap_urls(source.input.seeds))
    return list(dict.fromkeys(url for url in urls if url is not None))


def plan_sitemaps(packages: PackageStore, source: SourceConfig, run_id: str, first_package_id: int,
                  batch_size: int) -> tuple[int, int]:
    """Create the sitemap packages from ``first_package_id`` on; (sitemaps planned, next package id)."""
    urls = planned_sitemaps(source)
    if not urls:
        return 0, first_package_id
    chunks = [urls[start:start + batch_size] for start in range(0, len(urls), batch_size)]
    numbered = [(first_package_id + offset, chunk) for offset, chunk in enumerate(chunks)]
    packages.create_packages(source.name, run_id, numbered, "sitemap")
    return len(urls), first_package_id + len(chunks)
