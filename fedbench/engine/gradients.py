"""Gradient oracles over a cohort: `vmap` (one batched program through torch.func), `stacked`
(one batched program of plain autograd over the clients' stacked layers: Sequential models of
linear, conv and pool layers) and `loop` (client by client).

All compute, for every client s in the chunk, grad_x sum_b w[s,b] * loss(model(x_s; xb[s,b]), yb[s,b])
with the same per-sample weights, so they agree to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import grad_and_value, vmap

from fedbench.core.errors import ConfigError, unknown_choice
from fedbench.models.cpu_pool import with_fast_pooling
from fedbench.models.flat import FlatModel
from fedbench.models.stacked import stacked_forward, why_not_stacked

EXECUTORS = ("vmap", "stacked", "loop")


def per_sample_loss(task: str, reduction: str = "none") -> Callable[[Tensor, Tensor], Tensor]:
    if task == "classification":
        return lambda out, y: F.cross_entropy(out, y, reduction=reduction)
    if task == "binary":
        return lambda out, y: F.binary_cross_entropy_with_logits(out.squeeze(-1), y, reduction=reduction)
    if task == "regression":  # (<x, a> - y)^2, no 1/2 (LoSAC eq. 20)
        return lambda out, y: F.mse_loss(out.squeeze(-1), y, reduction=reduction)
    raise unknown_choice("task", task, ("classification", "binary", "regression"))


GradFn = Callable[[Tensor, Tensor, Tensor, Tensor | None], tuple[Tensor, Tensor]]


# On a CPU, one vmap'd gradient call costs ~1 ms of Python before any compute, the loop ~0.1-0.4 ms
# per client (mclr, mlp_2nn at B=20, scripts/bench_engine.py --unequal): fewer rows than this run
# as a loop. Which path runs depends only on the row count, so a run repeats bit for bit.
LOOP_BELOW = 5


def make_grad_fn(flat: FlatModel, task: str, executor: str, loop_below: int = 0, batched: GradFn | None = None) -> GradFn:
    """Returns f(X [s,d], xb [s,B,...], yb [s,B], wb [s,B] or None) -> (G [s,d], weighted loss [s]);
    wb = None means the plain minibatch mean (every weight 1/B), one fused reduction cheaper.
    With `loop_below`, a vmap executor hands calls on fewer rows to the loop (the last clients
    still working in a round of unequal local work). The loop and stacked executors hand calls under a
    torch.func transform (FedNL's Hessians: jvp of the gradient), where only vmap composes, to `batched`
    (made if not given)."""
    if executor == "vmap" and loop_below > 0:
        batched = make_grad_fn(flat, task, "vmap")
        loop = make_grad_fn(flat, task, "loop", batched=batched)

        def grad_hybrid(X: Tensor, xb: Tensor, yb: Tensor, wb: Tensor | None) -> tuple[Tensor, Tensor]:
            return (loop if X.shape[0] < loop_below else batched)(X, xb, yb, wb)

        return grad_hybrid
    loss_of, mean_loss_of = per_sample_loss(task), per_sample_loss(task, "mean")

    def weighted_loss(params: dict[str, Tensor], xb: Tensor, yb: Tensor, wb: Tensor) -> Tensor:
        return (wb * loss_of(flat(params, xb), yb)).sum()

    def mean_loss(params: dict[str, Tensor], xb: Tensor, yb: Tensor) -> Tensor:
        return mean_loss_of(flat(params, xb), yb)

    if executor == "vmap":
        weighted, mean = vmap(grad_and_value(weighted_loss)), vmap(grad_and_value(mean_loss))

        def grad_vmap(X: Tensor, xb: Tensor, yb: Tensor, wb: Tensor | None) -> tuple[Tensor, Tensor]:
            params = flat.unflatten(X)
            grads, loss = mean(params, xb, yb) if wb is None else weighted(params, xb, yb, wb)
            return flat.flatten(grads, X.shape[0]), loss

        return grad_vmap
    if executor == "stacked":
        try:
            forward = stacked_forward(flat.module)
        except ValueError as exc:
            raise ConfigError(f"engine.executor=stacked runs Sequential models of Linear, Conv2d, MaxPool2d, Flatten and "
                              f"elementwise layers; this model's {exc}. Use vmap, loop or auto") from None

        def grad_stacked(X: Tensor, xb: Tensor, yb: Tensor, wb: Tensor | None) -> tuple[Tensor, Tensor]:
            s, B = yb.shape[:2]
            # leaves per parameter, not one for X: slicing X inside the graph would add a zero [s, d] per slice
            params = [v.detach().requires_grad_() for v in flat.unflatten(X).values()]
            with torch.enable_grad():
                out = forward(params, xb)
                losses = loss_of(out.reshape(s * B, *out.shape[2:]), yb.reshape(s * B, *yb.shape[2:])).view(s, B)
                loss = losses.mean(1) if wb is None else (wb * losses).sum(1)
                grads = torch.autograd.grad(loss.sum(), params)  # clients are independent: each row its own gradient
            return torch.cat([g.reshape(s, -1) for g in grads], dim=1), loss.detach()

        return outside_transforms(grad_stacked, batched or make_grad_fn(flat, task, "vmap"))
    if executor == "loop":
        # Plain autograd on a private copy of the module whose parameters are pointed at each
        # client's row in turn: the per-client loop of research code, without its state_dict copies.
        # Its max-pools run as a CPU runs them fastest, with the same numbers (models.cpu_pool).
        module = with_fast_pooling(flat.module)
        params = list(module.parameters())

        def client_grads(X: Tensor, i: int, xb: Tensor, yb: Tensor, wb: Tensor | None) -> tuple[tuple[Tensor, ...], Tensor]:
            """Row i's parameter gradients and loss; the module's parameters are then views of X[i]."""
            offset = 0
            for p, size in zip(params, flat.sizes):
                p.data = X[i, offset : offset + size].view_as(p)
                offset += size
            with torch.enable_grad():
                out = module(xb)
                loss = mean_loss_of(out, yb) if wb is None else (wb * loss_of(out, yb)).sum()
                return torch.autograd.grad(loss, params), loss.detach()

        def grad_loop(X: Tensor, xb: Tensor, yb: Tensor, wb: Tensor | None) -> tuple[Tensor, Tensor]:
            G = torch.empty_like(X)
            losses = X.new_empty(X.shape[0])
            for i in range(X.shape[0]):
                grads, losses[i] = client_grads(X, i, xb[i], yb[i], None if wb is None else wb[i])
                torch.cat([g.reshape(-1) for g in grads], out=G[i])
            return G, losses

        def descend_loop(X: Tensor, pairs: list[tuple[int, int]], xb: Tensor, yb: Tensor, wb: Tensor | None,
                         lr: float) -> None:
            """For each (i, j) of `pairs`: X[i] <- X[i] - lr * its gradient on batch row j, in place,
            parameter by parameter as torch.optim.SGD steps: no [s, d] gradient is made (ResNet-18-GN,
            d = 11M: its copy and a fresh X were ~1/3 of a step); bit for bit X.sub(G, alpha=lr)."""
            for i, j in pairs:
                grads, _ = client_grads(X, i, xb[j], yb[j], None if wb is None else wb[j])
                with torch.no_grad():
                    torch._foreach_add_(params, grads, alpha=-lr)

        grad = outside_transforms(grad_loop, batched or make_grad_fn(flat, task, "vmap"))
        grad.descend = descend_loop  # type: ignore[attr-defined]  # LocalWork.descend's in-place step
        return grad
    raise unknown_choice("engine.executor", executor, (*EXECUTORS, "auto"))


def outside_transforms(plain: GradFn, batched: GradFn) -> GradFn:
    """`plain` (plain autograd) for ordinary calls; `batched` (vmap) for calls under a torch.func
    transform, which only vmap's gradient composes with."""

    def grad(X: Tensor, xb: Tensor, yb: Tensor, wb: Tensor | None) -> tuple[Tensor, Tensor]:
        return (batched if torch._C._functorch.is_functorch_wrapped_tensor(X) else plain)(X, xb, yb, wb)

    return grad


CONV_NETS = ("cnn", "lenet", "resnet")


def auto_loop_below(executor: str, device: torch.device) -> int:
    """Rows below which `auto`'s vmap executor runs the loop: on a CPU only (a GPU's kernel
    launches make the loop the slower one at any count)."""
    return LOOP_BELOW if executor == "vmap" and device.type == "cpu" else 0


def eval_batch_size(model_name: str, device: torch.device) -> int:
    """Samples per evaluation call: conv nets on a CPU evaluate twice as fast in batches of 128 as
    of 4,096 (their activations stay in cache; cnn on Fashion-MNIST: 1.8 s vs 3.6 s for 10,000
    test images), the others gain nothing from smaller ones."""
    return 128 if device.type == "cpu" and model_name.startswith(CONV_NETS) else 4096


def auto_executor(model_name: str, module: torch.nn.Module, device: torch.device) -> str:
    """On accelerators, conv nets the stacked executor runs go stacked (grouped cuDNN convolutions;
    one gradient of 10 clients on an H100: cnn 3.4 ms vs vmap 5.4, lenet 3.1 vs 6.3; docs/engine.md),
    the rest vmap. On a CPU, conv nets run near the FLOP peak already as a loop (a grouped
    convolution is slower there); fully connected models run stacked (a fraction of vmap's per-call
    cost), the others vmap."""
    conv = model_name.startswith(CONV_NETS)
    if device.type != "cpu":
        return "stacked" if conv and why_not_stacked(module) is None else "vmap"
    if conv:
        return "loop"
    return "stacked" if why_not_stacked(module) is None else "vmap"
