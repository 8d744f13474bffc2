"""The ASCII shortcut of boilerplate line forms equals the regex rule it replaces."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedupe.core.boilerplate import _has_tokens, _line_form

_NON_WORD = re.compile(r"[\W_]+")


def _regex_form(line: str) -> str:
    if not line.isascii():
        line = unicodedata.normalize("NFKC", line)
    return _NON_WORD.sub(" ", line.casefold()).strip()


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_ascii_lines_form_as_the_regex_does(line: str) -> None:
    assert _line_form(line) == _regex_form(line)


@given(st.text(max_size=40))
def test_any_line_forms_as_the_regex_does(line: str) -> None:
    assert _line_form(line) == _regex_form(line)


def test_a_footer_line_form() -> None:
    assert _line_form("  Copyright (c) 2026 -- ACME_Corp.\\n") == "copyright c 2026 acme corp n"


@given(st.text(alphabet="ab ", max_size=30).map(lambda t: " ".join(t.split())), st.integers(1, 6))
def test_token_check_counts_like_str_count(form: str, tokens: int) -> None:
    if form:
        assert _has_tokens(form, tokens) == (form.count(" ") + 1 >= tokens)
