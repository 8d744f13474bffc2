"""Union-find and canonical choice: property tests against a from-scratch reference."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedupe.core.canonical import CanonicalKey, better, choose
from stream_dedupe.core.unionfind import MemoryClusterStore, UnionFind
from stream_dedupe.model import ClusterInfo

ids = st.sampled_from([f"d{i:02d}" for i in range(16)])
keys = st.builds(CanonicalKey, ids, st.integers(0, 5), st.one_of(st.none(), st.integers(0, 3)))


def reference_components(nodes: set[str], edges: list[tuple[str, str]]) -> list[set[str]]:
    adjacency: dict[str, set[str]] = {n: set() for n in nodes}
    for a, b in edges:
        adjacency[a].add(b)
        adjacency[b].add(a)
    seen: set[str] = set()
    out = []
    for n in sorted(nodes):
        if n in seen:
            continue
        comp, stack = set(), [n]
        while stack:
            x = stack.pop()
            if x in comp:
                continue
            comp.add(x)
            stack.extend(adjacency[x] - comp)
        seen |= comp
        out.append(comp)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(ids, ids), max_size=30), st.dictionaries(ids, st.integers(0, 9)), st.randoms())
def test_clusters_labels_and_canonicals_match_reference_in_any_order(
    edges: list[tuple[str, str]], lengths: dict[str, int], rnd: object
) -> None:
    nodes = {n for e in edges for n in e}
    store = MemoryClusterStore()
    for n in nodes:
        store.keys[n] = CanonicalKey(n, lengths.get(n, 1), None)
    shuffled = list(edges)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    uf = UnionFind(store)
    for a, b in shuffled:
        uf.union(a, b)
    for comp in reference_components(nodes, edges):
        roots = {uf.find(n) for n in comp}
        assert len(roots) == 1
        info = uf.info(roots.pop())
        assert info.size == len(comp)
        assert info.label == min(comp)
        assert info.canonical == choose([store.keys[n] for n in comp])


@given(keys, keys)
def test_better_is_symmetric(a: CanonicalKey, b: CanonicalKey) -> None:
    assert better(a, b) == better(b, a)


@given(st.lists(keys, min_size=1, max_size=8), st.randoms())
def test_choose_is_order_independent(items: list[CanonicalKey], rnd: object) -> None:
    shuffled = list(items)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert choose(items) == choose(shuffled)


def test_canonical_rules() -> None:
    assert better(CanonicalKey("b", 10, None), CanonicalKey("a", 9, 99)).doc_id == "b"  # longest first
    assert better(CanonicalKey("b", 10, 5), CanonicalKey("a", 10, 4)).doc_id == "b"  # then most recent
    assert better(CanonicalKey("b", 10, 0), CanonicalKey("a", 10, None)).doc_id == "b"  # unknown is oldest
    assert better(CanonicalKey("b", 10, 4), CanonicalKey("a", 10, 4)).doc_id == "a"  # then smallest id


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(ids, ids), max_size=30), st.lists(ids, max_size=20))
def test_roots_of_equals_a_find_of_each_with_the_same_writes(edges: list[tuple[str, str]], asked: list[str]) -> None:
    """The engine's shortcut for the many matches of one cluster: same roots, same path compression."""
    import copy

    store = MemoryClusterStore()
    for n in {n for e in edges for n in e} | set(asked):
        store.keys[n] = CanonicalKey(n, 1, None)
    uf = UnionFind(store)
    for a, b in edges:
        uf.union_roots(*_roots_with_info(uf, a), *_roots_with_info(uf, b))  # no find of a or b after: long paths stay
    one_by_one = copy.deepcopy(store)
    reference = UnionFind(one_by_one)
    expected = list(dict.fromkeys(reference.find(n) for n in asked))
    assert uf.roots_of(asked) == expected
    assert store.parents == one_by_one.parents


def _roots_with_info(uf: UnionFind, doc_id: str) -> tuple[str, ClusterInfo]:
    root = doc_id
    while (parent := uf.store.get_parent(root)) is not None:  # the root, without compressing the path
        root = parent
    return root, uf.info(root)
