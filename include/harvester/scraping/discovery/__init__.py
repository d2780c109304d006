"""Discovery: links and next pages from a listing page, sitemaps and feeds as a run's input.

It builds on fetching (sitemaps are fetched) and on extraction (links are selected from the page's markup).
"""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.scraping.discovery.links import Discovery, canonicalise_url, discover_links
    from harvester.scraping.discovery.next_request import add_next_request
    from harvester.scraping.discovery.sitemaps import SitemapDiscovery, SitemapFetcher, sitemap_discovery

__all__ = [
    "Discovery", "SitemapDiscovery", "SitemapFetcher", "add_next_request", "canonicalise_url", "discover_links",
    "sitemap_discovery"
]
__getattr__, __dir__ = lazy_face(__name__)
