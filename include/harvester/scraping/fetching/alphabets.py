"""Which letters each language is written with, read from the Unicode CLDR data babel ships (the names of
languages, countries, scripts, currencies, months and days in that language): the one signal that tells
single-byte charsets apart, since windows-1250, -1252 and -1257 all read a French page without a stray
byte, and only one reads it in French letters.

Read once per process, on the first page that needs it (babel loads each locale's data: about 0.1 s of CPU
per language), never for the pages that declare their charset or are UTF-8.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections import Counter

from babel import Locale

__all__ = ["LEGACY_LANGUAGES", "alphabet_share", "alphabets"]

# languages whose pages were written in single-byte legacy charsets (every WHATWG single-byte charset has
# at least one); English stands for every ASCII-only language
LEGACY_LANGUAGES = (
    "en", "fr", "de", "es", "pt", "it", "nl", "da", "sv", "nb", "fi", "is", "ga", "ca", "eu", "gl", "cy", "mt",
    "af", "sq", "pl", "cs", "sk", "hu", "ro", "hr", "sl", "bs", "et", "lv", "lt", "tr", "az", "vi", "ru", "uk",
    "be", "bg", "sr", "mk", "kk", "el", "he", "ar", "fa", "ur", "th",
)
MIN_OCCURRENCES = 2  # a letter seen fewer times is a foreign name's (Åland in French), not the language's
# marks common in text of any language, which neither help nor hurt a reading
_WORD = re.compile(r"[^\s\d_!-/:-@\[-`{-~]+")  # a run of letters and what is not ASCII: "URL-адрес" is two
# punctuation, spaces and format marks (the right-to-left marks of Hebrew and Arabic text): no one's letters
NOT_COUNTED = frozenset({"Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Zs", "Zl", "Zp", "Cf"})
_CAPITAL_INSIDE = re.compile(r"[^\W\d_](?<=[^\W\d_A-Z])(?=[A-Z\u00c0-\u00de\u0391-\u03ab\u0400-\u042f])")
NEUTRAL = frozenset("\u00a0\u20ac\u2014\u2013\u00ab\u00bb\u201c\u201d\u201e\u2018\u2019\u201a\u2026\u2022\u00b7"
                    "\u00a9\u00ae\u00b0\u00a7\u00b6\u2020\u2021\u2030\u2122\u00d7")


def _lower(character: str) -> str:
    lowered = character.lower()
    return lowered if len(lowered) == 1 else character  # İ lowers to two code points


def _letters(text: str) -> list[str]:
    return [_lower(character) for character in text if not character.isascii() and character.isalpha()]


@functools.cache
def alphabets() -> tuple[Counter[str], ...]:
    """Each legacy language's non-ASCII letters, lower-cased, with how often CLDR's names use each."""
    found = []
    for code in LEGACY_LANGUAGES:
        locale = Locale.parse(code)
        seen: Counter[str] = Counter()
        for table in (locale.languages, locale.territories, locale.scripts):
            for name in table.values():
                seen.update(_letters(name))
        for names in (locale.months, locale.days):
            for context in names.values():
                for width in context.values():
                    for name in width.values():
                        seen.update(_letters(name))
        found.append(Counter({letter: times for letter, times in seen.items() if times >= MIN_OCCURRENCES}))
    return tuple(found)


def _script(letter: str) -> str:
    return unicodedata.name(letter, "UNKNOWN").split(" ", 1)[0]


def _cosine(reading: Counter[str], language: Counter[str]) -> float:
    dot = sum(times * language[letter] for letter, times in reading.items())
    norms = math.sqrt(sum(times * times for times in reading.values())) * math.sqrt(
        sum(times * times for times in language.values()))
    return dot / norms if norms else 0.0


def alphabet_share(text: str) -> tuple[float, float]:
    """How wholly ``text``'s non-ASCII characters read as one language's letters: the share of them that
    are letters of the language covering most, in words of one script and one case pattern, and how alike
    their frequencies are to that language's (cosine). Punctuation does not count; symbols, digits and
    control characters where letters were count against, as do letters in a word that mixes scripts
    (``Crиme``: a French page read as windows-1251, whose every high byte is a Cyrillic letter) or has a
    capital after a small letter (``пРИВЕт``: Russian read as KOI8-R). (1.0, 1.0) for a text with none."""
    counted: Counter[str] = Counter()
    against = 0
    for word in _WORD.findall(text):
        if word.isascii():
            continue
        scripts = {_script(character) for character in word if character.isalpha()}
        mixed = len(scripts) > 1 or _CAPITAL_INSIDE.search(word) is not None
        for character in word:
            if character.isascii() or character in NEUTRAL or unicodedata.category(character) in NOT_COUNTED:
                continue
            if mixed or not (character.isalpha() or unicodedata.category(character)[0] == "M"):
                against += 1
            else:
                counted[_lower(character)] += 1
    total = sum(counted.values()) + against
    if not total:
        return 1.0, 1.0
    best = max(alphabets(), key=lambda language: sum(times for letter, times in counted.items() if letter in language))
    return sum(times for letter, times in counted.items() if letter in best) / total, _cosine(counted, best)
