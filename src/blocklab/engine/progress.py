"""A command's progress on stderr: one bar on a terminal, one line per finished trial in a log.

One display serves the whole command: each sweep the command runs (a learning-rate search, its
extensions, the seeds) adds its trials to the same total, and a phase the command knows it will
run but has not planned yet (the seeds after a search) is counted in the total as expected, so the
ETA covers the whole run from the first trial.

A sweep that finds trials stored before the command began says so (`resuming ...`), and the
command says when the trials are analysed (`Progress.analysing`). An analysis that counts its
own steps (a bootstrap's draws) reports them through a callback `(stage, done, total)` from
`current().counter(...)`: the analysis itself prints nothing, and a report written outside a
command (a test, `blocklab report`) gets a display that is off."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any

from blocklab.formatting import minutes
from blocklab.specs import TrialSpec

_current: Progress | None = None  # the display of the command now analysing its trials


def current() -> Progress:
    """The display of the command whose analysis runs now (`Progress.analysing`), or one that
    is off."""
    return _current if _current is not None else Progress(enabled=False)


class Progress:
    """A tqdm bar on a terminal, one plain line per finished trial otherwise; off when not
    `enabled` (and then false, so `if progress:` reads as before)."""

    def __init__(self, enabled: bool = True):
        self.enabled, self.bar = enabled, None
        self.planned = self.expected = self.count = 0
        self.label = ""
        self.start = time.monotonic()
        # trials trained by this command, and those the store held before it began
        self.fitted: set[str] = set()
        self.reused: set[str] = set()
        self.counts: list[Count] = []  # the analysis's counted stages, closed when it ends
        # each trial's estimated seconds (`weigh`): the ETA reads the work left, not the count,
        # so large fits run first do not make it start high and fall
        self.costs: dict[str, float] = {}
        self.parallel = 1.0
        self.began: float | None = None  # when the weighed trials began
        # when the last line was said, for the heartbeat (`_beat`), on a clock of its own
        self.last = time.perf_counter()
        self._stop = threading.Event()
        self._beat_thread: threading.Thread | None = None

    def __bool__(self) -> bool:
        return self.enabled

    @property
    def total(self) -> int:
        return self.planned + self.expected

    def phase(
        self, label: str, todo: int, stored: Collection[str] = (), announce: bool = True
    ) -> None:
        """A sweep begins with `todo` trials to train and the ids of those the store holds
        finished (`stored`); where some were stored before the command began and some are left,
        it says so. In a log it says it started, unless the caller says so itself (`announce`
        False)."""
        earlier = set(stored) - self.fitted  # not those an earlier sweep of this command trained
        self.reused |= earlier
        if earlier and todo:
            self.say(
                f"resuming {label}: {len(stored)} of {len(stored) + todo} trials stored, "
                f"{todo} to fit"
            )
        self.label, self.planned = label, self.planned + todo
        if todo and self.costs and self.began is None:
            self.began = time.monotonic()
        if todo and self.enabled and self.bar is None and not sys.stderr.isatty():
            if announce:
                eta = f", ETA {minutes(self._left(self.began))}" if self.began is not None else ""
                self.say(f"[{self.label} {self.count}/{self.total}{eta}] started")
            self._heartbeat()
        self._show()

    def stage(self, text: str) -> None:
        """A step before the trials (a design check, a count): one line as it begins, with the
        time since the command began, so a long preamble is never silent."""
        self.say(f"[{minutes(time.monotonic() - self.start)}] {text}")

    def weigh(self, costs: dict[str, float], parallel: float) -> None:
        """Each trial still to run's estimated seconds on one worker, and how many workers run
        at once: the ETA reads them (`clock`)."""
        self.costs.update(costs)
        self.parallel = max(parallel, 1.0)

    def expect(self, n: int) -> None:
        """`n` trials a later phase will plan (negative: the phase is planned now, and
        `phase` counts its own)."""
        self.expected = max(self.expected + n, 0)
        self._show()

    def _show(self) -> None:
        if not self.enabled or not self.planned or not self.label:  # nothing to train yet
            return
        if self.bar is None and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, desc=self.label, unit="trial", file=sys.stderr)
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.set_description_str(self.label, refresh=False)
            self.bar.refresh()

    def update(self, spec: TrialSpec, record: dict[str, Any]) -> None:
        self.count += 1
        self.fitted.add(spec.id)
        if not self.enabled:
            return
        m = record.get("metrics", {})
        value = m.get("test_metric")
        what = f"{m.get('metric')}={value:.4g}" if value is not None else record["status"]
        if self.bar is not None:
            self.bar.set_postfix_str(f"{spec.arm.label} {what}", refresh=False)
            self.bar.update(1)
        else:
            self.last = time.perf_counter()
            print(
                f"[{self.label} {self.count}/{self.total}, {self.clock()}] {spec.describe()}: "
                f"{what} ({m.get('seconds', 0):.1f}s)",
                file=sys.stderr,
                flush=True,
            )

    def clock(self) -> str:
        """'2m10s elapsed, ETA 3m05s': the time since the command began, and the rest of the
        total at the pace so far (a log has no bar to read it from): of the estimated work
        where the trials are weighed (`weigh`), else of the count."""
        now = time.monotonic()
        elapsed = now - self.start
        left = self._left(now)
        eta = "" if left is None else f", ETA {minutes(left)}"
        return f"{minutes(elapsed)} elapsed{eta}"

    def _left(self, now: float) -> float | None:
        weighed = [i for i in self.costs if i not in self.reused]
        if self.began is not None and weighed:
            finished = [i for i in weighed if i in self.fitted]
            done = sum(self.costs[i] for i in finished)
            todo = sum(self.costs[i] for i in weighed if i not in self.fitted)
            # until every worker has finished one, the pace so far is read off trials that ran
            # beside others still running: the estimate itself until then
            if len(finished) < min(self.parallel, len(weighed)) or not done:
                left = todo / self.parallel - (now - self.began)
                return left if left > 0 else None  # past the estimate: no ETA to give
            return (now - self.began) * todo / done
        if not self.count:
            return None
        return (now - self.start) / self.count * max(self.total - self.count, 0)

    def _heartbeat(self) -> None:
        """In a log, a line every `BEAT` seconds that nothing else said anything."""
        if self._beat_thread is None:
            # the thread waits on the event of its own start: `rest` gives the next one another
            self._beat_thread = threading.Thread(target=self._beat, args=(self._stop,), daemon=True)
            self._beat_thread.start()

    BEAT = 60.0

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(self.BEAT / 4):
            if time.perf_counter() - self.last >= self.BEAT and self.count < self.total:
                self.say(f"[{self.label} {self.count}/{self.total}, {self.clock()}] running")

    def rest(self) -> None:
        """A sweep of the command ended: no heartbeat until the next one begins (`phase`), so a
        display the caller keeps open after its last sweep (`blocklab.run`'s caller, a script)
        never says "running" of trials that are not."""
        if self._beat_thread is not None:
            self._stop.set()
            self._beat_thread = None
            self._stop = threading.Event()

    def close(self) -> None:
        self._stop.set()
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def say(self, line: str) -> None:
        """A line on stderr, above the bar where one is shown."""
        if not self.enabled:
            return
        self.last = time.perf_counter()
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def analysing(self, rows: int | None) -> Iterator[Progress]:
        """The command's analysis of its `rows` trials (None: an experiment whose result is not
        rows): a line says it begins (that it re-analyses where every trial was stored before),
        and `current()` is this display until it ends."""
        global _current
        self.close()
        if self.reused and not self.fitted:
            self.say(f"all {len(self.reused)} trials stored: re-analysing")
        else:
            self.say(f"analysing {rows} trials" if rows is not None else "analysing the run")
        _current = self
        try:
            yield self
        finally:
            _current = None
            for count in self.counts:
                count.close()
            self.counts = []

    def counter(self, label: str, unit: str) -> Callable[[str, int, int], None]:
        """A callback `(stage, done, total)` for an analysis that counts its steps: one `Count`
        per stage, labelled `label.format(stage)`, closed when the analysis ends."""
        counts: dict[str, Count] = {}

        def on_step(stage: str, done: int, total: int) -> None:
            if stage not in counts:
                counts[stage] = Count(label.format(stage), unit, self.enabled)
                self.counts.append(counts[stage])
            counts[stage](done, total)

        return on_step


class Count:
    """The steps of one stage of an analysis: a tqdm bar on a terminal, and in a log a line at
    each quarter of its total (a few lines, not one per step)."""

    def __init__(self, label: str, unit: str, enabled: bool = True):
        self.label, self.unit, self.enabled = label, unit, enabled
        self.bar, self.quarters = None, 0
        self.start = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        if sys.stderr.isatty():
            if self.bar is None:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=self.label, unit=self.unit, file=sys.stderr)
            self.bar.total = total
            self.bar.update(done - self.bar.n)
            if done >= total:
                self.close()
            return
        quarters = 4 * done // total
        if quarters > self.quarters:
            self.quarters = quarters
            elapsed = minutes(time.monotonic() - self.start)
            print(
                f"[{self.label} {done}/{total} {self.unit}s, {elapsed}]",
                file=sys.stderr,
                flush=True,
            )

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
