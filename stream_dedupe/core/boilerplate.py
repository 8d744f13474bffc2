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
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from typing import Any

import mmh3
import numpy as np
import orjson

from stream_dedupe.config import BoilerplateConfig
from stream_dedupe.core import jit
from stream_dedupe.core.keyfilter import KeyFilter, as_words
from stream_dedupe.core.lineform import ascii_form
from stream_dedupe.core.linekeys import COUNTED, SHORT, batch_line_keys
from stream_dedupe.storage.state import StateView, dumps

_NON_WORD = re.compile(r"[\W_]+")
NAMESPACE = "boilerplate"
_SCAN_CHUNK = 1 << 16  # keys given to the filter at a time when a state is opened
#: The :attr:`BoilerplateLearner.learned_by_source` entry of learned lines stored without their
#: source (not written by this version): they count in every source's :meth:`~BoilerplateLearner.epoch`.
_ANY_SOURCE = "\0any"


@dataclass(frozen=True)
class TextLines:
    """The lines of one text, as boilerplate learning sees them.

    Attributes:
        ends: Where each line ends in the text (its line end included).
        keys: Each line's state key (:func:`line_key`), or None for a line too short to count.
        words: True if a line that is not counted has words (so stripping leaves some).

    """

    ends: list[int]
    keys: list[bytes | None]
    words: bool


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
        warm: The learned keys and key filter saved from this very state (a warm start,
            :mod:`~stream_dedupe.core.warmstart`): the scan of every count is skipped.

    """

    def __init__(
        self,
        config: BoilerplateConfig,
        state: StateView,
        warm: tuple[set[bytes], KeyFilter, Mapping[str, int]] | None = None,
    ) -> None:
        self.config = config
        self.state = state
        self.learned: set[bytes] = set()
        #: How many of the learned lines belong to each source (see :meth:`epoch`).
        self.learned_by_source: Counter[str] = Counter()
        self.stripped_lines = 0
        #: Ids of documents that carried a line when it was learned: to be signed again.
        self.pending: set[str] = set()
        if warm is not None:
            self.learned, self.known, by_source = warm
            self.learned_by_source = Counter(by_source)
            return
        #: Every key of the namespace, given to it before it can be written (:meth:`prefetch_counts`).
        self.known = KeyFilter(state.store.count(NAMESPACE))
        stored: list[bytes] = []
        for key, raw in state.store.items(NAMESPACE):
            stored.append(key)
            if len(stored) == _SCAN_CHUNK:
                self._remember(stored)
                stored = []
            value = orjson.loads(raw)
            if value[0] >= config.min_docs:
                self.learned.add(key)
                source = value[1] if len(value) == 3 and isinstance(value[1], str) else _ANY_SOURCE
                self.learned_by_source[source] += 1
        self._remember(stored)

    def epoch(self, source: str | None) -> int:
        """Lines learned so far for ``source`` (documents without one share a pool).

        A line's key includes its source, so what a text of ``source`` strips to changes only
        when this number does; it never goes down (a count only grows). Stored with each record
        to recognize unchanged re-crawls (:mod:`~stream_dedupe.core.recrawl`).
        """
        by_source = self.learned_by_source
        return by_source[source or ""] + by_source[_ANY_SOURCE]

    def _remember(self, keys: Sequence[bytes]) -> None:
        if all(len(key) == 8 for key in keys):
            self.known.add(as_words(b"".join(keys)))
        else:  # not a key of this version (8 bytes): nothing can be told absent any more
            self.known.saturate()

    def to_arrays(self) -> dict[str, np.ndarray] | None:
        """The learned keys, their count per source and the key filter as arrays (None: a key is not 8 bytes)."""
        learned = b"".join(self.learned)
        if len(learned) != 8 * len(self.learned):
            return None
        by_source = np.array(orjson.dumps(dict(self.learned_by_source)).decode())
        return {
            "learned": np.frombuffer(learned, dtype="<u8"),
            "learned_by_source": by_source,
            **self.known.to_arrays(),
        }

    def prefetch_counts(self, keys: Sequence[bytes]) -> None:
        """Read the counts of a batch's line keys with one multi-get, skipping keys never counted.

        A key the filter was never given is not in the state (every key is given to it here,
        before it is counted and written); the others are read.
        """
        if not keys:
            return
        words = as_words(b"".join(keys))
        maybe = self.known.maybe_present(words)
        self.state.prefetch(NAMESPACE, list(compress(keys, maybe)), list(compress(keys, ~maybe)))
        self.known.add(words)

    def batch_lines(self, texts: Sequence[str], sources: Sequence[str | None]) -> list[TextLines]:
        """The lines of every text of a batch (``sources``: each text's): :func:`text_lines` with these settings."""
        return text_lines(texts, sources, self.config.min_tokens)

    def strip_and_count(
        self, text: str, source: str | None, count: bool = True, doc_id: str = "", lines: TextLines | None = None
    ) -> str:
        """Return ``text`` without its learned lines; then count its lines for this source.

        A text with no words left once its learned lines are gone is returned whole (an empty
        page would otherwise be dropped as ``empty-text``).

        Args:
            text: The raw document text.
            source: The document's ``source`` (documents without one share a pool).
            count: False for a document already counted (a re-crawl of a known id), so that
                re-crawling one page never turns its own lines into boilerplate. (A page deleted
                and added again is counted with True, and found among its lines' carriers.)
            doc_id: The document, remembered as a carrier of its lines until they are learned.
            lines: The text's :meth:`batch_lines` when already computed (a batch computes them
                together, and reads their counts with one multi-get).

        """
        source = source or ""
        lines = self.batch_lines([text], [source])[0] if lines is None else lines
        learned, keys = self.learned, lines.keys
        if learned.isdisjoint(keys):  # the common case: nothing to strip
            if count:
                self._count(text, lines, {k: j for j, k in enumerate(keys) if k is not None}, source, doc_id)
            return text
        cut = {j for j, k in enumerate(keys) if k in learned}
        kept = {k: j for j, k in enumerate(keys) if k is not None and j not in cut}
        if count:
            self._count(text, lines, kept, source, doc_id)
        if not (lines.words or kept):
            # a document made only of learned lines keeps them: stripping never empties a page
            return text
        self.stripped_lines += len(cut)
        pieces, start = [], 0
        for j, end in enumerate(lines.ends):
            if j not in cut:
                pieces.append(text[start:end])
            start = end
        return "".join(pieces)  # line ends kept: header/footer patterns still see the same lines

    def _count(self, text: str, lines: TextLines, seen: dict[bytes, int], source: str, doc_id: str) -> None:
        """Count a document's distinct lines (``key -> index of a line with it``); learn those reaching ``min_docs``."""
        state = self.state  # a batch prefetched every line's count (BatchPreparer.strip_boilerplate)
        min_docs = self.config.min_docs
        id_json = orjson.dumps(doc_id)
        first = b"[1,[" + id_json + b"]]" if min_docs > 1 else None  # a line seen for the first time: most
        cache, writes = state.overlay(NAMESPACE)
        for key, j in seen.items():
            try:
                raw = cache[key]  # one lookup (every key is there after the batch's prefetch)
            except KeyError:
                raw = state.get(NAMESPACE, key)
            counted = first if raw is None else _with_carrier(raw, id_json, min_docs)
            if counted is _CARRIED:
                continue
            if counted is not None:
                cache[key] = writes[key] = counted
                continue
            value: list[Any] = [0, []] if raw is None else orjson.loads(raw)
            carriers: list[str] = list(value[1]) if len(value) == 2 else []
            if doc_id in carriers:
                continue  # counted when this document was first seen (since deleted and added again)
            count = int(value[0]) + 1
            if count >= min_docs:
                self.learned.add(key)
                self.learned_by_source[source] += 1
                self.pending.update(carriers)
                self.pending.add(doc_id)
                line = text[lines.ends[j - 1] if j else 0 : lines.ends[j]]
                state.put(NAMESPACE, key, dumps([count, source, _line_form(line)]))
            else:
                state.put(NAMESPACE, key, dumps([count, [*carriers, doc_id]]))


def text_lines(texts: Sequence[str], sources: Sequence[str | None], min_tokens: int) -> list[TextLines]:
    """The lines of every text of a batch (``sources``: each text's), in one compiled call.

    Depends on the texts and ``min_tokens`` only, never on the state, so a signing process can
    compute them (``dedupe --jobs``) and the engine take them as they are.

    Every ASCII text, and every ASCII line of the other texts, goes to
    :func:`~stream_dedupe.core.linekeys.batch_line_keys` at once; a line with other characters
    is formed one at a time (NFKC, Unicode word rules).
    """
    segments: list[str] = []
    segment_sources: list[str] = []
    plans: list[list[str] | None] = []  # None: an ASCII text, one segment; else its lines
    for text, given in zip(texts, sources, strict=True):
        source = given or ""
        if text.isascii():
            plans.append(None)
            segments.append(text)
            segment_sources.append(source)
            continue
        lines = text.splitlines(keepends=True)
        plans.append(lines)
        ascii_lines = [line for line in lines if line.isascii()]
        segments.extend(ascii_lines)  # one line each: splitlines never ends a line before its break
        segment_sources.extend([source] * len(ascii_lines))
    jit.note_batch(len(texts))  # the batch is signed next: numba now, not the pure twin for this one
    bounds, ends, kinds, blob = batch_line_keys(segments, segment_sources, min_tokens)
    short = (kinds == SHORT).tolist()
    all_ends, spans = ends.tolist(), bounds.tolist()
    # every line's key as bytes, None where not counted, in three numpy calls (3x faster than
    # slicing the blob line by line)
    objects = np.frombuffer(blob, dtype="V8", count=kinds.shape[0]).astype(object)
    objects[kinds != COUNTED] = None
    all_keys: list[bytes | None] = objects.tolist()
    out: list[TextLines] = []
    at = 0  # the next segment
    for given, plan in zip(sources, plans, strict=True):
        if plan is None:
            first, last = spans[at], spans[at + 1]
            at += 1
            out.append(TextLines(all_ends[first:last], all_keys[first:last], any(short[first:last])))
            continue
        mixed, at = _mixed_lines(given or "", plan, spans, at, all_keys, short, min_tokens)
        out.append(mixed)
    return out


def _mixed_lines(
    source: str,
    lines: list[str],
    spans: list[int],
    at: int,
    all_keys: list[bytes | None],
    short: list[bool],
    min_tokens: int,
) -> tuple[TextLines, int]:
    """A text with non-ASCII lines (its ASCII ones: the segments from ``at`` on); and the next segment."""
    ends: list[int] = []
    keys: list[bytes | None] = []
    words = False
    end = 0
    for line in lines:
        end += len(line)
        ends.append(end)
        key: bytes | None = None
        if line.isascii():
            j = spans[at]
            at += 1
            key = all_keys[j]
            words = words or short[j]
        else:
            form = _line_form(line)
            if form and _has_tokens(form, min_tokens):
                key = line_key(source, form)
            words = words or (key is None and bool(form))
        keys.append(key)
    return TextLines(ends, keys, words), at


#: :func:`_with_carrier`'s answer for a document already among a line's carriers: not counted again.
_CARRIED = b""


def _with_carrier(raw: bytes, id_json: bytes, min_docs: int) -> bytes | None:
    """``dumps([count + 1, [*carriers, doc_id]])`` from the stored ``[count, [carriers]]`` by splicing bytes.

    None when the line would be learned, or the value is not in that shape (the caller decodes it
    then); :data:`_CARRIED` when ``id_json`` is a carrier already: a page deleted (or emptied)
    and added again is the same document, and counting its lines again would let one page that
    comes and goes make its own lines boilerplate. The same bytes as orjson gives
    (``tests/test_line_keys.py``), without decoding and encoding every carrier id of every line
    of every document (a third of counting's time).
    """
    comma = raw.find(b",", 1)
    if comma < 0 or raw[:1] != b"[" or raw[-2:] != b"]]" or raw[comma + 1 : comma + 2] != b"[":
        return None
    # an element of a JSON array of strings: an unescaped quote after "[" or "," opens a string
    # and one before "," or "]" closes it, so this finds the id as a whole element only (and
    # only when the id is in the value at all: most ids are not, and the test copies the list)
    if id_json in raw and b"," + id_json + b"," in b"," + raw[comma + 2 : -2] + b",":
        return _CARRIED
    count = int(raw[1:comma]) + 1
    if count >= min_docs:
        return None
    if len(raw) == comma + 4:  # [count,[]]
        return b"[%d,[%b]]" % (count, id_json)
    return b"[%d,%b,%b]]" % (count, raw[comma + 1 : -2], id_json)


def learned_lines(state: StateView, min_docs: int) -> Iterator[tuple[str, int, str]]:
    """``(source, documents, line)`` of every learned line, in key order."""
    for _, raw in state.store.items(NAMESPACE):
        value = orjson.loads(raw)
        if value[0] >= min_docs and len(value) == 3:
            yield value[1], value[0], value[2]
