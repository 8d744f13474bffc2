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
