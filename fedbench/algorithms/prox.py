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


def singular_value_threshold(v: Tensor, threshold: float | Tensor, shape: tuple[int, int]) -> Tensor:
    """prox of threshold * ||.||_* for x = vec(X), X of `shape`; batched over leading dims
    (one batched SVD for the whole cohort)."""
    lead = v.shape[:-1]
    X = v.reshape(*lead, *shape)
    U, S, Vh = torch.linalg.svd(X, full_matrices=False)
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

    def value(self, x: Tensor) -> Tensor:
        if self.kind == "l1":
            return self.lam * x.abs().sum(-1)
        if self.kind == "nuclear":
            X = x.reshape(*x.shape[:-1], *self.shape)
            return self.lam * torch.linalg.svdvals(X).sum(-1)
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
