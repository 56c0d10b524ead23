"""Building blocks: one family per file, registered by module name."""

from blocklab.blocks.base import Block, make_block, per_member
from blocklab.plugins import GROUPS
from blocklab.registry import Registry, import_submodules

BLOCKS: Registry[type[Block]] = Registry("block", GROUPS["block"])
import_submodules(__name__)


__all__ = ["BLOCKS", "Block", "make_block", "per_member"]
