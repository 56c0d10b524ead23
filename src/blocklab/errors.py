"""Errors a user can cause and fix, which the CLI prints as one line and exits 2; and the two
ways a sweep stops early, which it prints as one line saying what the store keeps (`Kept`) and
that a rerun resumes."""

from __future__ import annotations

from dataclasses import dataclass


class UserError(ValueError):
    """Bad input (an unknown name, an impossible budget, a malformed option)."""


class StoreError(UserError):
    """A store that cannot be opened, read or written (damaged, locked, full, read-only): the
    message names the file and what to do about it."""


DIED = "a worker process died (killed, or out of memory)"  # when nothing more is known


@dataclass(frozen=True)
class Kept:
    """What a stopped command leaves, read from its store (`Store.kept`): the finished trials
    the store holds (`stored`, whoever stored them: this command, an earlier one, a sweep
    beside it), those of them this command stored (`mine`), and the run directory."""

    stored: int
    mine: int
    where: str

    def __str__(self) -> str:
        """'2 trials stored in runs/demo (1 by this command)'."""
        if not self.stored:
            return f"no trials stored in {self.where}"
        stored = f"{self.stored} trial{'s' * (self.stored != 1)} stored in {self.where}"
        if self.mine == self.stored:
            return f"{stored} by this command"
        return f"{stored} ({self.mine or 'none'} by this command)"


class WorkerDied(RuntimeError):
    def __init__(self, kept: Kept, cause: str = DIED):
        super().__init__(f"{cause}; {kept}")
        self.kept = kept


class Interrupted(Exception):
    def __init__(self, kept: Kept):
        super().__init__(f"interrupted; {kept}")
        self.kept = kept


class ArmsFailed(RuntimeError):
    """Every trial of an arm raised, so the report compares without it: what `blocklab.run`
    raises where the command exits 1. What finished is stored and reported; `result` is the
    JSON the run returned, `failed_arms` among it."""

    def __init__(self, lines: list[str], result: dict):
        super().__init__("; ".join(lines))
        self.result = result
