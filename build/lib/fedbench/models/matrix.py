"""The low-rank matrix model of LoSAC §5.5 (eq. 20): prediction <X, D> for X in R^{d x d}."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from fedbench.models.zoo import MODELS


class MatrixModel(nn.Module):
    """<X, D> for inputs D [n, rows, cols] (or flattened); X starts at zero (LoSAC §4.2).
    The flat parameter vector is vec(X) row-major, the layout Regularizer('nuclear') reshapes."""

    def __init__(self, rows: int, cols: int):
        super().__init__()
        self.X = nn.Parameter(torch.zeros(rows, cols))

    def forward(self, inputs: Tensor) -> Tensor:
        return (inputs.flatten(1) @ self.X.reshape(-1)).unsqueeze(-1)


@MODELS.register("matrix", "matrix model <X, D>, X in R^{d x d} zero-initialised (low-rank sensing)")
def matrix(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    if len(input_shape) == 2:
        return MatrixModel(*input_shape)
    side = math.isqrt(math.prod(input_shape))
    if side * side != math.prod(input_shape):
        raise ValueError(f"the matrix model needs [d, d] (or d*d) inputs, got {input_shape}")
    return MatrixModel(side, side)
