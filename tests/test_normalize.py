from __future__ import annotations

import pytest

from stream_dedupe.config import NormalizationConfig
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.errors import ConfigError


def test_unicode_case_whitespace_and_punctuation() -> None:
    n = Normalizer()
    assert n.normalize("  Hello,\tWORLD!!\n\nＦｕｌｌ-width  ﬁ ligature ") == "hello world full width fi ligature"
    assert n.normalize("STRASSE Straße") == "strasse strasse"
    assert n.normalize("...") == ""
    assert n.normalize("snake_case") == "snake case"


def test_header_and_footer_lines_are_dropped() -> None:
    config = NormalizationConfig(header_patterns=(r"^[\w-]+: ",), footer_patterns=(r"^--", r"^sent from"))
    text = "From: a@b\nSubject: Fwd: hi\n\nThe body: stays.\nSubject: kept here\n--\nSent from my phone\n"
    assert Normalizer(config).normalize(text) == "the body stays subject kept here"


def test_strip_patterns_remove_boilerplate_anywhere() -> None:
    config = NormalizationConfig(strip_patterns=(r"\bcopyright \d{4} acme\b", r"^fwd: "))
    assert Normalizer(config).normalize("Fwd: Report\nCopyright 2024 ACME rest") == "report rest"


def test_invalid_regex_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="invalid regular expression"):
        NormalizationConfig(strip_patterns=("(",))


def test_fingerprint_changes_with_patterns() -> None:
    assert NormalizationConfig().fingerprint != NormalizationConfig(strip_patterns=("x",)).fingerprint


def test_batch_path_equals_single_path(newsgroups: list[dict[str, object]]) -> None:
    texts = [str(d["text"]) for d in newsgroups[:3000]] + [
        "",
        "  ",
        "!!",
        " a  b ",
        "Ünï ＦＵＬＬ",
        "x\u00a0y",
    ]
    for n in (Normalizer(), Normalizer(NormalizationConfig(header_patterns=(r"^[\w-]+: ",)))):
        buf, offsets = n.normalize_batch(texts)
        for i, text in enumerate(texts):
            assert bytes(buf[offsets[i] : offsets[i + 1]]) == n.normalize(text).encode()


def _title_key_by_definition(title: str | None) -> str | None:
    """title_key as its docstring defines it, for every title (the general path)."""
    import re
    import unicodedata

    import mmh3

    if title is None:
        return None
    prefix = re.compile(r"^\s*(?:(?:re|fwd?|aw|wg|tr|sv|vs|antw)\s*(?:\[\d+\])?\s*:\s*)+", re.IGNORECASE)
    form = re.sub(r"[\W_]+", " ", unicodedata.normalize("NFKC", prefix.sub("", title)).casefold()).strip()
    return mmh3.hash_bytes(form.encode("utf-8"))[:8].hex() if form else None


@pytest.mark.parametrize(
    ("title", "same_as"),
    [
        ("Re: Fwd: Disk full on db-1", "disk FULL on db_1"),
        ("RE[2]:  AW: Ticket #42", "ticket 42"),
        ("Réunion: ordre du jour", "RÉUNION ordre-du-jour"),
        ("Re:", None),
        ("  ...  ", None),
        ("", None),
    ],
)
def test_title_key_ignores_reply_prefixes_case_and_punctuation(title: str, same_as: str | None) -> None:
    from stream_dedupe.core.normalize import title_key

    assert title_key(title) == (title_key(same_as) if same_as is not None else None)
    assert title_key(title) == _title_key_by_definition(title)


def test_title_key_of_ascii_titles_equals_its_definition() -> None:
    """The ASCII fast path (translate, split, join) gives the key of the general path."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from stream_dedupe.core.normalize import title_key

    alphabet = st.sampled_from([chr(c) for c in range(128)] + ["Re:", "fwd:", "Aw[3]:", " : ", "_"])

    @settings(max_examples=3000, deadline=None)
    @given(st.lists(alphabet, max_size=40).map("".join))
    def check(title: str) -> None:
        assert title.isascii()
        assert title_key(title) == _title_key_by_definition(title)

    check()
    assert title_key(None) is None
