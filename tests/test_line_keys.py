"""Boilerplate lines a batch at a time: the compiled pass gives what the per-line code gives, bit for bit.

The oracle is the learner as it was before the batch pass (one ``splitlines`` line at a time:
form, ``line_key``, ``orjson`` round trip of every count), kept here verbatim in spirit.
"""

from __future__ import annotations

import random
from typing import Any

import mmh3
import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedupe.config import BoilerplateConfig
from stream_dedupe.core import jit, linekeys
from stream_dedupe.core.boilerplate import (
    _CARRIED,
    NAMESPACE,
    BoilerplateLearner,
    _has_tokens,
    _line_form,
    _with_carrier,
    line_key,
)
from stream_dedupe.core.records import Document
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.state import StateView, dumps

BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
ASCII = "aB3 -_.,\t!Zz9  xy"


def random_text(rng: random.Random, pool: list[str], non_ascii: bool = False) -> str:
    parts = []
    for _ in range(rng.choice([0, 1, 3, 12, 40])):
        line = rng.choice(pool) if rng.random() < 0.6 else "".join(rng.choice(ASCII) for _ in range(rng.randint(0, 30)))
        parts.append(line + rng.choice(BREAKS))
    text = "".join(parts)
    if rng.random() < 0.3:
        text = text.rstrip("\n\r\x0b\x0c\x1c\x1d\x1e")  # no end on the last line
    if non_ascii:
        text += rng.choice(["\u00e9t\u00e9 caf\u00e9 menu", "\u65e5\u672c\u8a9e \u30c6\u30ad", "x\u2028y z w"])
    return text


POOL = [
    "this page is maintained by the platform team",
    "all rights reserved acme corporation",
    "Sent from my phone",
    "--",
    "Distribution: world",
    "   leading   and   trailing   words   ",
    "one two",
]


@pytest.fixture(scope="module")
def compiled() -> None:
    jit.enable()


def test_murmur3_x64_equals_mmh3(compiled: None) -> None:
    buf = np.frombuffer(bytes(range(256)) * 3, dtype=np.uint8)
    for n in range(0, 520):
        want = int.from_bytes(mmh3.hash_bytes(buf[:n].tobytes())[:8], "little")
        assert int(linekeys.murmur3_x64_h1(buf, n)) == want, n


@pytest.mark.parametrize("min_tokens", [1, 3, 5])
def test_compiled_line_keys_equal_the_pure_twin(compiled: None, min_tokens: int) -> None:
    rng = random.Random(min_tokens)
    texts = ["", "\n", "\r\n", "a", "a\r", "a\r\nb", "\n\n", "x" * 5000] + [random_text(rng, POOL) for _ in range(300)]
    sources = [rng.choice(["", "wiki", "\u00fcn\u00ef", "a\0b"]) for _ in texts]
    data_args = linekeys.kernel_inputs(texts, sources)
    compiled_out = linekeys.line_keys(*data_args, min_tokens)
    pure_out = linekeys._line_keys_pure(*data_args, min_tokens)
    for got, want in zip(compiled_out, pure_out, strict=True):
        assert got.dtype == want.dtype
        assert np.array_equal(got, want)


def oracle_lines(text: str, source: str, min_tokens: int) -> list[tuple[str, str, bytes | None]]:
    """The per-line definition: every ``splitlines`` line, its form, its key when it has enough words."""
    out: list[tuple[str, str, bytes | None]] = []
    for line in text.splitlines(keepends=True):
        form = _line_form(line)
        key = line_key(source, form) if form and _has_tokens(form, min_tokens) else None
        out.append((line, form, key))
    return out


