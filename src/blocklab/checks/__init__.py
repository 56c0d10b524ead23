"""The contract every registered block, task and measure meets, as plain functions.

`battery` holds the runner and the types every check shares; one module per kind (`blocks`,
`tasks`, `measures`), each with `CHECKS` (short name -> check) and `cases(names)` (an entry with
each of its `examples`). A check takes one case and raises
AssertionError saying what is wrong, or `NotApplicable` when the case has nothing for it to
check. The test suite parametrizes over these same functions and `blocklab check` runs them over
whatever is registered, plugins included, so a plugin meets the contract the package's own
entries meet.
"""

from blocklab.checks.battery import (
    KINDS,
    NotApplicable,
    Result,
    expect,
    label,
    module,
    run,
    run_check,
)

__all__ = ["KINDS", "NotApplicable", "Result", "expect", "label", "module", "run", "run_check"]
