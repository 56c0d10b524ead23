"""Where a language-model training step spends its time: one ensemble step of E members on
stacked weights against E steps of one network at a time, under torch.profiler.

    python benchmarks/lm_step_profile.py [--width 16] [--members 16] [--vocab 256] [--seq-len 32]
        [--batch-size 32] [--threads 1] [--steps 5]

The networks are `blocklab bench`'s language models (`bench._lm_net`: token ids, learned
positions, causal softmax attention, ReLU 4x feed-forward, layer norm) on its random tokens. Each
step is what the trainers do per step: forward, loss, backward, gradient norms, AdamW. Printed:
CPU milliseconds per model-step (process time, so other work on a shared machine counts less),
the matmul share (bmm, mm, addmm, baddbmm) of the profiled self CPU time, and the top operators.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from blocklab import bench
from blocklab.fitting.ensemble import Ensemble, StackedAdamW
from blocklab.tasks.base import loss, unit_losses

MATMULS = ("aten::bmm", "aten::mm", "aten::addmm", "aten::baddbmm")


def ensemble_step(nets, x, y):
    ens = Ensemble(nets)
    opt = StackedAdamW([p for p in ens.params.values() if p.requires_grad], 0.01)
    members = list(range(len(nets)))

    def step():
        losses = unit_losses(ens(x).float(), y, "classification").mean(1)  # (E,)
        losses.tolist()
        for p in opt.params:
            p.grad = None
        losses.sum().backward()
        norms = opt.grad_norms()
        norms.tolist()
        opt.step(members, [1e-3] * len(members), norms, 1.0)

    return step


def sequential_steps(nets, x, y):
    opts = [torch.optim.AdamW(n.parameters(), lr=1e-3, weight_decay=0.01) for n in nets]

    def step():
        for e, (net, opt) in enumerate(zip(nets, opts, strict=True)):
            batch_loss = loss(net(x[e]).float(), y[e], "classification")
            batch_loss.item()
            opt.zero_grad(set_to_none=True)
            batch_loss.backward()
            torch.isfinite(nn.utils.clip_grad_norm_(net.parameters(), 1.0))
            opt.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--members", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = bench.BenchConfig(
        members=args.members,
        lm_vocab=args.vocab,
        lm_seq_len=args.seq_len,
        lm_batch_size=args.batch_size,
    )
    data = bench._lm_data(cfg, max(64, args.batch_size))
    e, b = args.members, cfg.lm_batch_size
    x = data.train.x[:b].expand(e, *data.train.x[:b].shape).contiguous()  # (E, B, T)
    y = data.train.y[:b].expand(e, *data.train.y[:b].shape).contiguous()  # (E, B, T)
    for name, make in (("sequential", sequential_steps), ("ensemble", ensemble_step)):
        step = make([bench._lm_net(cfg, args.width, seed) for seed in range(e)], x, y)
        for _ in range(3):  # warm-up
            step()
        start = time.process_time()
        for _ in range(args.steps):
            step()
        per = (time.process_time() - start) / args.steps / e * 1e3
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                step()
        events = prof.key_averages()
        total = sum(ev.self_cpu_time_total for ev in events)
        mm = sum(ev.self_cpu_time_total for ev in events if ev.key in MATMULS)
        print(f"\n{name}: {per:.2f} ms CPU per model-step; matmul share {mm / total:.0%}")
        print(events.table(sort_by="self_cpu_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
