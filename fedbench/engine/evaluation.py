"""Evaluation of the global model in large batches."""

from __future__ import annotations

import torch
from torch import Tensor

from fedbench.engine.gradients import per_sample_loss
from fedbench.models.flat import FlatModel


@torch.no_grad()
def evaluate(flat: FlatModel, x: Tensor, inputs: Tensor, targets: Tensor, task: str, batch: int = 4096) -> dict[str, float]:
    """Mean loss and accuracy (classification/binary) of the flat model x on (inputs, targets)."""
    loss_of = per_sample_loss(task)
    params = flat.unflatten(x)
    total_loss, correct = 0.0, 0
    for start in range(0, len(targets), batch):
        out = flat(params, inputs[start : start + batch])
        y = targets[start : start + batch]
        total_loss += float(loss_of(out, y).sum())
        if task == "classification":
            correct += int((out.argmax(1) == y).sum())
        elif task == "binary":
            correct += int(((out.squeeze(-1) > 0).to(y.dtype) == y).sum())
    n = max(len(targets), 1)
    metrics = {"loss": total_loss / n}
    if task != "regression":
        metrics["accuracy"] = correct / n
    return metrics
