"""Non-convex composite FL (Zhang, Hu, Johansson, arXiv:2502.03958): Figs. 2-4 (spec: papers/composite.md).

The figures' plotted values and the settings sentences were lost in the source text, so the published
numbers are the prose's qualitative statements; the checks are the spec's §7.2 thresholds.
"""

from __future__ import annotations

import numpy as np

from fedbench.reproduce.entry import Arm, Claim, Metric, Reproduction, Scale, register, rounds_to
from fedbench.reproduce.compare import best, first_to_target, seeds, value

PAPER = "composite"
ERR = Metric("final_rel_error", "at", "stationarity")
TAIL = Metric("tail_rel_error", "mean_last", "stationarity", last=100)


def fig2_arms(taus) -> tuple[Arm, ...]:
    arms = []
    for tau in taus:
        group, steps = f"tau={tau}", (f"local_steps={tau}",)
        arms += [Arm("fedcomp", group, steps), Arm("FedDA", group, (*steps, "algorithm=fedda")),
                 Arm("FedMid", group, steps, preset="composite/fig2_fedmid"),
                 Arm("Fast-FedDA", group, (*steps, "algorithm=fastfedda"))]
    return tuple(arms)


def check_fig2(table, scale: str) -> list[Claim]:
    """composite.md §7.2 targets 9-15 with the spec's thresholds at every scale (a ci run that is too short to
    reach them does not hold, with the numbers)."""
    e = {(m, g): seeds(table, m, g, "final_rel_error") for m, g in zip(table["method"], table["group"])}
    c1, d1, mid1, fast1 = (e[(m, "tau=1")] for m in ("fedcomp", "FedDA", "FedMid", "Fast-FedDA"))
    c5, d5, mid5, fast5 = (e[(m, "tau=5")] for m in ("fedcomp", "FedDA", "FedMid", "Fast-FedDA"))
    d5_min = seeds(table, "FedDA", "tau=5", "min_rel_error")
    r1, r5 = (seeds(table, "fedcomp", g, "rounds_to_0.0001") for g in ("tau=1", "tau=5"))
    reached = np.isfinite(r1)  # target 15: the rounds part on the seeds where tau = 1 reaches 1e-4 within R

    def errors(**named) -> str:
        return ", ".join(f"{k} [{', '.join(f'{x:.3g}' for x in np.asarray(v, dtype=float))}]" for k, v in named.items())

    return [
        Claim("tau = 1: fedcomp and FedDA converge at the same rate (|log10 ratio| <= 0.05 at R; target 9)",
              bool(np.all(np.abs(np.log10(c1 / d1)) <= 0.05)), f"max {np.abs(np.log10(c1 / d1)).max():.3f}"),
        Claim("tau = 1: FedMid is the worst (>= 10x FedDA's error) and plateaus (e_R >= 0.05; target 10)",
              bool(np.all(mid1 >= 10 * d1) and np.all(mid1 >= 0.05)), errors(FedMid=mid1, FedDA=d1)),
        Claim("tau = 1: Fast-FedDA is slower than fedcomp (>= 5x its error; target 11)", bool(np.all(fast1 >= 5 * c1)),
              errors(**{"Fast-FedDA": fast1, "fedcomp": c1})),
        Claim("tau = 5: fedcomp converges exactly despite drift (median e_R <= 1e-8, every seed <= 1e-3; target 12)",
              float(np.median(c5)) <= 1e-8 and bool(np.all(c5 <= 1e-3)), f"median {np.median(c5):.2e}"),
        Claim("tau = 5: FedDA stalls in a neighbourhood (min_r e_r >= 5e-4 and >= 50x fedcomp's error; target 13)",
              bool(np.all(d5_min >= 5e-4) and np.all(d5 >= 50 * c5)), errors(FedDA_min=d5_min, FedDA=d5, fedcomp=c5)),
        Claim("tau = 5: FedMid (>= 3x FedDA) and Fast-FedDA (>= 10x fedcomp) are worse (target 14)",
              bool(np.all(mid5 >= 3 * d5) and np.all(fast5 >= 10 * c5)), errors(FedMid=mid5, FedDA=d5, **{"Fast-FedDA": fast5})),
        Claim("local updates pay off: fedcomp's error at tau = 5 is below tau = 1 on every seed, and where tau = 1 reaches "
              "1e-4 tau = 5 needs at most half its rounds (target 15)",
              bool(np.all(c5 < c1) and np.all(r5[reached] <= r1[reached] / 2)),
              errors(**{"e_R tau=5": c5, "e_R tau=1": c1, "rounds to 1e-4 tau=5": r5, "rounds to 1e-4 tau=1": r1})),
    ]


