"""Tasks: one file each, registered by module name."""

from blocklab.plugins import GROUPS
from blocklab.registry import Registry, import_submodules
from blocklab.tasks.base import Split, Task, TaskData, make_task

TASKS: Registry[type[Task]] = Registry("task", GROUPS["task"])
import_submodules(__name__)


__all__ = ["TASKS", "Split", "Task", "TaskData", "make_task"]
