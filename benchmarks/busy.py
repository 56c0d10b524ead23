"""How busy a GPU was while a block of work ran: `Busy` samples the driver's utilization, the share
of each sample period in which one or more kernels ran (`nvidia-smi --query-gpu=utilization.gpu`,
every 100 ms), and averages it. It reads the device, not one process, so it counts a run's pool
workers too; `share` is None where there is no `nvidia-smi` (a CPU machine) or no sample came.

    with Busy() as busy:
        run_the_form()
    print(busy.words())  # "busy 37% of 1,412 samples"
"""

from __future__ import annotations

import shutil
import subprocess
import threading


class Busy:
    def __init__(self, index: int = 0, period_ms: int = 100, command: list[str] | None = None):
        query = ["--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
        smi = shutil.which("nvidia-smi")
        self.command = command or (
            [smi, *query, "-i", str(index), "-lms", str(period_ms)] if smi else None
        )
        self.period = max(period_ms / 1000, 0.5)
        self.samples: list[float] = []
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> Busy:
        if self.command is not None:
            self._proc = subprocess.Popen(
                self.command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                self.samples.append(float(line.strip()))
            except ValueError:  # "[N/A]" and the like: no reading
                continue

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            try:  # one more period's sample, then stop the sampler (nvidia-smi -lms never ends)
                self._proc.wait(timeout=self.period)
            except subprocess.TimeoutExpired:
                self._proc.terminate()
                self._proc.wait()
            self._reader.join(timeout=5)

    @property
    def share(self) -> float | None:
        """The mean utilization, a share of the time; None without samples."""
        return sum(self.samples) / (100 * len(self.samples)) if self.samples else None

    def words(self) -> str:
        if self.share is None:
            return "busy share not measured (no nvidia-smi samples)"
        return f"busy {self.share:.0%} of {len(self.samples):,} samples"
