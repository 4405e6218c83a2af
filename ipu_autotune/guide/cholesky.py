"""Small symmetric positive definite systems in pure Python (the memory model's handful of
parts: numpy's overhead per call would be most of the cost)."""

from __future__ import annotations

import math


def cholesky(a: list[list[float]]) -> list[list[float]]:
    """The lower Cholesky factor of a symmetric positive definite a (small: pure Python)."""
    n = len(a)
    low = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1):
            s = a[i][j] - sum(low[i][k] * low[j][k] for k in range(j))
            low[i][j] = math.sqrt(max(s, 1e-18)) if i == j else s / low[j][j]
    return low


def solve(low: list[list[float]], b: list[float]) -> list[float]:
    """x with low low' x = b."""
    n = len(low)
    y = [0.0] * n
    for i in range(n):
        y[i] = (b[i] - sum(low[i][k] * y[k] for k in range(i))) / low[i][i]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (y[i] - sum(low[k][i] * x[k] for k in range(i + 1, n))) / low[i][i]
    return x


def inverse(low: list[list[float]]) -> list[list[float]]:
    """The inverse of low low' (`low`: a Cholesky factor, cholesky)."""
    n = len(low)
    return [solve(low, [1.0 if i == j else 0.0 for j in range(n)]) for i in range(n)]


def log_det(low: list[list[float]]) -> float:
    """log |low low'| (`low`: a Cholesky factor): twice the sum of its diagonal's logs."""
    return 2.0 * sum(math.log(low[i][i]) for i in range(len(low)))
