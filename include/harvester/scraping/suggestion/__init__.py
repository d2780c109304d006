"""`harvester suggest URL`: a first source YAML from what a page publishes, every choice explained.

What a page publishes for its own front end and for search engines is typed and outlives redesigns,
so it is read first: JSON-LD, then microdata, then a JSON blob in a ``<script>`` (``__NEXT_DATA__``,
``window.__NUXT__ = {...}``), then OpenGraph ``<meta>`` tags; only where none of those holds a field
are CSS selectors suggested, from the page's prominent single elements and repeated lists. A listing
page (``--listing``) gets the detail-link selector and ``follow`` pattern from its largest group of
links of one shape, the next-page selector, and ``listing.records`` when its items carry the fields
themselves (one request per listing page instead of one per item). A JSON response gets ``content:
json`` with ``json:`` selectors, records of its largest list of objects and its ``next`` link; a JSON API
behind POST (``--post-json BODY``) gets that body as its first request and the rule of its next request
(``listing.next``: a cursor, page or offset, ``api_paging``).

Every suggested attribute is then extracted from the very page it was suggested from; one that does
not give a value there is left out (and named in a comment), so ``harvester try`` on the same URL
returns a record with every suggested attribute, and the YAML is validated before it is printed.

The modules, one concern each: ``choices`` (what a suggestion is made of: attributes, names, types, the
key), ``data`` (what structured data offers), ``markup`` (CSS for prominent and repeated elements),
``listing`` (a listing page's links, next page and records), ``writer`` (the YAML with its comment
lines) and ``analysis`` (fetch, read, check against the page); the command is
:mod:`harvester.scraping.suggest`.
"""

from harvester.scraping.suggestion.analysis import SuggestError, suggest
from harvester.scraping.suggestion.choices import Choice, Suggestion
from harvester.scraping.suggestion.writer import render_yaml

__all__ = ["Choice", "SuggestError", "Suggestion", "render_yaml", "suggest"]
