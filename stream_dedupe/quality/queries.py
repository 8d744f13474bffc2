"""Query sets for ``retrieval-eval``: from a file (JSONL, or TREC topics + qrels) or known-item.

A known-item query is a line taken from a document (a field such as ``query`` or ``title``, a
regular expression's match, or the first line of the text); its answer is that document, or,
when documents carry a label (``--label-field entity``), any document with the same label.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import orjson

from stream_dedupe.errors import ConfigError


@dataclass(frozen=True)
class Query:
    """One query and the documents that answer it."""

    query_id: str
    text: str
    relevant: tuple[str, ...]


def load_corpus(paths: list[str]) -> list[dict[str, Any]]:
    """JSON objects with a string ``id`` and ``text``, in input order (a repeated id: the last wins)."""
    from stream_dedupe.inputs import check_inputs, read_lines

    check_inputs(paths)
    docs: dict[str, dict[str, Any]] = {}
    for path in paths:
        for line in read_lines(path):
            if not line.raw.strip():
                continue
            try:
                doc = orjson.loads(line.raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(doc, dict) and isinstance(doc.get("id"), str) and isinstance(doc.get("text"), str):
                docs.pop(doc["id"], None)
                docs[doc["id"]] = doc
    return list(docs.values())


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def query_text(doc: dict[str, Any], field: str | None = None, pattern: re.Pattern[str] | None = None) -> str:
    """The known-item query of a document ('' when it has none).

    Args:
        doc: The document.
        field: Take the query from this field; without it: ``query``, else ``title``, else the first line.
        pattern: Take the first match of this expression in the text (its group 1 if it has groups).

    """
    if pattern is not None:
        match = pattern.search(doc["text"])
        if not match:
            return ""
        return (match.group(1) if pattern.groups else match.group(0)).strip()
    if field is not None:
        value = doc.get(field)
        return value.strip() if isinstance(value, str) else ""
    for name in ("query", "title"):
        value = doc.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return _first_line(doc["text"])


def known_item_queries(
    docs: list[dict[str, Any]],
    field: str | None = None,
    pattern: str | None = None,
    label_field: str | None = None,
    limit: int | None = None,
    seed: int = 1,
) -> list[Query]:
    """One query per document, or per label value when ``label_field`` is given.

    With a label, the query is the first labelled document's query text and every document with
    that label is relevant. ``limit`` draws that many queries with ``seed`` (keeping input order).

    Raises:
        ConfigError: on an invalid ``pattern``, or when no document yields a query.

    """
    try:
        compiled = re.compile(pattern, re.MULTILINE) if pattern else None
    except re.error as exc:
        raise ConfigError(f"--query-pattern {pattern!r} is not a valid regular expression: {exc}") from exc
    queries: list[Query] = []
    if label_field is None:
        for doc in docs:
            text = query_text(doc, field, compiled)
            if text:
                queries.append(Query(doc["id"], text, (doc["id"],)))
    else:
        members: dict[str, list[str]] = defaultdict(list)
        texts: dict[str, str] = {}
        for doc in docs:
            label = doc.get(label_field)
            if label is None:
                continue
            members[str(label)].append(doc["id"])
            if str(label) not in texts:
                text = query_text(doc, field, compiled)
                if text:
                    texts[str(label)] = text
        queries = [Query(label, texts[label], tuple(ids)) for label, ids in members.items() if label in texts]
    if label_field is not None and not members:
        raise ConfigError(
            f"no document has the label field {label_field!r}: give --label-field the name of a field of the "
            "documents (top level), or leave it out to make one query per document"
        )
    if not queries:
        where = f"label field {label_field!r}" if label_field else "documents"
        raise ConfigError(f"no known-item query could be made from the {where}: check --query-field/--query-pattern")
    if limit is not None and limit < len(queries):
        keep = set(random.Random(seed).sample(range(len(queries)), limit))
        queries = [q for i, q in enumerate(queries) if i in keep]
    return queries


def load_query_file(path: str) -> list[Query]:
    """Queries from JSONL lines ``{"query_id", "query", "relevant": [ids]}``.

    Raises:
        ConfigError: on a line that is not such an object.

    """
    from stream_dedupe.inputs import check_inputs, read_lines

    check_inputs([path])
    queries = []
    for line in read_lines(path):
        if not line.raw.strip():
            continue
        try:
            obj = orjson.loads(line.raw)
            queries.append(Query(str(obj["query_id"]), str(obj["query"]), tuple(str(d) for d in obj["relevant"])))
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise ConfigError(
                f'{path} line {line.line}: expected {{"query_id": ..., "query": ..., "relevant": [ids]}} ({exc})'
            ) from exc
    return queries


_TOP = re.compile(r"<top>(.*?)</top>", re.DOTALL | re.IGNORECASE)
_NUM = re.compile(r"<num>\s*(?:Number:)?\s*(\S+)", re.IGNORECASE)
_TITLE = re.compile(r"<title>\s*(?:Topic:)?\s*(.*?)\s*(?:<|$)", re.DOTALL | re.IGNORECASE)


def load_trec(topics_path: str, qrels_path: str) -> list[Query]:
    """Queries from TREC topics and qrels.

    Topics are ``<top>`` blocks with ``<num>`` and ``<title>``, or ``qid<TAB>text`` lines; qrels
    are ``qid iteration docid relevance`` lines (relevance > 0 is relevant).

    Raises:
        ConfigError: on a file that cannot be parsed.

    """
    with open(topics_path, encoding="utf-8") as fh:
        content = fh.read()
    topics: dict[str, str] = {}
    blocks = _TOP.findall(content)
    for block in blocks:
        num, title = _NUM.search(block), _TITLE.search(block)
        if num and title:
            topics[num.group(1)] = " ".join(title.group(1).split())
    if not blocks:
        for number, line in enumerate(content.splitlines(), 1):
            if line.strip():
                qid, sep, text = line.partition("\t")
                if not sep:
                    raise ConfigError(f"{topics_path} line {number}: expected <top> blocks or 'qid<TAB>query' lines")
                topics[qid.strip()] = text.strip()
    relevant: dict[str, list[str]] = defaultdict(list)
    with open(qrels_path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 4:
                raise ConfigError(f"{qrels_path} line {number}: expected 'qid iteration docid relevance'")
            if int(parts[3]) > 0:
                relevant[parts[0]].append(parts[2])
    return [Query(qid, text, tuple(relevant[qid])) for qid, text in topics.items() if relevant.get(qid)]
