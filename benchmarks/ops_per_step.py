"""Count the operators one stacked ensemble training step dispatches, at 1, 4 and 16 members.

On a GPU a small training step is bound by kernel launches, about one per operator; an ensemble
trains E members in the time of one only while that count does not grow with E. This counts, on
the CPU under torch.profiler, the aten operators of one step of `ensemble.train_ensemble`'s loop
(forward, loss, backward, gradient norms, the divergence mask, AdamW), after a warm-up step, on
the "stacked" path:

    PYTHONPATH=src python benchmarks/ops_per_step.py [--members 1 4 16] [--rates 1]
        [--paths skip mask] [--json]

Each of the optimizer's paths is counted (`stacked_adamw.PATHS`: "skip", a CPU's, and "mask", a
GPU's), whatever the device that counts.

"dispatched" counts the operators the step calls (those not called by another aten operator);
"nested" adds those the CPU's kernels call inside them (a foreach operator runs on the CPU as one
operator per tensor, on a GPU as one launch). The step profiled draws no batches: fresh examples
are drawn every ONLINE_CHUNK steps, a shuffle once an epoch, on the host.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import torch
from torch.profiler import ProfilerActivity, profile

from blocklab.experiments.depth_width import shape as lm_shape
from blocklab.fitting import ensemble
from blocklab.fitting.ensemble import Ensemble, StackedAdamW
from blocklab.fitting.monitor import DeviceMonitors, TrialMonitor
from blocklab.fitting.network import init_model, task_data
from blocklab.fitting.stacked_adamw import PATHS
from blocklab.fitting.train import autocast, backward, lr_factor
from blocklab.models import parse_arm
from blocklab.specs import NetShape, TrainConfig, TrialSpec

TEXT = {"vocab": 300, "seq_len": 8, "n_train": 128, "max_chars": 50000}
# (task, options, arm, shape): the engine's small trial, and a depth-width language model
CASES = {
    "teacher": ("teacher", {}, "3", NetShape(2, 8, norm="layer")),
    "lm": ("text", TEXT, "softmax_attention", lm_shape(2, 16)),
}
MEMBERS = (1, 4, 16)


def specs(case: str, members: int, rates: int = 1) -> list[TrialSpec]:
    """`members` trials of one architecture, as a sweep groups them: seeds 0, 1, ... at `rates`
    learning rates taken in turn (one: a sweep over seeds, as depth-width's repeats)."""
    task, options, arm, shape = CASES[case]
    cfg = TrainConfig(steps=100, batch_size=16, eval_points=2)
    grid = [3e-3 * 2**r for r in range(rates)]
    return [
        TrialSpec(
            task,
            options,
            parse_arm(arm),
            0,
            shape,
            dataclasses.replace(cfg, lr=grid[e % rates]),
            e,
            None,
        )
        for e in range(members)
    ]


def training_step(group: list[TrialSpec], path: str):
    """One step of `train_ensemble`'s loop on the group, its optimizer on `path`, as a function
    of the step number."""
    datas = [task_data(s.task, s.task_options, s.seed) for s in group]
    models = [init_model(s, d, "cpu", s.seed) for s, d in zip(group, datas, strict=True)]
    cfg, seeds = group[0].train, [s.seed for s in group]
    ens = Ensemble(models, "stacked")
    draw, device = ensemble._batches(datas, cfg.batch_size, seeds)
    trained = [p for p in ens.params.values() if p.requires_grad]
    opt = StackedAdamW(trained, [s.train.lr for s in group], cfg.weight_decay, path=path)
    monitors = [TrialMonitor(cfg, 0.0) for _ in group]
    pending = DeviceMonitors(monitors, cfg.blowup, device)
    cast = autocast(device, cfg.precision)
    kind = datas[0].kind

    def step(n: int) -> None:
        losses, norms = backward(
            ens, next(draw), kind, cast, opt.zero_grad, opt.grad_norms, pending.live
        )
        pending.add(n, losses, norms)
        opt.step(lr_factor(n - 1, cfg), pending.live, norms, cfg.clip)

    return step


def count(events) -> dict[str, int]:
    """The aten operators among profiler events: those the code called, and all of them."""
    aten = [e for e in events if e.name.startswith("aten::")]

    def outermost(e) -> bool:
        parent = e.cpu_parent
        while parent is not None:
            if parent.name.startswith("aten::"):
                return False
            parent = parent.cpu_parent
        return True

    return {"dispatched": sum(outermost(e) for e in aten), "nested": len(aten)}


def step_ops(case: str, members: int, rates: int = 1, path: str = "skip") -> dict[str, int]:
    """The operator counts of the second step of an ensemble of `members` members."""
    torch.manual_seed(0)
    step = training_step(specs(case, members, rates), path)
    step(1)  # warm-up: the first step allocates the gradients and the optimizer's state
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(2)
    return count(prof.events())


def main(argv: list[str] | None = None) -> dict[str, dict[str, dict[int, dict[str, int]]]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, nargs="+", default=list(MEMBERS))
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--rates", type=int, default=1, help="distinct learning rates (default 1)")
    p.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    p.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    table = {
        path: {c: {m: step_ops(c, m, args.rates, path) for m in args.members} for c in args.cases}
        for path in args.paths
    }
    if args.json:
        print(json.dumps(table, indent=1))
        return table
    print(f"{'path':<5} {'case':<8} {'members':>7} {'dispatched':>10} {'nested':>7}")
    for path, cases in table.items():
        for case, rows in cases.items():
            for m, n in rows.items():
                print(f"{path:<5} {case:<8} {m:>7} {n['dispatched']:>10} {n['nested']:>7}")
    return table


if __name__ == "__main__":
    main()