@pytest.mark.parametrize("mode", ["pure", "compiled"])
def test_batch_lines_follow_the_per_line_definition(compiled: None, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "pure":  # numba is enabled for the module: run the twin in its place
        monkeypatch.setattr(linekeys, "line_keys", linekeys._line_keys_pure)
    rng = random.Random(7)
    learner = BoilerplateLearner(BoilerplateConfig(min_docs=3, min_tokens=3), StateView(MemoryStore()))
    docs = [
        Document(f"d{i}", random_text(rng, POOL, non_ascii=i % 5 == 0), None, rng.choice([None, "s", "\u00e9"]), b"{}")
        for i in range(200)
    ]
    for d, lines in zip(docs, learner.batch_lines([d.text for d in docs], [d.source for d in docs]), strict=True):
        want = oracle_lines(d.text, d.source or "", 3)
        assert lines.keys == [k for _, _, k in want], d.text
        assert lines.ends == list(np.cumsum([len(line) for line, _, _ in want])), d.text
        assert lines.words == any(k is None and form for _, form, k in want)


class OracleLearner:
    """The learner before the batch pass: one line at a time, every count decoded and encoded by orjson."""

    def __init__(self, config: BoilerplateConfig, state: StateView) -> None:
        self.config, self.state = config, state
        self.learned: set[bytes] = set()
        self.stripped_lines = 0
        self.pending: set[str] = set()

    def strip_and_count(self, text: str, source: str | None, count: bool, doc_id: str) -> str:
        source = source or ""
        kept: list[str] = []
        seen: dict[bytes, str] = {}
        stripped, words = 0, False
        for line, form, key in oracle_lines(text, source, self.config.min_tokens):
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
            for key, form in seen.items():
                raw = self.state.get(NAMESPACE, key)
                value: list[Any] = [0, []] if raw is None else orjson.loads(raw)
                n = int(value[0]) + 1
                carriers = list(value[1]) if len(value) == 2 else []
                if n >= self.config.min_docs:
                    self.learned.add(key)
                    self.pending.update(carriers)
                    self.pending.add(doc_id)
                    self.state.put(NAMESPACE, key, dumps([n, source, form]))
                else:
                    self.state.put(NAMESPACE, key, dumps([n, [*carriers, doc_id]]))
        if not words or not stripped:
            return text
        self.stripped_lines += stripped
        return "".join(kept)


@pytest.mark.parametrize("seed", range(4))
def test_strip_and_count_equals_the_per_line_learner(compiled: None, seed: int) -> None:
    rng = random.Random(seed)
    config = BoilerplateConfig(min_docs=rng.choice([2, 3, 5]), min_tokens=rng.choice([1, 3]))
    new_state, old_state = StateView(MemoryStore()), StateView(MemoryStore())
    learner, oracle = BoilerplateLearner(config, new_state), OracleLearner(config, old_state)
    for batch in range(6):
        docs = [
            Document(
                f'b{batch}-{i}-"\u00e9\\',
                random_text(rng, POOL, non_ascii=i % 7 == 0),
                None,
                rng.choice([None, "s", "t"]),
                b"{}",
            )
            for i in range(40)
        ]
        for d, lines in zip(docs, learner.batch_lines([d.text for d in docs], [d.source for d in docs]), strict=True):
            count = rng.random() < 0.9
            got = learner.strip_and_count(d.text, d.source, count, d.doc_id, lines)
            assert got == oracle.strip_and_count(d.text, d.source, count, d.doc_id)
        assert learner.stripped_lines == oracle.stripped_lines
        assert learner.learned == oracle.learned
        assert learner.pending == oracle.pending
        new_state.commit()
        old_state.commit()
        assert dict(new_state.store.items(NAMESPACE)) == dict(old_state.store.items(NAMESPACE))
    assert learner.stripped_lines > 0 and learner.learned, "the corpus never learned a line: the test shows nothing"


@settings(max_examples=300, deadline=None)
@given(
    carriers=st.lists(st.text(max_size=12), max_size=6),
    doc_id=st.text(min_size=1, max_size=12),
    count=st.integers(min_value=1, max_value=20),
    min_docs=st.integers(min_value=2, max_value=25),
    carried_at=st.none() | st.integers(min_value=0, max_value=6),
)
def test_splicing_a_carrier_gives_the_bytes_orjson_gives(
    carriers: list[str], doc_id: str, count: int, min_docs: int, carried_at: int | None
) -> None:
    if carried_at is not None:
        carriers.insert(carried_at, doc_id)
    raw = dumps([count, carriers])
    got = _with_carrier(raw, orjson.dumps(doc_id), min_docs)
    if doc_id in carriers:
        assert got is _CARRIED  # a document counted once is not counted again
    elif count + 1 >= min_docs:
        assert got is None
    else:
        assert got == orjson.dumps([count + 1, [*carriers, doc_id]])


@pytest.mark.parametrize(
    "carriers",
    [['b"', "bb"], ['x","b'], ["x\\", "b,"], ["[b]"], ['"b"'], ['b\\"'], []],
)
def test_a_carrier_is_found_only_as_a_whole_id(carriers: list[str]) -> None:
    """Ids made of quotes, commas, brackets and backslashes around ``b`` do not make ``b`` a carrier."""
    assert _with_carrier(dumps([1, carriers]), b'"b"', 100) == orjson.dumps([2, [*carriers, "b"]])
    assert _with_carrier(dumps([1, [*carriers, "b"]]), b'"b"', 100) is _CARRIED


def test_a_learned_value_is_never_spliced() -> None:
    assert _with_carrier(dumps([5, "src", "a line ]]"]), b'"x"', 100) is None
    assert _with_carrier(b"[]]", b'"x"', 100) is None


@pytest.mark.parametrize("raw", [b"", b"[", b"[1,", b"[1,[", b"[1,]]", b"1,[]]", b'[1,["x"]', b'{"a":[1]]'])
def test_a_value_of_another_shape_is_left_to_the_decoder(raw: bytes) -> None:
    """Cut or foreign bytes are never spliced (the caller decodes them, and fails loudly if it must)."""
    assert _with_carrier(raw, b'"x"', 100) is None


def test_an_empty_carrier_list_gets_its_first_carrier() -> None:
    assert _with_carrier(b"[0,[]]", b'"x"', 100) == b'[1,["x"]]'
    assert _with_carrier(b"[98,[]]", b'"x"', 100) == b'[99,["x"]]'
    assert _with_carrier(b"[99,[]]", b'"x"', 100) is None  # the line is learned: decoded by the caller
