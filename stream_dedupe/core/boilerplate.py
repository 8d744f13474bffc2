"""Learned boilerplate: lines that recur across many documents of one ``source`` are stripped.

Templated chrome (navigation, footers, mail headers, licence blocks) makes unrelated documents
of one site look alike. The learner counts, per source, in how many documents each line occurs
(by a 64-bit hash of its normalized form); once a line has been seen in ``min_docs`` documents
it is learned, and later documents of that source are shingled without it.

Learning is **retroactive**: until a line is learned its count keeps the ids of the documents that
carried it, and when it is learned those earlier carriers are handed back to the engine
(:attr:`BoilerplateLearner.pending`), which signs and decides them again without the line. So
every stored document is stripped with the same learned set, whatever the arrival order: the
first carriers of a footer no longer keep it, and a copy read before a line was learned matches a
copy read after it.

Counts live in the state's ``boilerplate`` namespace (changelogged with the rest in the worker) as
``[count, [carrier ids]]`` until learned and ``[count, source, line]`` after; the learned set is
kept in memory and rebuilt from the counts when the state is opened.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Any

import mmh3
import orjson

from stream_dedupe.config import BoilerplateConfig
from stream_dedupe.core.lineform import ascii_form
from stream_dedupe.storage.state import StateView, dumps

_NON_WORD = re.compile(r"[\W_]+")
NAMESPACE = "boilerplate"
#: A line of a text: ``(line with its end, comparable form, state key or None when not counted)``.
Line = tuple[str, str, bytes | None]


def _line_form(line: str) -> str:
    """A line's comparable form: the same rules as document normalization, for one line."""
    if line.isascii():  # the same result as the regex below (for ASCII, word characters are [A-Za-z0-9_])
        return ascii_form(line)
    line = unicodedata.normalize("NFKC", line)
    return _NON_WORD.sub(" ", line.casefold()).strip()


def _has_tokens(form: str, tokens: int) -> bool:
    """True if ``form`` (words separated by single spaces) has at least ``tokens`` words.

    The same as ``form.count(" ") + 1 >= tokens`` without scanning a long line to its end.
    """
    at = -1
    for _ in range(tokens - 1):
        at = form.find(" ", at + 1)
        if at < 0:
            return False
    return True


def line_key(source: str, form: str) -> bytes:
    """State key of a line of a source: 8 bytes of MurmurHash3 x64 over source, NUL, line."""
    return mmh3.hash_bytes(f"{source}\0{form}".encode())[:8]


class BoilerplateLearner:
    """Strips learned lines and counts the others.

    Args:
        config: Learning settings.
        state: The engine's state view (counts are staged with the batch and committed with it).

    """

    def __init__(self, config: BoilerplateConfig, state: StateView) -> None:
        self.config = config
        self.state = state
        self.learned: set[bytes] = set()
        self.stripped_lines = 0
        #: Ids of documents that carried a line when it was learned: to be signed again.
        self.pending: set[str] = set()
        for key, raw in state.store.items(NAMESPACE):
            if orjson.loads(raw)[0] >= config.min_docs:
                self.learned.add(key)

    def line_forms(self, text: str, source: str | None) -> list[Line]:
        """Each line of ``text`` with its form and its state key (None: too short to count or strip)."""
        source = source or ""
        out: list[Line] = []
        for line in text.splitlines(keepends=True):
            form = _line_form(line)
            if not form or not _has_tokens(form, self.config.min_tokens):
                out.append((line, form, None))
            else:
                out.append((line, form, line_key(source, form)))
        return out

    def strip_and_count(
        self, text: str, source: str | None, count: bool = True, doc_id: str = "", lines: list[Line] | None = None
    ) -> str:
        """Return ``text`` without its learned lines; then count its lines for this source.

        A text with no words left once its learned lines are gone is returned whole (an empty
        page would otherwise be dropped as ``empty-text``).

        Args:
            text: The raw document text.
            source: The document's ``source`` (documents without one share a pool).
            count: False for a document already counted (a re-crawl of a known id), so that
                re-crawling one page never turns its own lines into boilerplate.
            doc_id: The document, remembered as a carrier of its lines until they are learned.
            lines: ``line_forms(text, source)`` when already computed (a batch computes them
                first, to read the counts of all its lines with one multi-get).

        """
        source = source or ""
        kept: list[str] = []
        seen: dict[bytes, str] = {}
        stripped = 0
        words = False
        for line, form, key in self.line_forms(text, source) if lines is None else lines:
            if key is None:
                kept.append(line)
                words = words or bool(form)
                continue
            if key in self.learned:
                stripped += 1
                continue
            kept.append(line)
            words = True
            seen.setdefault(key, form)
        if count:
            self._count(seen, source, doc_id)
        if not words or not stripped:
            # a document made only of learned lines keeps them: stripping never empties a page
            return text
        self.stripped_lines += stripped
        return "".join(kept)  # line ends kept: header/footer patterns still see the same lines

    def _count(self, seen: dict[bytes, str], source: str, doc_id: str) -> None:
        state = self.state  # a batch prefetched every line's count (BatchPreparer.strip_boilerplate)
        for key, form in seen.items():
            raw = state.get(NAMESPACE, key)
            value: list[Any] = [0, []] if raw is None else orjson.loads(raw)
            count = int(value[0]) + 1
            carriers: list[str] = list(value[1]) if len(value) == 2 else []
            if count >= self.config.min_docs:
                self.learned.add(key)
                self.pending.update(carriers)
                self.pending.add(doc_id)
                state.put(NAMESPACE, key, dumps([count, source, form]))
            else:
                state.put(NAMESPACE, key, dumps([count, [*carriers, doc_id]]))


def learned_lines(state: StateView, min_docs: int) -> Iterator[tuple[str, int, str]]:
    """``(source, documents, line)`` of every learned line, in key order."""
    for _, raw in state.store.items(NAMESPACE):
        value = orjson.loads(raw)
        if value[0] >= min_docs and len(value) == 3:
            yield value[1], value[0], value[2]
