"""datasketch's choice of LSH bands and rows, computed without scipy.

``datasketch.MinHashLSH`` picks the ``(bands, rows)`` that minimise the weighted areas of false
positives and false negatives under the S-curve, each area integrated with ``scipy.integrate.quad``
(importing datasketch's LSH module imports scipy: about half a second of every start-up). The
integrands are polynomials of degree ``bands * rows <= num_perm``, so Gauss-Legendre quadrature
with ``num_perm // 2 + 2`` nodes integrates them exactly (up to rounding). When the two best
layouts are closer than quad's tolerance could separate, the answer is left to datasketch
(:func:`optimal_layout` returns None); ``tests/test_startup.py`` checks the choices against it.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

#: Two layouts whose weighted errors differ by less than this are too close to call without quad
#: itself (its default tolerances are 1.49e-8; its actual errors on these integrands are far smaller).
TIE_MARGIN = 1e-9


def _layouts(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(b, r)`` with ``b * r <= num_perm``, in datasketch's loop order (b, then r, ascending)."""
    pairs = [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)]
    layout = np.array(pairs, dtype=np.float64)
    return layout[:, 0], layout[:, 1]


@lru_cache(maxsize=8)
def _gauss_legendre(count: int) -> tuple[np.ndarray, np.ndarray]:
    nodes, weights = np.polynomial.legendre.leggauss(count)
    return nodes, weights


def _integral(lower: float, upper: float, degree: int, f_of_s: str, b: np.ndarray, r: np.ndarray) -> np.ndarray:
    nodes, weights = _gauss_legendre(degree // 2 + 2)
    half = (upper - lower) / 2.0
    s = lower + half * (nodes + 1.0)  # the nodes mapped from [-1, 1]
    miss = (1.0 - s[None, :] ** r[:, None]) ** b[:, None]  # P(no band collides | similarity s)
    values = 1.0 - miss if f_of_s == "collide" else miss
    out: np.ndarray = half * (values @ weights)
    return out


def optimal_layout(threshold: float, num_perm: int, weights: tuple[float, float]) -> tuple[int, int] | None:
    """``(bands, rows)`` as ``MinHashLSH(threshold, num_perm, weights)`` chooses them.

    Args:
        threshold: The LSH threshold, in (0, 1).
        num_perm: Number of permutations.
        weights: ``(false positive weight, false negative weight)``.

    Returns:
        The layout, or None when the best two are within :data:`TIE_MARGIN` (ask datasketch).

    """
    b, r = _layouts(num_perm)
    false_positive = _integral(0.0, threshold, num_perm, "collide", b, r)
    false_negative = _integral(threshold, 1.0, num_perm, "miss", b, r)
    error = false_positive * weights[0] + false_negative * weights[1]
    best = int(np.argmin(error))  # the first minimum: datasketch keeps the first it meets
    runner_up = np.partition(np.delete(error, best), 0)[0] if error.size > 1 else np.inf
    if runner_up - error[best] < TIE_MARGIN:
        return None
    return int(b[best]), int(r[best])
