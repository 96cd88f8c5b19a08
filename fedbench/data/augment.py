"""Training-time augmentation of device minibatches, drawn from counter-based keys.

A transform maps (x [s, B, C, H, W], keys [s, B]) to augmented x; `keys` are per-sample hashes
of (seed, round, client, local step, position) (engine/local.py), so the draws do not depend on
chunking, executor or device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedbench.core.streams import hash_keys


@dataclass(frozen=True)
class RandomCropFlip:
    """fedspeed.md §4.1: horizontal flip with probability `flip_prob`; with probability `crop_prob`
    zero-pad by `pad` pixels and crop back at a uniform offset in [0, 2 pad]^2 (the thesis' code
    crops half of the time; torchvision's RandomCrop is crop_prob = 1). Applied to the normalised
    tensor, so the zero padding is the channel mean."""

    pad: int = 4
    crop_prob: float = 0.5
    flip_prob: float = 0.5

    def __call__(self, x: Tensor, keys: Tensor) -> Tensor:
        lead, (c, h, w) = x.shape[:-3], x.shape[-3:]
        x = x.reshape(-1, c, h, w)
        keys = keys.reshape(-1)

        def u(tag: int) -> Tensor:
            return hash_keys(keys, tag, device=x.device).double() / 2.0**32

        flip = u(1) < self.flip_prob
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
        if self.pad > 0 and self.crop_prob > 0:
            span = 2 * self.pad + 1
            crop = u(2) < self.crop_prob
            dy = torch.where(crop, (u(3) * span).long().clamp(max=span - 1), self.pad)
            dx = torch.where(crop, (u(4) * span).long().clamp(max=span - 1), self.pad)
            padded = torch.nn.functional.pad(x, (self.pad,) * 4)
            rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None].expand(-1, c, h, w + 2 * self.pad)
            x = padded.gather(2, rows)
            cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :].expand(-1, c, h, w)
            x = x.gather(3, cols)
        return x.reshape(*lead, c, h, w)


def image_augment(augment: bool, pad: int, crop_prob: float, flip_prob: float = 0.5) -> RandomCropFlip | None:
    from fedbench.core.errors import check

    check(pad >= 0, f"dataset.augment_pad must be >= 0, got {pad}")
    check(0.0 <= crop_prob <= 1.0, f"dataset.augment_crop_prob must be in [0, 1], got {crop_prob}")
    return RandomCropFlip(pad, crop_prob, flip_prob) if augment else None
