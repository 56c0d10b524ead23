"""`blocklab mad --sweep-width`: zoology's MQAR width sweep (Arora et al. 2023, figure 2).

Each block, made causal, in the token suite's backbone at each width of `widths` (not at a
budget: the question is the width a block needs), on MQAR at each setting (key-value pairs x
sequence length) of `sweep_pairs` x `sweep_seq_lens` that the task admits (4 pairs <= length).
One learning rate per (block, width): the best of `lr_grid` on validation accuracy at the
easiest setting (fewest pairs, shortest sequence; seed 0), pushed past an edge of the grid up to
`lr_extend` times; every setting and seed of that pair trains at it (`searched`: what the token
suite's run searches and fits, and what its plan prices).

Each trial's row carries its block, width, pairs and seq_len; the analysis
(`analysis.width_sweep`) reads accuracy against width per setting.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace
from typing import Any

from blocklab.experiments import _trials

TASK = "mqar"


def settings(cfg) -> list[tuple[int, int]]:
    """(pairs, seq_len) of the sweep, easiest first; the ones MQAR cannot build left out."""
    both = itertools.product(sorted(cfg.sweep_seq_lens), sorted(cfg.sweep_pairs))
    return [(pairs, t) for t, pairs in both if 4 * pairs <= t and t % 2 == 0]


def plan(cfg, blocks, causal_arm, shape) -> dict[tuple[str, int, int, int], tuple[Any, Any, dict]]:
    """(block, width, pairs, seq_len) -> (arm, network shape, task options), the block as the
    user wrote it, made causal by `causal_arm`, in the backbone `shape` at each width."""
    vocab = max(128, 4 * max(cfg.sweep_pairs) + 2)  # keys and values for the most pairs
    out = {}
    for text in blocks:
        arm = causal_arm(text)
        for width in cfg.widths:
            net = replace(shape, depth=cfg.depth, width=width)
            for pairs, seq_len in settings(cfg):
                opts = {"seq_len": seq_len, "num_kv_pairs": pairs, "vocab": vocab}
                out[(text, width, pairs, seq_len)] = (arm, net, {**opts, "n_train": cfg.n_train})
    return out


def _spec(cfg, arm, net, opts, lr: float, seed: int):
    return _trials.spec(TASK, opts, arm, net, replace(cfg.train, lr=lr), seed)


def searched(cfg, blocks, causal_arm, shape):
    """What the sweep searches and fits (`_trials.run_searched`): per (block, width) the search's
    trial at a rate (the easiest setting, seed 0), and the finals, every setting and seed of each
    at its chosen rate; the choice is named "block/width"."""
    shapes = plan(cfg, blocks, causal_arm, shape)
    easiest = settings(cfg)[0]
    at = {
        (text, width): functools.partial(_spec, cfg, *shapes[(text, width, *easiest)], seed=0)
        for text, width, *setting in shapes
        if tuple(setting) == easiest
    }

    level = {setting: i for i, setting in enumerate(settings(cfg))}  # easiest first, as a ladder

    def finals(rates):  # every setting of a (block, width) trains at the rate of its easiest
        return [
            (
                {"block": key[0], "pairs": key[2], "seq_len": key[3], "level": level[key[2:]]},
                _spec(cfg, *shapes[key], rates[key[:2]], seed),
            )
            for key in shapes
            for seed in range(cfg.seeds)
        ]

    return at, finals
