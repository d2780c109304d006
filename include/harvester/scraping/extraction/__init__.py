"""Extraction: a fetched page's text into a typed record. The page's structured data read once
(``structured``), selection, coercion to the attribute's type, the value rules (``validation``), the cap on
markup a parser is given (``markup``) and the figures a run's quality is measured by (``tally``).

It imports neither fetching nor the browser: it works on text, wherever the text came from.
"""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.scraping.extraction.blocks import (
        BUILTIN_MARKERS,
        BlockDetector,
        BlockMatch,
        detection_cpu_ms,
        recognise_block,
    )
    from harvester.scraping.extraction.extractor import (
        Extraction,
        ListingRecords,
        extract_listing_records,
        extract_record,
    )
    from harvester.scraping.extraction.markup import markup_refusal
    from harvester.scraping.extraction.structured import (
        DataBounds,
        PageData,
        StructuredDataError,
        gather,
        search,
        type_matches,
    )
    from harvester.scraping.extraction.tally import ExtractionTally

__all__ = [
    "BUILTIN_MARKERS", "BlockDetector", "BlockMatch", "DataBounds", "Extraction", "ExtractionTally", "ListingRecords",
    "PageData", "StructuredDataError", "detection_cpu_ms", "extract_listing_records", "extract_record", "gather",
    "markup_refusal", "recognise_block", "search", "type_matches"
]
__getattr__, __dir__ = lazy_face(__name__)
