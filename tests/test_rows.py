"""stack_rows: np.stack's matrix for a batch's rows, and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

from stream_dedupe.core.rows import stack_rows


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_stack_rows_equals_np_stack(dtype: type) -> None:
    rng = np.random.default_rng(7)
    matrix = rng.integers(0, 1 << 31, size=(37, 18)).astype(dtype)
    rows = [matrix[i] for i in range(matrix.shape[0])] + [matrix[3].copy()]  # views and a copy
    stacked = stack_rows(rows)
    assert stacked.dtype == dtype and stacked.flags.c_contiguous
    assert np.array_equal(stacked, np.stack(rows))
    assert np.array_equal(stack_rows(rows[:1]), np.stack(rows[:1]))


def test_stack_rows_refuses_rows_of_different_lengths_even_when_the_total_fits() -> None:
    rows = [np.arange(2), np.arange(3), np.arange(1)]  # 6 values: a 3 x 2 reshape would "work"
    with pytest.raises(ValueError, match="one length"):
        stack_rows(rows)
    with pytest.raises(ValueError, match="one length"):
        stack_rows([np.zeros((2, 2)), np.zeros((2, 2))])
    with pytest.raises(ValueError, match="at least one row"):
        stack_rows([])
