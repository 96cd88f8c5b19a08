"""The shared local-step extras (top-level weight_decay, grad_clip, local_momentum; core.types.LocalExtras),
checked against their definitions rather than against the code that applies them:

  weight decay wd   = training on f_i + (wd/2) ||x||^2 (every gradient of the data loss gains wd x),
  clipping c        = torch.nn.utils.clip_grad_norm_(params, c) on each client's data gradient,
  momentum m        = torch.optim.SGD(momentum=m, weight_decay=wd), fresh each round,
  FedSpeed          = its former implementation (its own weight_decay/grad_clip fields) on the same run,
  momentum_steps    = the displacement of K heavy-ball steps along a constant direction.

The contract over every registered algorithm (0 leaves a run bit for bit, a refused extra is one
message, lanes with extras equal runs alone) is in test_contract.py.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import pytest
import torch

from tests.conftest import make_cfg
from tests.problems import LEAST_SQUARES
from fedbench.algorithms import load_all
from fedbench.algorithms.common import clip_rows, local_sgd, momentum_steps
from fedbench.algorithms.fedspeed import FedSpeed
from fedbench.core.streams import sample_cohort
from fedbench.core.types import LocalExtras
from fedbench.engine.local import LocalWork
from fedbench.engine.loop import initial_state, run
from fedbench.runs.build import build_federation

# minibatches of 4, unequal clients, partial participation, float64
PROBLEM = [*LEAST_SQUARES, "dataset.dim=6", "dataset.samples_per_user=12", "dataset.size_growth=1.2",
           "clients_per_round=3", "batch_size=4", "local_steps=null", "local_epochs=2", "eta_l=0.03", "rounds=3"]
# every algorithm whose local step takes weight decay, with settings that keep its gradients the data
# loss's alone (FedSpeed's ascent gradient g1 is the data loss's by spec A5: no perturbation here)
TAKE_WD = {name: [f"algorithm={name}"] for name in load_all().names() if "weight_decay" in load_all().get(name).local_extras}
TAKE_WD["fedspeed"] += ["algorithm.rho0=0"]
TAKE_WD["fedspeed_ing"] += ["algorithm.rho0=0"]


def _fed(*overrides):
    return build_federation(make_cfg(*PROBLEM, *overrides))[0]


def _regularized(grad_fn, wd: float):
    """The oracle of f_i + (wd/2) ||x||^2: every data gradient gains wd x."""

    def fn(X, x, y, w):
        G, loss = grad_fn(X, x, y, w)
        return G + wd * X, loss + 0.5 * wd * (X * X).sum(1)

    return fn


@pytest.mark.parametrize("name", sorted(TAKE_WD))
def test_weight_decay_is_training_on_the_regularized_loss(name):
    wd = 0.3
    with_wd = _fed(*TAKE_WD[name], f"weight_decay={wd}", "grad_clip=0", "local_momentum=0")
    plain = _fed(*TAKE_WD[name], "weight_decay=0", "grad_clip=0", "local_momentum=0")
    assert int(plain.clients.size.max()) <= 4096  # full_grad sums pieces: one piece, one wd x
    plain.clients = replace(plain.clients, grad_fn=_regularized(plain.clients.grad_fn, wd))
    a, b = run(with_wd).server, run(plain).server
    assert not torch.equal(a["x"], run(_fed(*TAKE_WD[name], "weight_decay=0", "grad_clip=0",
                                             "local_momentum=0")).server["x"])  # the decay matters here
    for key in b:
        torch.testing.assert_close(a[key], b[key], rtol=1e-12, atol=1e-13, msg=lambda m: f"server {key}: {m}")


def test_clip_rows_is_clip_grad_norm_per_client():
    """Each row clipped as torch.nn.utils.clip_grad_norm_ clips the gradients of a model's parameters
    (one global norm over all of them), some rows above the threshold and some below."""
    G = torch.randn(5, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * torch.tensor(
        [0.1, 1.0, 3.0, 10.0, 0.5], dtype=torch.float64)[:, None]
    c = 2.0
    got = clip_rows(G, c)
    for i in range(5):
        params = [torch.zeros(4, dtype=torch.float64, requires_grad=True), torch.zeros(2, 4, dtype=torch.float64,
                                                                                      requires_grad=True)]
        params[0].grad, params[1].grad = G[i, :4].clone(), G[i, 4:].reshape(2, 4).clone()
        torch.nn.utils.clip_grad_norm_(params, c)
        torch.testing.assert_close(got[i], torch.cat([params[0].grad, params[1].grad.reshape(-1)]), rtol=1e-14, atol=0)
    assert (G.norm(dim=1) > c).sum() >= 2 and (G.norm(dim=1) < c).sum() >= 2
    assert torch.equal(clip_rows(G, 0.0), G)


def test_fedavg_with_every_extra_is_torch_sgd_after_clip_grad_norm():
    """FedAvg (FedProx for its method term) written out client by client: loss.backward gives g,
    clip_grad_norm_(c), torch.optim.SGD(lr, momentum=m, weight_decay=wd) built afresh each round."""
    wd, c, m, mu, lr = 0.05, 0.4, 0.7, 0.2, 0.03
    fed = _fed("algorithm=fedprox", f"algorithm.mu={mu}", f"weight_decay={wd}", f"grad_clip={c}", f"local_momentum={m}")
    state = run(copy.deepcopy(fed))
    x, clipped = fed.x0.clone(), 0
    for r in range(3):
        ids = sample_cohort(fed.seed, r, fed.clients.num_clients, 3)
        # every row's minibatch computed (no skipping of clients done with their steps): row k is client k
        work = LocalWork(replace(fed.clients, skip_done=False), torch.as_tensor(ids), r, lr, 4, torch.full((3,), 2), None)
        models = []
        for k in range(3):
            w = x.clone().requires_grad_(True)
            opt = torch.optim.SGD([w], lr=lr, momentum=m, weight_decay=wd)
            for t in range(int(work.steps[k])):
                b = work.batch(t)
                g, _ = work.grad(w.detach()[None], type(b)(b.x[k : k + 1], b.y[k : k + 1], b.w[k : k + 1]))
                w.grad = g[0].clone()
                clipped += int(torch.nn.utils.clip_grad_norm_([w], c) > c)
                w.grad += mu * (w.detach() - x)  # FedProx's term, after the clip of the data gradient
                opt.step()
            models.append(w.detach())
        x = torch.stack(models).mean(0)
    assert clipped > 0
    torch.testing.assert_close(state.server["x"], x, rtol=0, atol=1e-12)


def test_momentum_steps_is_the_displacement_of_heavy_ball_steps():
    for m in (0.0, 0.5, 0.9):
        for K in (1, 2, 7, 40):
            x, buf = 0.0, None
            for _ in range(K):
                buf = 1.0 if buf is None else m * buf + 1.0
                x -= buf  # lr = 1, g = 1
            got = momentum_steps(torch.tensor([float(K)], dtype=torch.float64), m)
            assert abs(float(got) - (-x)) < 1e-12, (m, K)


@pytest.mark.parametrize("name", ["scaffold", "fedcm"])
def test_unit_step_estimates_are_exact_under_momentum_on_a_linear_loss(name):
    """On a loss whose gradient is a constant g (zero data gradient, weight decay 0, linear terms only),
    SCAFFOLD's option-II control variate and FedCM's pseudo-gradient read the round's direction
    exactly with a shared momentum (common.momentum_steps), not 1/(1 - m) times it."""
    m, lr = 0.6, 0.05
    fed = _fed(f"algorithm={name}", f"local_momentum={m}", "local_epochs=null", "local_steps=5")
    fed.clients = replace(fed.clients, grad_fn=lambda X, x, y, w: (torch.zeros_like(X), X.new_zeros(X.shape[0])))
    algo, d = fed.algorithm, fed.flat.dim
    g = torch.linspace(-1, 1, d, dtype=torch.float64)
    work = LocalWork(fed.clients, torch.tensor([0, 2]), 0, lr, 4, None, 5, extras=algo.setting.extras)
    x = fed.x0
    if name == "scaffold":  # direction G - c_i + c = g with c = g, c_i = 0
        up, new = algo.client_update({"x": x, "c": g}, {"c": torch.zeros(2, d, dtype=torch.float64)}, work)
        # c_i+ = c_i - c + (x - y_i) / (K_i lr) = -g + g = 0: the client's own (zero) data gradient
        torch.testing.assert_close(new["c"], torch.zeros(2, d, dtype=torch.float64), rtol=0, atol=1e-12)
    else:  # direction alpha G + (1 - alpha) Delta = (1 - alpha) Delta
        up, _ = algo.client_update({"x": x, "momentum": g}, {}, work)
        pseudo = -up["delta"] / up["step_length"][:, None]
        torch.testing.assert_close(pseudo, (1 - algo.alpha) * g.expand(2, -1), rtol=0, atol=1e-12)


@dataclass
class FormerFedSpeed(FedSpeed):
    """FedSpeed as it was before the extras were shared: its own weight_decay and grad_clip, applied in
    its direction (algorithms/fedspeed.py at 438aa91, local_train verbatim)."""

    weight_decay: float = 1e-3
    grad_clip: float = 10.0

    def local_train(self, work, x, anchor, h):
        mu, wd = self.mu, self.weight_decay
        linear = 0.0 if h is None else mu * h

        def direction(t, X, G, batch):
            g = self.perturbed_grad(work, X, G, batch)
            if self.clip_mode == "official":
                return clip_rows(g + linear - mu * anchor, self.grad_clip) + (wd + mu) * X
            return clip_rows(g, self.grad_clip) + wd * X + linear + mu * (X - anchor)

        return local_sgd(work, x, direction)


@pytest.mark.parametrize("mode", ["data_grad", "official"])
def test_fedspeed_with_the_shared_extras_equals_the_former_fedspeed(mode):
    """FedSpeed with perturbation, weight decay and an active clip, 3 rounds of partial participation:
    the shared extras give the former numbers (bit for bit where the arithmetic is the same; the
    official mode adds wd x and mu x apart instead of (wd + mu) x)."""
    wd, c = 0.02, 0.5
    fed = _fed("algorithm=fedspeed", "algorithm.mu=0.3", "algorithm.rho0=0.05", f"algorithm.clip_mode={mode}",
               f"weight_decay={wd}", f"grad_clip={c}")
    assert fed.algorithm.setting.extras == LocalExtras(wd, c, 0.0)
    former = copy.deepcopy(fed)
    old = FormerFedSpeed(mu=0.3, rho0=0.05, clip_mode=mode, weight_decay=wd, grad_clip=c)
    old.setup(replace(fed.algorithm.setting, extras=LocalExtras()))  # its work carries no shared extras
    former.algorithm = old
    a, b = run(fed), run(former)
    for key in b.server:
        if mode == "data_grad":
            assert torch.equal(a.server[key], b.server[key]), key
        else:
            torch.testing.assert_close(a.server[key], b.server[key], rtol=1e-12, atol=1e-14)
    for i, row in b.tables["h"].rows.items():
        torch.testing.assert_close(a.tables["h"].rows[i], row, rtol=1e-12 if mode == "official" else 0,
                                   atol=1e-14 if mode == "official" else 0)
    assert not torch.equal(a.server["x"], run(_fed("algorithm=fedspeed", "algorithm.mu=0.3", "algorithm.rho0=0.05",
                                                   f"algorithm.clip_mode={mode}", "weight_decay=0",
                                                   "grad_clip=0")).server["x"])  # the extras matter here
