"""Which members of a large content group are representatives, kept in memory between batches.

Deciding a document's cover reads every representative among its neighbours. A content group
(identical normalized texts) has at most one representative once its cover is decided, but
finding it by reading each member's record costs one read per member, at every arrival: N
copies of one page cost O(N^2) (``bench/bench_groups.py``: 20,000 copies took 139 s against
1.2 s for 20,000 distinct pages). :class:`GroupRepresentatives` keeps, for each group of at
least :attr:`~GroupRepresentatives.min_size` members, a small list that **contains every member
that is a representative** in the view's current state (and maybe former ones, which
:meth:`~stream_dedupe.storage.state.StateView.group_representatives` drops after checking their
records). The view keeps that rule on every write:

* a record written as a representative (``put_doc``) joins its group's list;
* a record written any other way only ever stops being one (checked on read, no update needed);
* a new group (``put_new_exact_groups``) forgets the hash's list; a raw record write, a
  discarded batch with staged writes and ``invalidate`` forget every list.

Lists are rebuilt from the group's members when first needed (one read per member, once).
"""

from __future__ import annotations

from collections.abc import Iterable

#: Smallest group whose representatives are kept (a smaller one is read member by member).
DEFAULT_MIN_SIZE = 16
#: Most groups kept; past it the older half is dropped (~250 bytes a group: ~4 MB at the bound).
DEFAULT_LIMIT = 16_384


class GroupRepresentatives:
    """Per content hash, a list holding every member of the group that is a representative.

    Args:
        min_size: Smallest group kept.
        limit: Most groups kept.

    """

    def __init__(self, min_size: int = DEFAULT_MIN_SIZE, limit: int = DEFAULT_LIMIT) -> None:
        self.min_size = min_size
        self.limit = limit
        self._lists: dict[bytes, list[str]] = {}

    def __len__(self) -> int:
        return len(self._lists)

    def get(self, content_hash: bytes) -> list[str] | None:
        """The kept list of a group (a superset of its representatives), or None if not kept."""
        return self._lists.get(content_hash)

    def keep(self, content_hash: bytes, representatives: list[str]) -> None:
        """Keep (or replace) a group's list: every member of the group that is a representative now."""
        lists = self._lists
        if content_hash not in lists and len(lists) >= self.limit:
            for stale in list(lists)[: max(1, len(lists) // 2)]:
                del lists[stale]
        lists[content_hash] = list(representatives)

    def joined(self, content_hash: bytes, doc_id: str) -> None:
        """``doc_id`` is now a representative in the group of ``content_hash``."""
        held = self._lists.get(content_hash)
        if held is not None and doc_id not in held:
            held.append(doc_id)

    def forget(self, content_hashes: Iterable[bytes]) -> None:
        """Drop the lists of these groups (they are rebuilt when next needed)."""
        if self._lists:
            for content_hash in content_hashes:
                self._lists.pop(content_hash, None)

    def clear(self) -> None:
        """Drop every list."""
        self._lists.clear()
