"""A sweep's progress on stderr: a bar on a terminal, a line per trial in a log."""

from __future__ import annotations

import sys
import time
from typing import Any

from blocklab.specs import TrialSpec


class Progress:
    """A tqdm bar on a terminal, one plain line per trial otherwise."""

    def __init__(self, total: int, label: str, enabled: bool = True):
        self.total, self.count, self.label, self.bar = total, 0, label, None
        self.enabled = enabled and total > 0
        self.start = time.monotonic()
        if self.enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, unit="trial", file=sys.stderr)

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
        """'2m10s elapsed, ETA 3m05s': the time since the start, and the rest at the mean pace so
        far (a log has no bar to read it from)."""
        elapsed = time.monotonic() - self.start
        left = elapsed / self.count * (self.total - self.count) if self.count else 0.0
        return f"{_minutes(elapsed)} elapsed, ETA {_minutes(left)}"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"
