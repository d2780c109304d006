"""HTML refused before lxml parses it: libxml2 checks an element's attributes for duplicates in
quadratic time (one element with 120,000 attributes took 71 s of a worker's CPU) and builds a node per element,
so the page's own text is measured first, in linear time, against two settings:

- ``max_elements_per_page``: the markup openings of the page (every ``<`` that does not start a closing tag: an
  upper bound on its elements, counted in C by ``str.count``);
- ``max_attributes_per_element``: one RE2 search for a start tag with more attributes than that (quoted values
  read as values, so ``>`` or ``<`` inside them do not split the tag). Attributes are counted however an HTML
  tokenizer separates them: by whitespace, by ``/``, or by nothing at all right after a quoted value
  (``a0=""a1=""`` is two attributes to libxml2 as to a browser); a name or an unquoted value is never split, so
  one long attribute is never counted as many. RE2 runs in linear time; the pattern is compiled once per cap.

A refused page fails as ``parse_error`` with the reason (dead-lettered: the same page would be refused again).
"""

from __future__ import annotations

from functools import lru_cache

import re2

__all__ = ["markup_refusal"]

RE2_MAX_REPEAT = 1000  # RE2 refuses a counted repetition above this (so the setting stays below it)
_NAME = r"""[^\s"'=<>/]+"""
# an attribute with its separator after it: an unquoted or valueless one needs one (whitespace or /), a quoted one
# may be followed by the next name directly
_AFTER_UNQUOTED = r"(?:[\s/]+|>)"  # the tag's end counts the last one too
_ATTRIBUTE = (rf"""(?:{_NAME}(?:\s*=\s*(?:"[^"]*"[\s/]*|'[^']*'[\s/]*|[^\s"'=<>`]+{_AFTER_UNQUOTED})"""
              rf"""|{_AFTER_UNQUOTED}))""")


@lru_cache(maxsize=8)
def _wider_than(max_attributes: int) -> re2._Regexp:
    """A start tag with more than ``max_attributes`` attributes."""
    wanted = min(max_attributes + 1, RE2_MAX_REPEAT)
    options = re2.Options()
    options.max_mem = 64 << 20
    return re2.compile(rf"<[A-Za-z][^\s/>]*[\s/]+{_ATTRIBUTE}{{{wanted}}}", options)


def markup_refusal(text: str, max_attributes: int, max_elements: int) -> str | None:
    """Why ``text`` is not parsed (too many elements, or an element with too many attributes), or None."""
    openings = text.count("<") - text.count("</")
    if openings > max_elements:
        return (f"page refused before parsing: {openings} elements or more, over max_elements_per_page "
                f"({max_elements})")
    # an element of N attributes takes at least 2N characters; the search costs about 25 ns a character
    if len(text) > 2 * max_attributes and _wider_than(max_attributes).search(text):
        return (f"page refused before parsing: an element with more than {max_attributes} attributes "
                f"(max_attributes_per_element)")
    return None
