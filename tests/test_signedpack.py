"""Signed records packed by column for ``dedupe --jobs``: unpacked, they are the records signed."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from stream_dedupe.config import DedupeParams
from stream_dedupe.core import jit
from stream_dedupe.core.signedpack import pack_signed, unpack_signed
from stream_dedupe.core.signer import Signer

from .helpers import text


@pytest.fixture(scope="module")
def compiled() -> None:
    jit.enable()


@pytest.mark.parametrize("verify", ["exact", "estimate"])
def test_packed_records_unpack_to_the_records_signed(compiled: None, verify: str) -> None:
    rng = random.Random(4)
    signer = Signer(DedupeParams(verify=verify))
    texts = [text(rng, rng.choice([0, 1, 2, 5, 40, 300])) for _ in range(80)] + ["", "one", "\u65e5\u672c\u8a9e"]
    signed = signer.sign(texts)
    assert any(s.signature is None for s in signed) and any(s.signature is not None for s in signed)
    packed = pickle.loads(pickle.dumps(pack_signed(signed, signer.fingerprint, signer.params.num_perm), protocol=5))
    again = unpack_signed(packed, signer.fingerprint, signer.params.num_perm)
    assert len(again) == len(signed)
    for before, after in zip(signed, again, strict=True):
        assert after is not None and after.same_as(before)
        for array in (after.signature, after.shingle_set):
            if array is not None:
                assert array.dtype == np.uint32 and array.flags.aligned and array.flags.c_contiguous
    if verify == "estimate":
        assert all(s is not None and s.shingle_set is None for s in again)


def test_records_of_other_parameters_are_not_taken(compiled: None) -> None:
    ours, theirs = Signer(DedupeParams()), Signer(DedupeParams(num_perm=64))
    packed = pack_signed(theirs.sign(["some words to sign here", "and more words"]), theirs.fingerprint, 64)
    assert unpack_signed(packed, ours.fingerprint, ours.params.num_perm) == [None, None]
    forged = packed._replace(fingerprint=ours.fingerprint)  # same fingerprint, other signature length
    assert unpack_signed(forged, ours.fingerprint, ours.params.num_perm) == [None, None]


def test_an_empty_batch() -> None:
    signer = Signer(DedupeParams())
    packed = pack_signed([], signer.fingerprint, signer.params.num_perm)
    assert unpack_signed(packed, signer.fingerprint, signer.params.num_perm) == []
