"""How a visitor from a source's country presents itself: its ``locale``, ``timezone_id`` and ``Accept-Language``.

A page browsed through the MY proxy by a context speaking ``en-US`` in the host's time zone is a mix real sites
notice (mixed-market pages, prices of another market). So every browser context and every HTTP request of a
source with a ``country`` carries that country's defaults from :data:`COUNTRY_VISITORS` (a small table: the
countries Harvester harvests and their main neighbours), and a source may override each value (``visitor:``).
A country not in the table keeps Harvester's own defaults (``en-US``, the host's time zone).

``accept_language`` is what HTTP requests send; a browser context sends its ``locale`` as Accept-Language
(Playwright derives the one from the other, over any header set on the context).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from harvester.config.attributes import StrictModel, TimeZoneName


def check_language_tag(value: str) -> str:
    """A BCP 47 tag as browsers take it (``en-MY``, hyphenated: babel's own names use ``_``) that babel knows."""
    from babel import Locale, UnknownLocaleError

    try:
        Locale.parse(value, sep="-")
    except (UnknownLocaleError, ValueError, TypeError) as error:
        raise ValueError(f"not a locale babel knows: {value!r} ({error})") from None
    return value


LanguageTag = Annotated[str, AfterValidator(check_language_tag)]


class Visitor(StrictModel):
    """The locale, time zone and Accept-Language a source's pages are asked for (each None: the country's)."""

    locale: LanguageTag | None = Field(default=None, description="A BCP 47 locale, e.g. ms-MY (browser contexts).")
    timezone_id: TimeZoneName | None = Field(default=None, description="An IANA time zone, e.g. Asia/Kuala_Lumpur.")
    accept_language: str | None = Field(default=None, min_length=1, max_length=200,
                                        description="HTTP requests' Accept-Language, e.g. en-MY,en;q=0.9,ms;q=0.8.")

    def over(self, defaults: Visitor | None) -> Visitor:
        """These values where given, the ``defaults``' elsewhere."""
        if defaults is None:
            return self
        return Visitor(locale=self.locale or defaults.locale, timezone_id=self.timezone_id or defaults.timezone_id,
                       accept_language=self.accept_language or defaults.accept_language)


def _visitor(locale: str, timezone_id: str, accept_language: str) -> Visitor:
    return Visitor.model_construct(locale=locale, timezone_id=timezone_id, accept_language=accept_language)


COUNTRY_VISITORS: dict[str, Visitor] = {
    "SG": _visitor("en-SG", "Asia/Singapore", "en-SG,en;q=0.9,zh-SG;q=0.8"),
    "MY": _visitor("en-MY", "Asia/Kuala_Lumpur", "en-MY,en;q=0.9,ms;q=0.8"),
    "ID": _visitor("id-ID", "Asia/Jakarta", "id-ID,id;q=0.9,en;q=0.8"),
    "TH": _visitor("th-TH", "Asia/Bangkok", "th-TH,th;q=0.9,en;q=0.8"),
    "VN": _visitor("vi-VN", "Asia/Ho_Chi_Minh", "vi-VN,vi;q=0.9,en;q=0.8"),
    "PH": _visitor("en-PH", "Asia/Manila", "en-PH,en;q=0.9,fil;q=0.8"),
    "HK": _visitor("zh-HK", "Asia/Hong_Kong", "zh-HK,zh;q=0.9,en;q=0.8"),
    "TW": _visitor("zh-TW", "Asia/Taipei", "zh-TW,zh;q=0.9,en;q=0.8"),
    "JP": _visitor("ja-JP", "Asia/Tokyo", "ja-JP,ja;q=0.9,en;q=0.8"),
    "KR": _visitor("ko-KR", "Asia/Seoul", "ko-KR,ko;q=0.9,en;q=0.8"),
    "IN": _visitor("en-IN", "Asia/Kolkata", "en-IN,en;q=0.9,hi;q=0.8"),
    "AU": _visitor("en-AU", "Australia/Sydney", "en-AU,en;q=0.9"),
    "GB": _visitor("en-GB", "Europe/London", "en-GB,en;q=0.9"),
    "DE": _visitor("de-DE", "Europe/Berlin", "de-DE,de;q=0.9,en;q=0.8"),
    "FR": _visitor("fr-FR", "Europe/Paris", "fr-FR,fr;q=0.9,en;q=0.8"),
    "US": _visitor("en-US", "America/New_York", "en-US,en;q=0.9"),
}


def visitor_of(country: str | None, override: Visitor | None = None) -> Visitor | None:
    """The visitor a source presents: the source's ``visitor`` over its country's defaults; None for neither."""
    defaults = COUNTRY_VISITORS.get(country) if country else None
    return override.over(defaults) if override is not None else defaults
