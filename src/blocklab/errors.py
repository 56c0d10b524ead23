"""Errors a user can cause and fix, which the CLI prints as one line and exits 2; and the two
ways a sweep stops early, which it prints as one line saying a rerun resumes."""


class UserError(ValueError):
    """Bad input (an unknown name, an impossible budget, a malformed option)."""


class StoreError(UserError):
    """A store that cannot be opened, read or written (damaged, locked, full, read-only): the
    message names the file and what to do about it."""


DIED = "a worker process died (killed, or out of memory)"  # when nothing more is known


class WorkerDied(RuntimeError):
    def __init__(self, finished: int, cause: str = DIED):
        super().__init__(f"{cause}; {finished} finished trials are kept")
        self.finished = finished


class Interrupted(Exception):
    def __init__(self, finished: int):
        super().__init__(f"interrupted; {finished} finished trials are kept")
        self.finished = finished


class ArmsFailed(RuntimeError):
    """Every trial of an arm raised, so the report compares without it: what `blocklab.run`
    raises where the command exits 1. What finished is stored and reported; `result` is the
    JSON the run returned, `failed_arms` among it."""

    def __init__(self, lines: list[str], result: dict):
        super().__init__("; ".join(lines))
        self.result = result
