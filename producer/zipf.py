"""Player ranks drawn from a Zipf distribution: a few players post most events.

:class:`ZipfSampler` uses Hörmann & Derflinger's rejection-inversion method:
O(1) memory and time per sample, so 10M players cost nothing to set up.
:func:`zipf_pmf` is the exact distribution, for the tests.
"""

from __future__ import annotations

import math
import random

from domain.errors import ConfigError


class ZipfSampler:
    """Ranks 1..n with P(k) proportional to k**-s, by rejection-inversion.

    Hörmann & Derflinger, "Rejection-inversion to generate variates from
    monotone discrete distributions" (1996), as in Apache Commons RNG's
    ``RejectionInversionZipfSampler``: O(1) setup and expected O(1) per sample
    (well under 2 uniforms on average), exact for any n and any s > 0.
    """

    __slots__ = ("_h_integral_n", "_h_integral_x1", "_n", "_random", "_s", "_threshold")

    def __init__(self, n: int, s: float, rng: random.Random) -> None:
        if n < 1 or not s > 0:
            raise ConfigError(f"Zipf needs n >= 1 and s > 0, got n={n}, s={s}")
        self._n = n
        self._s = s
        self._random = rng.random
        self._h_integral_x1 = self._h_integral(1.5) - 1.0
        self._h_integral_n = self._h_integral(n + 0.5)
        self._threshold = 2.0 - self._h_integral_inverse(self._h_integral(2.5) - self._h(2.0))

    def sample(self) -> int:
        """One rank in 1..n (1 is the most frequent)."""
        h_n = self._h_integral_n
        span = self._h_integral_x1 - h_n
        n = self._n
        while True:
            u = h_n + self._random() * span
            x = self._h_integral_inverse(u)
            k = int(x + 0.5)
            if k < 1:
                k = 1
            elif k > n:
                k = n
            if k - x <= self._threshold or u >= self._h_integral(k + 0.5) - self._h(k):
                return k

    def _h(self, x: float) -> float:
        return math.exp(-self._s * math.log(x))

    def _h_integral(self, x: float) -> float:
        log_x = math.log(x)
        return _helper2((1.0 - self._s) * log_x) * log_x

    def _h_integral_inverse(self, x: float) -> float:
        t = x * (1.0 - self._s)
        if t < -1.0:
            t = -1.0  # guards against rounding just past the pole
        return math.exp(_helper1(t) * x)


def _helper1(x: float) -> float:
    """log1p(x)/x, accurate near 0."""
    if abs(x) > 1e-8:
        return math.log1p(x) / x
    return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))


def _helper2(x: float) -> float:
    """expm1(x)/x, accurate near 0."""
    if abs(x) > 1e-8:
        return math.expm1(x) / x
    return 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))


def zipf_pmf(n: int, s: float) -> list[float]:
    """The exact probabilities of ranks 1..n (for tests and docs; O(n))."""
    weights = [k**-s for k in range(1, n + 1)]
    total = math.fsum(weights)
    return [w / total for w in weights]
