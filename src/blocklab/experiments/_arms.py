"""An arm as a user writes it ("mlp", "softmax_attention(heads=2)"), its block's options checked
against the names the block's constructor takes before the arm is built: an unknown option fails
with the nearest name, as an unknown config key does. Shared by the experiments that take arms
from the command line (the degree sweep's baselines, mad's blocks) and `seprank measure`."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from blocklab import options

if TYPE_CHECKING:
    from blocklab.specs import Arm


def arm(text: str) -> Arm:
    """An arm as a user wrote it (`models.parse_arm`), a block's options checked first against
    the names its constructor takes (`block_options`): an unknown one fails with the nearest."""
    from blocklab.blocks import BLOCKS
    from blocklab.models import parse_arm

    name, _, rest = str(text).replace(" ", "").partition("(")
    if rest.endswith(")") and name in BLOCKS:
        given = options.parse_pairs(options.split_list(rest[:-1]), f"arm {name}")
        known = block_options(BLOCKS.get(name))
        if known is not None:
            options.check_keys(given, known, f"block {name!r}")
    return parse_arm(text)


# what a network passes every block, never an option: the widths, and a sequence's length
_NOT_OPTIONS = ("self", "d_in", "d_out", "seq_len")
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def block_options(cls: type) -> list[str] | None:
    """The options a block's constructor takes by name, through a `**kwargs` passed to the
    constructor above it (`poly_attention`'s to attention's); None where a `**kwargs` is the
    block's own, as when the constructor above takes no option."""
    names: list[str] = []
    passed = False  # whether the constructor below passes its **kwargs up to this one
    for base in cls.__mro__:
        if "__init__" not in base.__dict__:
            continue
        params = inspect.signature(base.__dict__["__init__"]).parameters.values()
        own = [p.name for p in params if p.kind in _NAMED and p.name not in _NOT_OPTIONS]
        if passed and not own:  # no option here to pass them to: the **kwargs are the block's
            return None
        names += own
        passed = any(p.kind is p.VAR_KEYWORD for p in params)
        if not passed:
            return names
    return None
