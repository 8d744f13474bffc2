"""What a dedup run decided, per document: its cluster and the indexed document that covers it.

Read from a state (the same export as ``stream-dedupe clusters``), a clusters JSONL export, or an
events file. The *representative* of a dropped document is the ``representative`` field when the
export or event carries one (the canonical that covers that document), else its cluster's
``canonical``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from stream_dedupe.core.events import DOCUMENT_EVENTS
from stream_dedupe.errors import ConfigError
from stream_dedupe.storage.base import KVStore


@dataclass
class DedupResult:
    """Per-document outcome of a dedup run.

    Attributes:
        cluster: Cluster label of every clustered document (documents absent are singletons).
        representative: For each dropped document, the indexed document that replaces it.

    """

    cluster: dict[str, str] = field(default_factory=dict)
    representative: dict[str, str] = field(default_factory=dict)

    def indexed(self, doc_id: str) -> bool:
        """True when the document stays in the index (it is a representative or a singleton)."""
        return doc_id not in self.representative

    def cluster_of(self, doc_id: str) -> str:
        """The document's cluster label (its own id when it is a singleton)."""
        return self.cluster.get(doc_id, doc_id)

    def cluster_sizes(self) -> dict[str, int]:
        """Members per cluster label (clusters of two or more)."""
        sizes: dict[str, int] = defaultdict(int)
        for label in self.cluster.values():
            sizes[label] += 1
        return dict(sizes)

    def cover_sizes(self) -> dict[str, int]:
        """Documents each representative stands for, itself included (representatives covering others)."""
        sizes: dict[str, int] = defaultdict(lambda: 1)
        for rep in self.representative.values():
            sizes[rep] += 1
        return dict(sizes)

    @classmethod
    def from_clusters(cls, clusters: Iterable[Mapping[str, Any]]) -> DedupResult:
        """From cluster records ``{"cluster", "canonical", "members", ...}`` (the clusters export).

        A member is an id or an object ``{"id", "representative"}`` (a null or own-id
        representative: the member is indexed). The export of this version lists the cluster's
        ``"representatives"`` and maps every other member to its representative in
        ``"covered_by"``; an older export (neither field) means one canonical per cluster.
        """
        result = cls()
        for record in clusters:
            label, canonical = str(record["cluster"]), str(record["canonical"])
            reps = record.get("representatives")
            covered = record.get("covered_by")
            if isinstance(covered, dict) and isinstance(reps, list):
                reps = {str(m if isinstance(m, str) else m["id"]): None for m in record["members"]}
                reps.update({str(k): str(v) for k, v in covered.items()})
            reps = reps if isinstance(reps, dict) else {}
            for member in record["members"]:
                if isinstance(member, dict):
                    doc_id = str(member["id"])
                    rep = member.get("representative", canonical)
                else:
                    doc_id = str(member)
                    rep = reps.get(doc_id, canonical)
                result.cluster[doc_id] = label
                if rep is not None and str(rep) != doc_id:
                    result.representative[doc_id] = str(rep)
        return result

    @classmethod
    def from_store(cls, store: KVStore) -> DedupResult:
        """From a committed state (through :func:`stream_dedupe.exports.iter_clusters`)."""
        from stream_dedupe.exports import iter_clusters

        return cls.from_clusters(iter_clusters(store, 2))

    @classmethod
    def from_clusters_file(cls, path: str) -> DedupResult:
        """From a ``stream-dedupe clusters`` JSONL export."""
        from stream_dedupe.inputs import read_lines

        try:
            return cls.from_clusters(orjson.loads(line.raw) for line in read_lines(path) if line.raw.strip())
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"{path} is not a clusters export ({exc}): write one with `stream-dedupe clusters --state DIR -o FILE`"
            ) from exc

    @classmethod
    def from_events_file(cls, path: str) -> DedupResult:
        """By replaying an events file (``stream-dedupe dedupe --events``) from its first line.

        The last document event of an id gives its cluster (and ``representative`` when the event
        carries one); ``cover-changed`` moves documents into or out of the index;
        ``canonical-changed``, ``clusters-merged`` and ``cluster-split`` events move canonicals and
        members; ``deleted`` (and ``empty-text``) removes the document.
        """
        from stream_dedupe.inputs import read_lines

        doc_cluster: dict[str, str] = {}
        doc_rep: dict[str, str | None] = {}
        canonical: dict[str, str] = {}
        renamed: dict[str, str] = {}
        try:
            for line in read_lines(path):
                if line.raw.strip():
                    _replay(orjson.loads(line.raw), doc_cluster, doc_rep, canonical, renamed)
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(
                f"{path} is not an events file ({exc}): write one with `stream-dedupe dedupe ... --events FILE`"
            ) from exc

        # a cluster's label changes without an event when a smaller id joins it: place covered
        # documents with their representative (cover-changed events keep those exact)
        for doc_id, rep in doc_rep.items():
            if rep is not None and rep != doc_id and rep in doc_cluster and doc_id in doc_cluster:
                doc_cluster[doc_id] = doc_cluster[rep]
        members: dict[str, list[str]] = defaultdict(list)
        for doc_id, label in doc_cluster.items():
            members[_resolve(renamed, label)].append(doc_id)
        records = []
        for label, ids in members.items():
            if len(ids) < 2:
                continue
            reps = {d: doc_rep[d] for d in ids if d in doc_rep}
            records.append({"cluster": label, "canonical": canonical[label], "members": ids, "representatives": reps})
        return cls.from_clusters(records)


def _resolve(renamed: dict[str, str], label: str) -> str:
    seen = {label}
    while label in renamed and renamed[label] not in seen:
        label = renamed[label]
        seen.add(label)
    return label


def _replay(
    event: dict[str, Any],
    doc_cluster: dict[str, str],
    doc_rep: dict[str, str | None],
    canonical: dict[str, str],
    renamed: dict[str, str],
) -> None:
    kind = event["event"]
    if kind in DOCUMENT_EVENTS and kind not in ("deleted", "invalid"):
        doc_id, label = str(event["id"]), str(event["cluster"])
        renamed.pop(label, None)
        of = event.get("of")
        if of is not None and str(of) in doc_cluster:
            # the cluster the document joined may carry a new label now (one cluster: no merge event)
            old = _resolve(renamed, doc_cluster[str(of)])
            if old != label:
                renamed[old] = label
        doc_cluster[doc_id] = label
        canonical[label] = str(event["canonical"])
        if "representative" in event:
            doc_rep[doc_id] = event["representative"]
    elif kind == "deleted" or (kind == "invalid" and event.get("reason") == "empty-text"):
        doc_cluster.pop(str(event["id"]), None)
        doc_rep.pop(str(event["id"]), None)
    elif kind == "cover-changed":
        for doc_id in event["entered"]:
            doc_rep[str(doc_id)] = str(doc_id)
        for left in (*event["left"], *event.get("moved", ())):
            doc_rep[str(left["id"])] = str(left["representative"])
    elif kind == "canonical-changed":
        canonical[str(event["cluster"])] = str(event["canonical"])
    elif kind == "clusters-merged":
        label = str(event["cluster"])
        canonical[label] = str(event["canonical"])
        for old in event["merged"]:
            if old != label:
                renamed[str(old)] = label
    elif kind == "cluster-split":
        for part in event["clusters"]:
            part_label = str(part["cluster"])
            renamed.pop(part_label, None)
            canonical[part_label] = str(part["canonical"])
            for member in part["members"]:
                doc_cluster[str(member)] = part_label
