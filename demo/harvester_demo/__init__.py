"""A local demo target site: the pages Harvester's examples, tests and benchmarks crawl.

It serves a product catalogue (listing pages with pagination, detail pages with every attribute type)
and one page per fault a real site throws at a crawler. It counts concurrent requests per client so a
test can assert that the global rate limits held.
"""

from harvester_demo.app import DemoSite, create_app

__all__ = ["DemoSite", "create_app"]
