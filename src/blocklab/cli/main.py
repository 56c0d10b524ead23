"""The `blocklab` command. Bad input: one line on stderr, exit 2, no traceback. Every command
takes `--import MODULE_OR_PATH` (repeatable): plugins loaded before the command runs."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import difflib
import functools
import os
import select
import signal
import sys
import threading
from typing import Any, NoReturn

from blocklab import config as cfgmod
from blocklab import plugins
from blocklab.cli import advise, bench, check, experiment, report, runs, seprank, theory
from blocklab.errors import Interrupted, UserError, WorkerDied
from blocklab.experiments import EXPERIMENTS

# the help line of a first word under which several commands sit
GROUPS = {
    "sanford": "seed 002: qSA and Match2/Match3 separations",
    "seprank": "separation rank by grid tensors (seeds 000 and 001)",
}
# the commands that are not experiments: their words and what adds their parser
EXPLICIT = {
    "advise": advise.add_parser,
    "bench": bench.add_parser,
    "check": check.add_parser,
    "report": report.add_parser,
    "runs": runs.add_parser,
    "seprank measure": seprank.add_parser,
    "theory": theory.add_parser,
}


PROG = "blocklab"


class Parser(argparse.ArgumentParser):
    """Flags spelled out in full (a prefix such as --seed is not silently read as --seeds), and
    every mistake one line with a suggestion where one is close."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # argparse prints usage too; one line is the contract
        # main() leads with "blocklab: error:", so only a subcommand's own name adds anything
        raise UserError(message if self.prog == PROG else f"{self.prog}: {message}")

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        # a subcommand hands its leftovers up to the parser above it; the innermost parser that
        # met them knows which flags were meant, so parse_args reports them from there
        if extras and not hasattr(namespace, "_unrecognized_by"):
            namespace._unrecognized_by = self
        return namespace, extras

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            where = getattr(namespace, "_unrecognized_by", self)
            where.error(where.unrecognized(extras))
        return namespace

    def unrecognized(self, extras: list[str]) -> str:
        """'unrecognized argument --seed (did you mean --seeds?)': the flags among `extras`, each
        with its closest known spelling; a flag's value is left out, being no mistake itself."""
        flags = [e.split("=", 1)[0] for e in extras if e.startswith("-") and not _number(e)]
        if not flags:
            return f"unrecognized argument{'s' * (len(extras) > 1)} {' '.join(extras)}"
        known = [s for action in self._actions for s in action.option_strings]
        named = []
        for flag in dict.fromkeys(flags):
            close = difflib.get_close_matches(flag, known, n=1)
            named.append(f"{flag} (did you mean {close[0]}?)" if close else flag)
        return f"unrecognized argument{'s' * (len(named) > 1)} {', '.join(named)}"

    def _check_value(self, action, value):
        # argparse's own message lists the choices but never says which one was likely meant
        if action.choices is not None and value not in action.choices:
            raise argparse.ArgumentError(action, cfgmod.invalid_choice(value, action.choices))


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def version() -> str:
    """The installed distribution's version, else the source tree's."""
    from importlib import metadata

    try:
        return metadata.version("blocklab")
    except metadata.PackageNotFoundError:
        from blocklab import __version__

        return __version__


class _Version(argparse.Action):
    """--version, looked up only when asked for: reading the installed metadata takes a moment
    that every other command would otherwise pay."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"blocklab {version()}")
        parser.exit()


def build_parser() -> Parser:
    parser = Parser(prog=PROG, description=__doc__)
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    commands = dict(EXPLICIT)
    for name in EXPERIMENTS.names():
        found = EXPERIMENTS.get(name)
        for command in found.commands:
            adder = functools.partial(experiment.add_parser, experiment=found, command=command)
            commands[command.words] = adder
    groups: dict[str, Any] = {}  # first word -> the subparsers of its commands
    for words in sorted(commands):
        first, *rest = words.split()
        where = sub
        if rest:
            if first not in groups:
                group = sub.add_parser(first, help=GROUPS.get(first, f"the {first} commands"))
                groups[first] = group.add_subparsers(
                    dest="which", required=True, parser_class=Parser
                )
            where = groups[first]
        commands[words](where)
    _add_import(parser)
    return parser


def _add_import(parser: argparse.ArgumentParser) -> None:
    """`--import` on every command (the parsers with no subcommands under them)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        parser.add_argument(
            "--import",
            dest="imports",
            action="append",
            metavar="MODULE_OR_PATH",
            help="a plugin to import first: a module name or a .py file (repeatable)",
        )
    for action in subs:
        for sub in dict.fromkeys(action.choices.values()):  # an alias is the same parser
            _add_import(sub)


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            # what is still buffered is written here, where a closed pipe can be caught, and not
            # at exit, where Python would print the error itself
            sys.stdout.flush()
    except BrokenPipeError:
        if not _reader_gone():  # another pipe broke (a worker's, say): that is a real failure
            raise
        # the reader stopped early (`blocklab runs list | head -2`): the rest goes nowhere, and
        # the exit status is the one a process killed by SIGPIPE gives
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13


def command() -> NoReturn:
    """The `blocklab` command as its own process runs it (the installed script, `python -m
    blocklab`): `main`, then the process ends without the interpreter's teardown, which frees
    torch's, SciPy's and matplotlib's objects one by one, most of a second at every command's
    end. What that teardown does that matters is done first, in the interpreter's order: the
    threads that are not daemons joined, the exit handlers run (multiprocessing's, logging's, a
    tracker's), the standard streams flushed. An error that escapes `main` ends as Python ends
    it, with its traceback."""
    code = main()
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def _reader_gone() -> bool:
    """Whether stdout is a pipe that nobody reads any more: poll reports an error on its end.
    Where there is no poll, stdout is by far the likeliest pipe to have broken."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a capture): not what broke
        return False
    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(event & select.POLLERR for _, event in poller.poll(0))


def _main(argv: list[str] | None) -> int:
    # a kill or a closed terminal stops like Ctrl-C: finished trials are kept, workers stopped
    signal.signal(signal.SIGTERM, _sigterm)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, _sigterm)
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        args = build_parser().parse_args(argv)
        args.argv = argv  # what a run records as its command
        plugins.load(args.imports or ())  # before the command resolves any name
        return args.handler(args)
    except UserError as exc:
        # one line whatever the message holds (SQLite's and argparse's texts may hold several)
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        print(f"blocklab: error: {'; '.join(lines)}", file=sys.stderr)
        return 2
    except WorkerDied as exc:
        print(f"blocklab: {exc}; rerun the same command to resume", file=sys.stderr)
        return 1
    except Interrupted as exc:
        print(f"blocklab: {exc}; rerun the same command to resume", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("blocklab: interrupted", file=sys.stderr)
        return 130
