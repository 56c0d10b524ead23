"""Tasks: one file each, registered by module name."""

from blocklab.plugins import GROUPS
from blocklab.registry import Registry, import_submodules
from blocklab.tasks.base import Split, Task, TaskData

TASKS: Registry[type[Task]] = Registry("task", GROUPS["task"])
import_submodules(__name__)


def make_task(name: str, **opts) -> Task:
    return TASKS.get(name)(**opts)


__all__ = ["TASKS", "Split", "Task", "TaskData", "make_task"]
