"""Redis Lua scripts: contracts (KEYS, ARGV, reply by name), calls in pipelines, reply decoding.

A leaf: it imports no component. Each component owns its ``lua/`` folder and the contracts of its
scripts (the ``scripts.py`` beside the folder), and builds a :class:`Scripts` of only those it calls.
"""

from harvester.redis_scripts.calls import ScriptPipeline, Scripts
from harvester.redis_scripts.contracts import VARIADIC, ScriptContract, declare_script, optional_text, text

__all__ = [
    "VARIADIC", "ScriptContract", "ScriptPipeline", "Scripts", "declare_script", "optional_text", "text",
]
