"""User regular expressions on a linear-time engine (RE2), so no pattern can backtrack for ever.

Python's ``re`` backtracks: ``/product/(\\w+-?)+/$`` took 21 s on one 26-character link while holding
the GIL (lease heartbeats stopped). RE2 guarantees time linear in the input; the price is that it
has no backreferences or lookarounds, so such patterns are refused when a source is validated.
"""

from __future__ import annotations

from functools import lru_cache

import re2

PatternError = re2.error
LINEAR_ENGINE = "RE2"

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the reason goes into the validation problem, not onto stderr
_OPTIONS.max_mem = 8 << 20  # bytes of compiled program: bounds huge repetition counts too


@lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> re2._Regexp:
    """The compiled pattern (cached: discovery asks for the same few patterns on every page).

    Raises :class:`ValueError` with a reader's reason when RE2 cannot run it.
    """
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except PatternError as error:
        detail = error.args[0].decode() if error.args and isinstance(error.args[0], bytes) else str(error)
        raise ValueError(
            f"not a regular expression the linear-time engine ({LINEAR_ENGINE}) can run: {detail} "
            "(backreferences and lookarounds such as (?=...) are not supported)"
        ) from None
