"""A command's progress on stderr: one bar on a terminal, one line per finished trial in a log.

One display serves the whole command: each sweep the command runs (a learning-rate search, its
extensions, the seeds) adds its trials to the same total, and a phase the command knows it will
run but has not planned yet (the seeds after a search) is counted in the total as expected, so the
ETA covers the whole run from the first trial."""

from __future__ import annotations

import sys
import time
from typing import Any

from blocklab.specs import TrialSpec


class Progress:
    """A tqdm bar on a terminal, one plain line per finished trial otherwise; off when not
    `enabled` (and then false, so `if progress:` reads as before)."""

    def __init__(self, enabled: bool = True):
        self.enabled, self.bar = enabled, None
        self.planned = self.expected = self.count = 0
        self.label = ""
        self.start = time.monotonic()

    def __bool__(self) -> bool:
        return self.enabled

    @property
    def total(self) -> int:
        return self.planned + self.expected

    def phase(self, label: str, todo: int) -> None:
        """A sweep begins with `todo` trials to train."""
        self.label, self.planned = label, self.planned + todo
        self._show()

    def expect(self, n: int) -> None:
        """`n` trials a later phase will plan (negative: the phase is planned now, and
        `phase` counts its own)."""
        self.expected = max(self.expected + n, 0)
        self._show()

    def _show(self) -> None:
        if not self.enabled or not self.total or not self.label:  # no sweep has begun
            return
        if self.bar is None and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit="trial", file=sys.stderr)
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.set_description_str(self.label, refresh=False)
            self.bar.refresh()

    def update(self, spec: TrialSpec, record: dict[str, Any]) -> None:
        self.count += 1
        if not self.enabled:
            return
        m = record.get("metrics", {})
        value = m.get("test_metric")
        what = f"{m.get('metric')}={value:.4g}" if value is not None else record["status"]
        if self.bar is not None:
            self.bar.set_postfix_str(f"{spec.arm.label} {what}", refresh=False)
            self.bar.update(1)
        else:
            print(
                f"[{self.label} {self.count}/{self.total}, {self.clock()}] {spec.describe()}: "
                f"{what} ({m.get('seconds', 0):.1f}s)",
                file=sys.stderr,
                flush=True,
            )

    def clock(self) -> str:
        """'2m10s elapsed, ETA 3m05s': the time since the command began, and the rest of the
        total at the mean pace so far (a log has no bar to read it from)."""
        elapsed = time.monotonic() - self.start
        left = elapsed / self.count * max(self.total - self.count, 0) if self.count else 0.0
        return f"{minutes(elapsed)} elapsed, ETA {minutes(left)}"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def display(progress: bool | Progress) -> tuple[Progress, bool]:
    """The display a sweep reports to: the command's, or its own when given a flag (then the
    sweep closes it: the second value)."""
    if isinstance(progress, Progress):
        return progress, False
    return Progress(enabled=progress), True


def minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"
