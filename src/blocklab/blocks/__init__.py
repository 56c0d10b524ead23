"""Building blocks: one family per file, registered by module name."""

from blocklab.blocks.base import Block, per_member
from blocklab.plugins import GROUPS
from blocklab.registry import Registry, import_submodules

BLOCKS: Registry[type[Block]] = Registry("block", GROUPS["block"])
import_submodules(__name__)


def make_block(name: str, d_in: int, d_out: int, **kwargs) -> Block:
    return BLOCKS.get(name)(d_in, d_out, **kwargs)


__all__ = ["BLOCKS", "Block", "make_block", "per_member"]
