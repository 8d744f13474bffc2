"""Plain data types shared by the core and the storage layer (no algorithm lives here).

The state stores cluster records and canonical keys; the core's union-find and canonical policy
compute them. Both import these types from here, so that ``stream_dedupe.storage`` never imports
``stream_dedupe.core`` (``tests/test_layers.py`` checks it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CanonicalKey:
    """What the canonical choice looks at for one document.

    Attributes:
        doc_id: The document id.
        length: Length of the normalized text, in characters.
        updated_at_us: ``updated_at`` in microseconds since the epoch, or None when unknown
            (unknown ranks as oldest).

    """

    doc_id: str
    length: int
    updated_at_us: int | None


@dataclass(frozen=True)
class ClusterInfo:
    """What a cluster root records.

    Attributes:
        size: Number of members.
        label: Smallest member id: the cluster's identity in events and exports.
        canonical: The preferred member.

    """

    size: int
    label: str
    canonical: CanonicalKey
