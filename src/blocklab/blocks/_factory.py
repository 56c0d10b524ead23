"""Shared pieces of the `module` and `mixing_module` blocks: any nn.Module a factory makes, used
as a block of one width.

A factory is named `package.module:function` (or `module:Class.method`; any callable); the
module may be one a plugin file brought in under its stem (`--import my_factories.py`, then
`factory=my_factories:make`). Its parameters are the block's: `count_params` builds one to count
them, so the count is exact by construction.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from blocklab.blocks.base import Block
from blocklab.errors import UserError


def resolve_factory(text: Any, what: str) -> Callable[..., Any]:
    """'package.module:function' -> the callable."""
    module_name, sep, attr = str(text).partition(":")
    if not isinstance(text, str) or not sep or not module_name or not attr:
        raise UserError(f"{what} needs factory='package.module:function', got {text!r}")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:
        message = " ".join(str(exc).split())
        raise UserError(
            f"{what}: cannot import {module_name!r} for factory {text!r}: "
            f"{type(exc).__name__}: {message}"
        ) from None
    for part in attr.split("."):
        if not hasattr(found, part):
            raise UserError(f"{what}: module {module_name!r} has no {attr!r} (factory {text!r})")
        found = getattr(found, part)
    if not callable(found):
        raise UserError(f"{what}: factory {text!r} is not callable")
    return found


class FactoryBlock(Block):
    """The module `factory(width, *args)` returns, checked to keep its input's shape.

    `args` are what a subclass passes the factory after the width (the sequence length).
    """

    same_width = True

    def __init__(self, d_in: int, d_out: int, factory: str, *args: Any):
        super().__init__(d_in, d_out)
        self.factory = factory
        self.inner = self.make(factory, d_in, d_out, *args)

    @classmethod
    def make(cls, factory: str, d_in: int, d_out: int, *args: Any) -> nn.Module:
        what = f"{cls.name} block"
        if d_in != d_out:
            raise UserError(
                f"{what} maps a width to itself, so d_in must equal d_out (got {d_in}, {d_out})"
            )
        made = resolve_factory(factory, what)(d_in, *args)
        if not isinstance(made, nn.Module):
            raise UserError(
                f"{what}: factory {factory!r} returned a {type(made).__name__}, not an nn.Module"
            )
        return made

    @classmethod
    def count_factory(cls, factory: str, d_in: int, d_out: int, *args: Any) -> int:
        return _count(cls, factory, d_in, d_out, *args)

    @classmethod
    def code_modules(cls, factory: str = "", **kwargs: Any) -> tuple[str, ...]:
        # the factory's module makes the network: its source joins a trial's fingerprint
        module = str(factory).partition(":")[0]
        return (module,) if module else ()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x)  # (..., D) -> (..., D)
        if not isinstance(y, torch.Tensor) or y.shape != x.shape:
            got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
            raise UserError(
                f"{self.name} block: factory {self.factory!r} made a module that maps "
                f"{tuple(x.shape)} to {got}; it must keep the shape"
            )
        return y  # (..., D)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, factory={self.factory!r}"


@functools.lru_cache(maxsize=256)
def _count(cls: type[FactoryBlock], factory: str, d_in: int, d_out: int, *args: Any) -> int:
    # a forked RNG: counting (cached or not) must not move the seed that initializes a network
    with torch.random.fork_rng(devices=[]):
        made = cls.make(factory, d_in, d_out, *args)
        return sum(p.numel() for p in made.parameters() if p.requires_grad)
