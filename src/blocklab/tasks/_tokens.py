"""Shared code of the synthetic token tasks (mad-lab's suite, Poli et al. 2024, and zoology's MQAR,
Arora et al. 2023): option checks, one-hot oracle logits, and distinct train/val/test draws.

Every example of a task is a distinct sequence: draws repeat until the three splits hold the sizes
asked for, so no test input is also a training input (the task contract checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch

from blocklab.errors import UserError
from blocklab.tasks.base import IGNORE, Split, Task, TaskData

MARGIN = 10.0  # oracle logit margin: cross-entropy ~ (V - 1) e^-10 per position
ROUNDS = 16  # draws before a split that cannot fill with distinct sequences gives up

# (count, generator, split name) -> (x (count, T) int64, y (count, T) int64)
Draw = Callable[[int, torch.Generator, str], tuple[torch.Tensor, torch.Tensor]]


class TokenTask(Task):
    """A per-position label at some positions of a token sequence; IGNORE at the others."""

    kind = "classification"
    sequence = True
    # cross-entropy per labelled position: nearly every label confidently right
    default_threshold = 0.05
    small_options: ClassVar[dict] = {"n_train": 256, "n_val": 64, "n_test": 128}


def at_least(options: Any, minimum: int, *names: str) -> None:
    """Each named integer option is >= minimum."""
    for name in names:
        value = getattr(options, name)
        if value < minimum:
            raise UserError(f"{name} must be >= {minimum}, got {value}")


def check_sizes(options: Any) -> None:
    at_least(options, 1, "n_train", "n_val", "n_test")


def check_noise(frac_noise: float, noise_vocab: int) -> None:
    """A noise share in [0, 1), and noise tokens to draw whenever the share is positive."""
    if not 0 <= frac_noise < 1:
        raise UserError(f"frac_noise must be in [0, 1), got {frac_noise}")
    if noise_vocab < 0:
        raise UserError(f"noise_vocab must be >= 0, got {noise_vocab}")
    if frac_noise > 0 and noise_vocab == 0:
        raise UserError(f"frac_noise = {frac_noise} needs noise tokens: set noise_vocab >= 1")


def one_hot(pred: torch.Tensor, vocab: int) -> torch.Tensor:
    """Logits (n, T, V) with MARGIN at each predicted token; IGNORE (no prediction) gives zeros."""
    known = pred != IGNORE  # (n, T)
    at = torch.where(known, pred, 0)[..., None]  # (n, T, 1)
    return torch.zeros(*pred.shape, vocab).scatter_(-1, at, MARGIN * known[..., None].float())


def distinct(draw: Draw, sizes: dict[str, int], g: torch.Generator) -> dict[str, Split]:
    """Splits of distinct sequences, drawn in the order given: each split keeps the draws whose
    input no earlier example holds, and draws again while it is short."""
    seen: set[bytes] = set()
    out = {}
    for name, n in sizes.items():
        xs, ys, have = [], [], 0
        for _ in range(ROUNDS):
            if have == n:
                break
            need = n - have
            x, y = draw(need + need // 8 + 16, g, name)  # (m, T) each
            keep = []
            for i, row in enumerate(x.numpy()):  # host: drawn by a CPU generator
                key = row.tobytes()
                if key not in seen and have + len(keep) < n:
                    seen.add(key)
                    keep.append(i)
            xs.append(x[keep])
            ys.append(y[keep])
            have += len(keep)
        if have < n:
            raise UserError(
                f"found only {have} distinct {name} sequences of the {n} asked for: the options "
                "allow too few sequences; raise seq_len or vocab, or lower n_train/n_val/n_test"
            )
        out[name] = Split(torch.cat(xs), torch.cat(ys))
    return out


def label_info(split: Split, vocab: int) -> dict[str, float]:
    """The share of labelled positions and the accuracy of always answering the commonest label."""
    labels = split.y[split.y != IGNORE]
    counts = torch.bincount(labels, minlength=vocab)
    return {
        "labelled": labels.numel() / split.y.numel(),
        "chance": float(counts.max()) / max(labels.numel(), 1),
    }


def token_data(
    task: Task,
    draw: Draw,
    seed: int,
    vocab: int,
    oracle: Callable[[torch.Tensor], torch.Tensor],
    info: dict[str, Any],
    bottleneck: bool = False,
) -> TaskData:
    """Draw the three splits from the seed and wrap them as a per-position token task."""
    o = task.options
    g = torch.Generator().manual_seed(seed)
    s = distinct(draw, {"train": o.n_train, "val": o.n_val, "test": o.n_test}, g)
    info = {**info, "vocab": vocab, "seq_len": o.seq_len, **label_info(s["train"], vocab)}
    return TaskData(
        s["train"],
        s["val"],
        s["test"],
        task.kind,
        vocab,
        info,
        sequence=True,
        per_position=True,
        oracle=oracle,
        vocab=vocab,
        bottleneck=bottleneck,
    )
