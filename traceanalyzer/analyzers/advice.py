"""Advice text built from parts, in one place, so every analyzer's sentences read the same way."""

from __future__ import annotations

_ARTICLES = {"a", "an", "the", "one"}


def replace_with(replacement: str) -> str:
    """'Replace with X.' for a named replacement (code, a product); the instruction itself, as a sentence, when the
    replacement already is one ('keep the layout …' → 'Keep the layout ….')."""
    text = replacement.strip().rstrip(".")
    if not text:
        return ""
    first = text.split(" ", 1)[0]
    if first.isalpha() and first.islower() and first not in _ARTICLES:
        return sentence(text)
    return f"Replace with {text}."


def sentence(text: str) -> str:
    """Text as one sentence: capitalised first letter, one final full stop."""
    text = text.strip().rstrip(".")
    return text[:1].upper() + text[1:] + "." if text else ""
