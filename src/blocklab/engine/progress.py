"""A command's progress on stderr: one bar on a terminal, one line per finished trial in a log.

One display serves the whole command: each sweep the command runs (a learning-rate search, its
extensions, the seeds) adds its trials to the same total, and a phase the command knows it will
run but has not planned yet (the seeds after a search) is counted in the total as expected, so the
ETA covers the whole run from the first trial. Where the trials are weighed by their estimated
cost (`Progress.weigh`), the ETA is that estimate until trials finish, then the estimate scaled
by what they measured; between trials a ticker keeps the bar's clock moving (`Ticker`).

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

TICK = 1.0  # seconds between two redraws of a bar's clock (and two looks for a log's heartbeat)


def current() -> Progress:
    """The display of the command whose analysis runs now (`Progress.analysing`), or one that
    is off."""
    return _current if _current is not None else Progress(enabled=False)


class Ticker:
    """Calls `tick` every `period` seconds on a daemon thread of its own until `stop`, which
    waits for that thread to end: what moves a bar's clock while a long trial runs, and what
    gives a log its heartbeat. Only this process ticks: pool workers start from a fork server
    (`executors.pool_context`), not from a fork of it. A tick that meets a closed stream ends
    it: nothing is left to draw on."""

    def __init__(self, period: float, tick: Callable[[], None]):
        self._stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(period, tick), name="blocklab-progress", daemon=True
        )
        self.thread.start()

    def _run(self, period: float, tick: Callable[[], None]) -> None:
        while not self._stop.wait(period):
            try:
                tick()
            except (OSError, ValueError):  # stderr closed or gone
                return

    def stop(self) -> None:
        self._stop.set()
        if self.thread is not threading.current_thread():
            self.thread.join()


def trial_seconds(record: dict[str, Any]) -> float | None:
    """A finished trial's measured seconds: a depth ladder's summed over its rungs (its own
    `seconds` are its top rung's), else its `seconds`; None where the record has none."""
    m = record.get("metrics") or {}
    if m.get("ladder"):
        return sum((r.get("metrics") or {}).get("seconds") or 0.0 for r in m["ladder"])
    return m.get("seconds")


class Progress:
    """A tqdm bar on a terminal, one plain line per finished trial otherwise; off when not
    `enabled` (and then false, so `if progress:` reads as before). While a sweep's trials run a
    ticker (`Ticker`, or the `ticker` given: a maker `(period, tick)` of an object that can
    `stop()`) redraws the bar's elapsed time and ETA every `TICK` seconds, and in a log says
    "running" where nothing was said for `BEAT` seconds; `clock` is the time it reads."""

    BEAT = 60.0

    def __init__(
        self,
        enabled: bool = True,
        *,
        clock: Callable[[], float] = time.monotonic,
        ticker: Callable[[float, Callable[[], None]], Any] = Ticker,
    ):
        self.enabled, self.bar = enabled, None
        self.planned = self.expected = self.count = 0
        self.label = ""
        self._now, self._ticker_of = clock, ticker
        self._ticker: Any = None
        # the bar and the lines are drawn from the ticker's thread as well as from the sweep's
        self._lock = threading.RLock()
        self.start = clock()
        # trials trained by this command, and those the store held before it began
        self.fitted: set[str] = set()
        self.reused: set[str] = set()
        self.counts: list[Count] = []  # the analysis's counted stages, closed when it ends
        # each trial's estimated seconds (`weigh`) and, once it finished, its measured ones: the
        # ETA reads the work left, not the count, so large fits run first do not make it start
        # high and fall
        self.costs: dict[str, float] = {}
        self.seconds: dict[str, float] = {}
        self.ended: list[float] = []  # when each weighed trial finished
        self.parallel = 1.0
        self.began: float | None = None  # when the weighed trials began
        self.last = self.start  # when the last line was said, for the heartbeat

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
            self.began = self._now()
        log = self.enabled and self.bar is None and not sys.stderr.isatty()
        if todo and log and announce:
            eta = self._eta(self._now())
            self.say(f"[{self.label} {self.count}/{self.total}{', ' * bool(eta)}{eta}] started")
        self._show()
        if todo and self.enabled and self._ticker is None:
            self._ticker = self._ticker_of(TICK, self._tick)

    def stage(self, text: str) -> None:
        """A step before the trials (a design check, a count): one line as it begins, with the
        time since the command began, so a long preamble is never silent."""
        self.say(f"[{minutes(self._now() - self.start)}] {text}")

    def weigh(self, costs: dict[str, float], parallel: float) -> None:
        """Each trial still to run's estimated seconds on one worker, and how many workers run
        at once: the ETA reads them (`_left`)."""
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
        with self._lock:
            if self.bar is None and sys.stderr.isatty():
                from tqdm import tqdm

                self.bar = tqdm(
                    total=self.total,
                    desc=self.label,
                    unit="trial",
                    file=sys.stderr,
                    bar_format=self._format(),
                )
            if self.bar is not None:
                self.bar.total = self.total
                self.bar.set_description_str(self.label, refresh=False)
                self._draw()

    def _draw(self) -> None:
        self.bar.bar_format = self._format()
        self.bar.refresh()

    def _format(self) -> str:
        """The bar's format, with the command's elapsed time and this display's ETA in place of
        tqdm's (which reads the count: a large fit run first makes it start high and fall)."""
        now = self._now()
        eta = self._eta(now)
        clock = minutes(now - self.start) + (f", {eta}" if eta else "")
        clock = clock.replace("{", "{{").replace("}", "}}")
        return "{l_bar}{bar}| {n_fmt}/{total_fmt} [" + clock + "{postfix}]"

    def _tick(self) -> None:
        with self._lock:
            if self.bar is not None:
                self._draw()
            elif self._now() - self.last >= self.BEAT and self.count < self.total:
                self.say(f"[{self.label} {self.count}/{self.total}, {self.clock()}] running")

    def update(self, spec: TrialSpec, record: dict[str, Any]) -> None:
        self.count += 1
        self.fitted.add(spec.id)
        seconds = trial_seconds(record)
        if seconds is not None:
            self.seconds[spec.id] = seconds
        if spec.id in self.costs and spec.id not in self.reused:
            self.ended.append(self._now())
        if not self.enabled:
            return
        m = record.get("metrics", {})
        value = m.get("test_metric")
        what = f"{m.get('metric')}={value:.4g}" if value is not None else record["status"]
        with self._lock:
            if self.bar is not None:
                self.bar.set_postfix_str(f"{spec.arm.label} {what}", refresh=False)
                self.bar.bar_format = self._format()  # tqdm's update may draw it at once
                self.bar.update(1)
                self.bar.refresh()
            else:
                self.say(
                    f"[{self.label} {self.count}/{self.total}, {self.clock()}] {spec.describe()}: "
                    f"{what} ({seconds or 0:.1f}s)"
                )

    def clock(self) -> str:
        """'2m10s elapsed, ETA 3m05s': the time since the command began, and the rest of the
        total (`_eta`; a log has no bar to read it from)."""
        now = self._now()
        eta = self._eta(now)
        return f"{minutes(now - self.start)} elapsed{', ' + eta if eta else ''}"

    def _eta(self, now: float) -> str:
        """'ETA 3m05s', marked 'est.' while it is the estimate alone and '>' where the running
        trials have outrun their estimate (then it is what the others are estimated to take);
        'past est.' where nothing but those is left; '' where nothing tells."""
        left = self._left(now)
        if left is None:
            return ""
        seconds, over, estimated = left
        if over and seconds < 1:
            return "past est."
        return f"ETA {'>' * over}{minutes(seconds)}{' est.' * estimated}"

    def _left(self, now: float) -> tuple[float, bool, bool] | None:
        """(seconds left, whether the running trials are past their share, whether it is the
        estimate unscaled), or None. Weighed trials (`weigh`): the estimate of those left, less
        the time the running ones have had (`_busy`; the largest left: the sweep runs them
        first), scaled once trials finish by their measured over their estimated seconds, so
        that large fits run first do not mislead as a pace per trial does. Else the count's pace
        so far."""
        weighed = [i for i in self.costs if i not in self.reused]
        left = sorted((self.costs[i] for i in weighed if i not in self.fitted), reverse=True)
        if self.began is not None and left:
            done = [i for i in weighed if i in self.fitted]
            planned = sum(self.costs[i] for i in done)
            spent = sum(self.seconds.get(i, 0.0) for i in done)
            if done and not spent:  # records without their seconds: the pace of the work done
                return (now - self.began) * sum(left) / planned, False, False
            scale = spent / planned if done else 1.0
            workers = min(self.parallel, len(left))
            rest = scale * sum(left) - max(self._busy(now, len(weighed)) - spent, 0.0)
            others = scale * sum(left[int(workers) :])  # those not yet begun
            return max(rest, others) / workers, rest < others, not done
        if not self.count:
            return None
        return (now - self.start) / self.count * max(self.total - self.count, 0), False, False

    def _busy(self, now: float, trials: int) -> float:
        """The workers' seconds on the weighed trials since they began: as many workers as
        trials are left to run, up to `parallel`, between one trial's end and the next's (each
        worker takes the next trial as it finishes one)."""
        busy, since, unfinished = 0.0, self.began, trials
        for at in [*self.ended, now]:
            busy += min(self.parallel, unfinished) * max(at - since, 0.0)
            since, unfinished = at, unfinished - 1
        return busy

    def rest(self) -> None:
        """A sweep of the command ended: no ticks until the next one begins (`phase`), so a
        display the caller keeps open after its last sweep (`blocklab.run`'s caller, a script)
        never says "running" of trials that are not."""
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            ticker.stop()  # outside the lock: its last tick may be waiting for it

    def close(self) -> None:
        self.rest()
        with self._lock:
            if self.bar is not None:
                self._draw()
                self.bar.close()
                self.bar = None

    def say(self, line: str) -> None:
        """A line on stderr, above the bar where one is shown."""
        if not self.enabled:
            return
        with self._lock:
            self.last = self._now()
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
