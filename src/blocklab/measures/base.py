"""Measure interface: a seeded map from a sequence network to JSON-ready numbers."""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import torch
from torch import nn

from blocklab import options


class Measure(abc.ABC):
    """Subclass, decorate with `@MEASURES.register`, define `Options` (a frozen dataclass) and
    `measure`. The contract tests run every registered measure, with each of its `examples`,
    over small networks of every token-mixing block: one file adds a measure and gets it tested.
    """

    name: ClassVar[str]
    Options: ClassVar[type]
    # option sets the contract tests instantiate
    examples: ClassVar[list[dict[str, Any]]] = [{}]

    def __init__(self, **opts: Any):
        self.options = options.build(self.Options, opts, what=f"measure {self.name!r}")

    @abc.abstractmethod
    def measure(
        self,
        model: nn.Module,
        seq_len: int,
        dim: int,
        seed: int = 0,
        inputs: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        """Measure `model`, which maps (B, seq_len, dim) inputs to (B, seq_len, D_out) outputs.

        `inputs` (B, seq_len, dim) are data to measure on, e.g. a task's test sequences; a measure
        that makes its own inputs (a grid, random sequences) may ignore them. Returns plain
        numbers, lists and strings, with the headline number under "value". The same seed gives
        the same result, and the model is left as it was (weights, dtype, mode).
        """


def make_measure(name: str, **opts) -> Measure:
    """The registered measure `name` (`blocklab.measures.MEASURES`, plugins' included)."""
    from blocklab.measures import (
        MEASURES,  # the registry its entries, this module's subclasses, fill
    )

    return MEASURES.get(name)(**opts)


def parse_measure(text: str) -> Measure:
    """'collapse' or 'seprank(templates=8,partition=interleaved)' -> the measure."""
    from blocklab.errors import UserError
    from blocklab.options import parse_pairs, split_list

    s = str(text).strip().replace(" ", "")
    name, _, rest = s.partition("(")
    if rest and not rest.endswith(")"):
        raise UserError(f"measure {text!r}: options go in parentheses, e.g. seprank(templates=8)")
    return make_measure(name, **parse_pairs(split_list(rest[:-1]), f"measure {name}"))
