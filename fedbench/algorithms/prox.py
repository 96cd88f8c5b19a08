"""Proximal operators of the non-smooth regularisers, batched over clients.

prox_{t Psi}(v) = argmin_u Psi(u) + ||u - v||^2 / (2t).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedbench.core.errors import check, unknown_choice

REGULARIZERS = ("none", "l1", "nuclear")


def soft_threshold(v: Tensor, threshold: float | Tensor) -> Tensor:
    """prox of threshold * ||.||_1: sign(v) * max(|v| - threshold, 0)."""
    return torch.sign(v) * torch.clamp(v.abs() - threshold, min=0.0)


def svd_or_nan(X: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """torch.linalg.svd(X, full_matrices=False) of a batch [..., m, n] that never fails the whole batch for one
    matrix. LAPACK raises for the batch on one matrix that is not finite or that it cannot decompose, and its
    divide-and-conquer SVD (gesdd) can return NaN for a finite one: one client of one lane would end every run
    of its group (losac/fig7 full, rank 32: 9 runs ended by one client's SVD), where the engine's divergence
    check fails a diverging run alone. A batch LAPACK refuses is decomposed matrix by matrix; a matrix whose
    factors are not finite is decomposed again as its transpose (X^T = V S U^T), and comes out NaN if that fails
    too (a matrix that is not finite always does). The usual batch costs one call and one finiteness check."""
    try:
        U, S, Vh = torch.linalg.svd(X, full_matrices=False)
    except torch.linalg.LinAlgError:
        U, S, Vh = _matrix_by_matrix(X)
    failed = ~_factors_finite(U, S, Vh)
    if bool(failed.any()):
        U, S, Vh = U.clone(), S.clone(), Vh.clone()
        Vt, St, Ut = _matrix_by_matrix(X[failed].mT)
        U[failed], S[failed], Vh[failed] = Ut.mT, St, Vt.mT
        bad = ~_factors_finite(U, S, Vh)
        U[bad], S[bad], Vh[bad] = torch.nan, torch.nan, torch.nan
    return U, S, Vh


def _factors_finite(U: Tensor, S: Tensor, Vh: Tensor) -> Tensor:
    """Per matrix of the batch: whether all three of its factors are finite."""
    return torch.isfinite(U).flatten(-2).all(-1) & torch.isfinite(S).all(-1) & torch.isfinite(Vh).flatten(-2).all(-1)


def _matrix_by_matrix(X: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """svd of each matrix alone (the rare path): NaN for one that LAPACK refuses."""
    parts = []
    for M in X.reshape(-1, *X.shape[-2:]):
        try:
            parts.append(torch.linalg.svd(M, full_matrices=False))
        except torch.linalg.LinAlgError:
            r = min(M.shape)
            parts.append((M.new_full((M.shape[0], r), torch.nan), M.new_full((r,), torch.nan),
                          M.new_full((r, M.shape[1]), torch.nan)))
    return tuple(torch.stack(part).reshape(*X.shape[:-2], *part[0].shape) for part in zip(*parts))


def singular_value_threshold(v: Tensor, threshold: float | Tensor, shape: tuple[int, int]) -> Tensor:
    """prox of threshold * ||.||_* for x = vec(X), X of `shape`; batched over leading dims
    (one batched SVD for the whole cohort). A matrix that is not finite comes out NaN (svd_or_nan)."""
    lead = v.shape[:-1]
    U, S, Vh = svd_or_nan(v.reshape(*lead, *shape))
    S = torch.clamp(S - threshold, min=0.0)
    return ((U * S.unsqueeze(-2)) @ Vh).reshape(*lead, -1)


@dataclass(frozen=True)
class Regularizer:
    """Psi(x) = lam * ||x||_1, or lam * ||X||_* with x = vec(X) (row-major), or nothing."""

    kind: str = "none"
    lam: float = 0.0
    shape: tuple[int, int] | None = None  # matrix shape for the nuclear norm

    def __post_init__(self):
        if self.kind not in REGULARIZERS:
            raise unknown_choice("regularizer", self.kind, REGULARIZERS)
        check(self.lam >= 0, f"regularizer lambda must be >= 0, got {self.lam}")
        if self.kind == "nuclear":
            check(self.shape is not None and len(self.shape) == 2, "the nuclear norm needs a matrix shape (rows, cols)")
            check(all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in self.shape),
                  f"the nuclear norm's matrix shape (rows, cols) must be two integers >= 1, got {list(self.shape)}")

    def value(self, x: Tensor) -> Tensor:
        if self.kind == "l1":
            return self.lam * x.abs().sum(-1)
        if self.kind == "nuclear":
            X = x.reshape(*x.shape[:-1], *self.shape)
            return self.lam * svd_or_nan(X)[1].sum(-1)
        return x.new_zeros(x.shape[:-1])

    def prox(self, v: Tensor, step: float | Tensor) -> Tensor:
        """prox_{step * Psi}(v), batched over leading dims."""
        if self.kind == "l1":
            return soft_threshold(v, step * self.lam)
        if self.kind == "nuclear":
            return singular_value_threshold(v, step * self.lam, self.shape)
        return v

    @property
    def active(self) -> bool:
        return self.kind != "none" and self.lam > 0
