"""What answers to coding agents are measured in: an approximate token count, and the budgets they keep.

Tokens are counted as characters / ``CHARS_PER_TOKEN``, rounded up. The common BPE tokenizers (cl100k, o200k)
average about 4 characters per token on English and about 3 on code-like names (kernel signatures, paths), so the
count errs high: a text within its budget here fits it on those tokenizers.
"""

from __future__ import annotations

import math

CHARS_PER_TOKEN = 3
"""The approximation: one token per this many characters."""
DIGEST_BUDGET = 2000
"""Tokens a digest (``--format digest``, ``Trace.digest``, the MCP ``open_trace``) fits in unless told otherwise."""
LEAST_DIGEST_BUDGET = 500
"""The smallest budget a digest can be asked for: the trace and step lines, the section ids and what was left out."""
ANSWER_BUDGET = 4000
"""Tokens one answer of the MCP server's other tools fits in."""


def tokens(text: str) -> int:
    """The approximate number of tokens of a text: characters / ``CHARS_PER_TOKEN``, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)
