"""Text normalization: Unicode NFKC, case folding, boilerplate removal, token canonicalization.

The output is a canonical form in which tokens (runs of word characters) are separated by single
spaces, with no leading or trailing space. Word shingles are runs of consecutive tokens of it and
character shingles are runs of its code points, so the same normalized text always yields the
same shingles, in Python and in the compiled kernels.
"""

from __future__ import annotations

import re
import unicodedata

from stream_dedupe.config import NormalizationConfig

# Anything that is not a word character separates tokens: whitespace and punctuation alike, so a
# re-rendered page whose quotes, bullets or line breaks changed still normalizes to the same text.
_NON_WORD = re.compile(r"[\W_]+")


class Normalizer:
    """Turns raw document text into the canonical normalized form.

    Args:
        config: Boilerplate removal settings.
    """

    def __init__(self, config: NormalizationConfig | None = None) -> None:
        self.config = config or NormalizationConfig()
        flags = re.MULTILINE
        self._strip = [re.compile(p, flags) for p in self.config.strip_patterns]
        self._header = [re.compile(p) for p in self.config.header_patterns]
        self._footer = [re.compile(p) for p in self.config.footer_patterns]

    def normalize(self, text: str) -> str:
        """Return the normalized form of ``text``.

        Args:
            text: The raw document text.

        Returns:
            Tokens joined by single spaces; empty when the text has no word characters.
        """
        if not text.isascii():
            text = unicodedata.normalize("NFKC", text)
        text = text.casefold()
        if self._header or self._footer:
            text = self._drop_header_footer(text)
        for pattern in self._strip:
            text = pattern.sub(" ", text)
        return _NON_WORD.sub(" ", text).strip()

    def _drop_header_footer(self, text: str) -> str:
        lines = text.splitlines()
        start, end = 0, len(lines)
        while start < end and (not lines[start].strip() or _matches_any(self._header, lines[start])):
            start += 1
        while end > start and (not lines[end - 1].strip() or _matches_any(self._footer, lines[end - 1])):
            end -= 1
        return "\n".join(lines[start:end])


def _matches_any(patterns: list[re.Pattern[str]], line: str) -> bool:
    return any(p.search(line) for p in patterns)
