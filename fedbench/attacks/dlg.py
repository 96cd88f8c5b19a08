"""Deep Leakage from Gradients (Zhu et al., NeurIPS 2019) against what a server observes.

LoSAC paper §5.4 / spec losac.md §5: train to the attack round r, take exactly what the server
observes from the attacked client (client 0) at round r, turn it into a gradient target G, and
reconstruct the client's features by minimising ||grad_x f_1(x; A_hat, b_1) - G||^2 over A_hat
(labels known to the attacker), with the client's own loss scaling. The reconstruction error
e_k = ||A_hat - A_1||_F is recorded at every attack iteration.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from fedbench.engine.gradients import per_sample_loss
from fedbench.engine.loop import ClientRound, Federation, RunState, client_round, initial_state, run

# What the server sees from the attacked client (at position `i` of the round's cohort), as a
# gradient target (losac.md §5 table).
Observation = Callable[[ClientRound, int], Tensor]


def observed_gradient(received: ClientRound, i: int) -> Tensor:
    """DSGD, FedSGD: the upload holds the client's gradient at x itself (exact)."""
    return received.up["grad"][i]


def observed_first_upload(received: ClientRound, i: int) -> Tensor:
    """MimeSVRG: sub-step 1 uploads the full local gradient grad f_1(x; D_1) (exact)."""
    return received.prepared["grad"][i]


def observed_model_change(received: ClientRound, i: int) -> Tensor:
    """FedAvg, SCAFFOLD, LoSAC, ...: G = (x - x_1^+) / (eta T), the mean local search direction."""
    key = next(k for k in ("delta", "dy", "dx") if k in received.up)  # the model change, as each algorithm names it
    return -received.up[key][i] / (received.lr * float(received.steps[i]))


OBSERVATIONS: dict[str, Observation] = {
    "dsgd": observed_gradient,
    "fedsgd": observed_gradient,
    "mime_svrg": observed_first_upload,
}


def observation_for(algorithm: str) -> Observation:
    return OBSERVATIONS.get(algorithm, observed_model_change)


def observe(fed: Federation, attack_round: int, client: int = 0) -> tuple[Tensor, Tensor]:
    """Train rounds 1..r-1, then run round r's client half (engine.loop.client_round) with `client`
    as the cohort, so that it is observed whether or not round r would sample it (a two-phase
    round's second broadcast then sees its first upload alone); returns (x^r, G)."""
    rounds, fed.rounds = fed.rounds, attack_round - 1
    try:
        state: RunState = run(fed, initial_state(fed))
    finally:
        fed.rounds = rounds
    received = client_round(fed, state, ids=[client])
    target = observation_for(fed.algorithm.name)(received, 0)
    return fed.algorithm.model(state.server), target


def dlg_attack(
    fed: Federation,
    x: Tensor,
    target: Tensor,
    client: int = 0,
    iterations: int = 100,
    lr: float = 1e-3,
    optimizer: str = "gd",
    init: str = "normal",
    seed: int = 0,
) -> list[float]:
    """Gradient matching by gradient descent (`gd`, the paper's) or L-BFGS; returns e_0..e_K."""
    idx = fed.clients.index[client, : int(fed.clients.size[client])]
    truth, labels = fed.clients.x[idx], fed.clients.y[idx]
    weight = 1.0 if fed.clients.loss_scale == "sum" else 1.0 / len(idx)
    loss_of = per_sample_loss(fed.dataset.task)
    params = {k: v.detach() for k, v in fed.flat.unflatten(x).items()}
    names = fed.flat.names
    generator = torch.Generator(device="cpu").manual_seed(seed)
    if init == "zeros":
        dummy = torch.zeros_like(truth)
    else:
        dummy = torch.randn(truth.shape, generator=generator, dtype=truth.dtype).to(truth.device)
    dummy.requires_grad_(True)
    leaves = [params[n].requires_grad_(True) for n in names]

    def matching_loss() -> Tensor:
        loss = weight * loss_of(fed.flat(params, dummy), labels).sum()
        grads = torch.autograd.grad(loss, leaves, create_graph=True)
        return (torch.cat([g.reshape(-1) for g in grads]) - target).pow(2).sum()

    errors = [float((dummy.detach() - truth).norm())]
    if optimizer == "lbfgs":
        opt = torch.optim.LBFGS([dummy], lr=lr, max_iter=1, history_size=20)

        def closure():
            opt.zero_grad()
            value = matching_loss()
            value.backward()
            return value

        for _ in range(iterations):
            opt.step(closure)
            errors.append(float((dummy.detach() - truth).norm()))
    else:
        for _ in range(iterations):
            (g,) = torch.autograd.grad(matching_loss(), [dummy])
            with torch.no_grad():
                dummy -= lr * g
            errors.append(float((dummy.detach() - truth).norm()))
    return errors
