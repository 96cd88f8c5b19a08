"""In-memory data sets: whole train/test splits as tensors, moved to the device once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from fedbench.data.population import Population

TASKS = ("classification", "binary", "regression")


@dataclass(frozen=True)
class Dataset:
    """A data set held in memory.

    Attributes:
      x_train, y_train, x_test, y_test: tensors; labels are int64 for classification,
        float for `binary` (0/1) and `regression`.
      num_classes: output width of the model (1 for binary and regression).
      task: one of TASKS; decides the per-sample loss.
      name: registry name, for records.
      model_metrics: optional extra metrics of the evaluated flat model (e.g. recovery error and
        rank of a matrix estimate), logged with the test metrics.
    """

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    num_classes: int
    task: str = "classification"
    name: str = ""
    train_owner: Tensor | None = None  # client id of each training sample, for natural partitions
    augment: Callable[[Tensor, Tensor], Tensor] | None = None  # minibatch transform (x, keys) -> x, data/augment.py
    model_metrics: Callable[[Tensor], dict[str, float]] | None = None
    # clients made on demand (x_train/y_train then hold no rows: the population has them)
    population: Population | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def num_train(self) -> int:
        return int(self.population.sizes.sum()) if self.population is not None else len(self.y_train)

    def to_binary(self, positive: list[int]) -> Dataset:
        """A binary task: label 1 for the `positive` classes, 0 otherwise (DLG's logistic regression)."""
        pos = torch.tensor(list(positive))

        def relabel(y: Tensor) -> Tensor:
            return torch.isin(y, pos).float()

        return replace(self, y_train=relabel(self.y_train), y_test=relabel(self.y_test), num_classes=1, task="binary")

    def cast(self, dtype: torch.dtype) -> Dataset:
        """Floating tensors (inputs, regression/binary targets) to `dtype`; labels stay int64."""
        return replace(
            self,
            x_train=_cast(self.x_train, dtype),
            y_train=_cast(self.y_train, dtype),
            x_test=_cast(self.x_test, dtype),
            y_test=_cast(self.y_test, dtype),
        )

    def to(self, device: torch.device | str) -> Dataset:
        return replace(
            self,
            x_train=self.x_train.to(device),
            y_train=self.y_train.to(device),
            x_test=self.x_test.to(device),
            y_test=self.y_test.to(device),
            train_owner=None if self.train_owner is None else self.train_owner.to(device),
        )


def _cast(t: Tensor, dtype: torch.dtype) -> Tensor:
    return t.to(dtype) if t.is_floating_point() else t


def standardize_images(x: Tensor, mean: float | None = None, std: float | None = None) -> Tensor:
    """uint8 [n, H, W] or [n, C, H, W] -> float32 [n, C, H, W] in [0, 1], then (x - mean) / std."""
    x = x.float() / 255.0
    if x.dim() == 3:
        x = x.unsqueeze(1)
    if mean is not None and std is not None:
        x = (x - mean) / std
    return x