register(Reproduction(
    name="composite/fig2", paper=PAPER, title="Fig. 2: sparse logistic regression, full gradients, relative error, tau = 1 and tau > 1",
    claim="at tau = 1 fedcomp and FedDA coincide and FedMid/Fast-FedDA are slower; at tau > 1 fedcomp still converges "
          "exactly while FedDA only reaches a neighbourhood",
    metrics=(ERR, Metric("min_rel_error", "min", "stationarity"), rounds_to(1e-4, "stationarity", mode="min")),
    scales={
        "full": Scale(fig2_arms((1, 5)), (0, 1, 2, 3, 4), "cpu", "8 arms x 5 seeds x 2000 rounds: ~5 min on 2 CPU cores"),
        "ci": Scale(fig2_arms((1, 5)), (1, 2, 3), "cpu", "~2 min on 2 CPU cores", config="composite/fig2/ci",
                    note="seeds 1-3, 600 rounds instead of 2000; the spec's thresholds (composite.md §7.2)"),
    },
    check=check_fig2, plot=("stationarity",), plot_log=("stationarity",),
))


def fig3_arms(bs) -> tuple[Arm, ...]:
    methods = {"fedcomp": (), "FedDA": ("algorithm=fedda",), "Fast-FedDA": ("algorithm=fastfedda",)}
    return tuple(Arm(m, f"b={b}", (f"batch_size={b}", *o)) for b in bs for m, o in methods.items())


def check_fig3(table, scale: str) -> list[Claim]:
    c1, c20 = seeds(table, "fedcomp", "b=1", "tail_rel_error"), seeds(table, "fedcomp", "b=20", "tail_rel_error")
    da, fast = seeds(table, "FedDA", "b=20", "tail_rel_error"), seeds(table, "Fast-FedDA", "b=20", "tail_rel_error")
    return [
        Claim("the batch size shrinks fedcomp's neighbourhood: b = 20 <= 1/3 of b = 1 on every seed", bool(np.all(3 * c20 <= c1)),
              f"ratios {np.round(c1 / c20, 1).tolist()}"),
        Claim("b = 20: fedcomp beats FedDA and Fast-FedDA (median ratio >= 2)",
              float(np.median(da / c20)) >= 2 and float(np.median(fast / c20)) >= 2,
              f"FedDA {np.median(da / c20):.1f}x, Fast-FedDA {np.median(fast / c20):.1f}x"),
    ]


register(Reproduction(
    name="composite/fig3", paper=PAPER, title="Fig. 3: sparse logistic regression, minibatch gradients b = 1 and 20, tau = 5",
    claim="fedcomp converges to a neighbourhood that shrinks from b = 1 to b = 20 and beats FedDA and Fast-FedDA",
    metrics=(TAIL, ERR),
    scales={
        "full": Scale(fig3_arms((1, 20)), (0, 1, 2, 3, 4), "cpu", "6 arms x 5 seeds x 2000 rounds: ~5 min on 2 CPU cores"),
        "ci": Scale(fig3_arms((1, 20)), (1, 2, 3), "cpu", "~3 min on 2 CPU cores", config="composite/fig3/ci",
                    note="seeds 1-3, 600 rounds"),
    },
    check=check_fig3, plot=("stationarity",), plot_log=("stationarity",),
))

def check_fig4(table, g: str) -> Claim:
    """fedcomp's accuracy >= FedDA's at rounds 50, 100, 200 and it reaches 95% strictly first (an unreached
    target never wins, accuracies that are all the same show nothing)."""
    text = f"{g}: fedcomp's accuracy >= FedDA's at rounds 50, 100, 200 and it reaches 95% first"
    parts = [best(text, ("fedcomp", value(table, "fedcomp", g, m)), {"FedDA": value(table, "FedDA", g, m)}) for m in ("acc@50", "acc@100", "acc@200")]
    parts.append(first_to_target(text, ("fedcomp", value(table, "fedcomp", g, "rounds_to_0.95")),
                                 {"FedDA": value(table, "FedDA", g, "rounds_to_0.95")}, strict=True))
    labels = ("acc@50", "acc@100", "acc@200", "rounds to 95%")
    return Claim(text, all(c.holds for c in parts), "; ".join(f"{k}: {c.detail}" for k, c in zip(labels, parts)))


FIG4_METRICS = (Metric("acc@50", "at", at=50, scale=100), Metric("acc@100", "at", at=100, scale=100),
                Metric("acc@200", "at", at=200, scale=100), rounds_to(0.95))
register(Reproduction(
    name="composite/fig4", paper=PAPER, title="Fig. 4: CNN on the heterogeneous MNIST split, tau = 5 and 10, fedcomp vs FedDA",
    claim="fedcomp reaches a higher test accuracy in fewer rounds than FedDA for both tau",
    metrics=FIG4_METRICS,
    scales={"full": Scale(tuple(Arm(m, f"tau={t}", (f"local_steps={t}", *o)) for t in (5, 10)
                                for m, o in (("fedcomp", ()), ("FedDA", ("algorithm=fedda",)))), (0, 1, 2), "gpu",
                          "4 arms x 3 seeds x 200 rounds of a 307k-parameter CNN: ~1 GPU-hour (CPU: ~10 h)", ("mnist",))},
    check=lambda table, scale: [check_fig4(table, g) for g in ("tau=5", "tau=10")],
))
