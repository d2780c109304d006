"""How records are encoded to BSON: the one codec the data handler writes with and the change tracker
compares with (both import it from here, below them both)."""

from decimal import Decimal
from typing import Any

from bson import Decimal128
from bson.codec_options import CodecOptions, TypeRegistry

__all__ = ["OUTPUT_CODEC", "OUTPUT_TYPES"]

def _encode_decimal(value: Any) -> Any:
    """Exact decimals (``price`` amounts) as BSON Decimal128; called only for values BSON has no type for."""
    if isinstance(value, Decimal):
        return Decimal128(value)
    return value


# The output's codec: a fallback encoder costs nothing for the values BSON encodes natively.
OUTPUT_TYPES = TypeRegistry(fallback_encoder=_encode_decimal)
OUTPUT_CODEC = CodecOptions(type_registry=OUTPUT_TYPES, tz_aware=True)
