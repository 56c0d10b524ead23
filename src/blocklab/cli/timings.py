"""What a command's defaults took to run: the package's timings file, `blocklab/timings.json`,
the one place a measured wall time is kept. `benchmarks/command_times.py` writes it, from a
checkout with no uncommitted change to its source: each entry is one timed run of a command (its
quick defaults, or a named form), or of an example the documentation gives (`example`: its key,
`blocklab.cli.examples`), with the command line, the wall time, the machine (CPU model, cores,
vector-extension flags, the load before, during and after), the commit, the date, and the
fingerprint of the config the command ran (`config_fingerprint`; null for a command that runs no
experiment). An entry kept from a results log instead names that log in its `source`.

`--help` states an entry's time and machine, read here without torch or numpy; a command or
form with no entry states no time. A config whose defaults changed since its entry was timed no
longer matches the entry's fingerprint (`problems`, which a test runs), so the file cannot keep
a time for a config that is not the one the command runs now.
"""

from __future__ import annotations

from typing import Any

# the file and its reading are the base layer's (`blocklab.timings`), which a plan reads too;
# its callers here (the tests, the timing script) read them from this module as before
from blocklab.timings import PATH, config_fingerprint, entries, find  # noqa: F401

SCRIPT = "benchmarks/command_times.py"
KEYS = ("command", "form", "argv", "seconds", "config_fingerprint", "machine", "commit", "date")
EXAMPLE_KEYS = ("example", "argv", "seconds", "config_fingerprint", "machine", "commit", "date")


def command(words: str):
    """(experiment, command) of the experiment command `words` ("seprank degree"); None where
    no experiment has that command."""
    from blocklab.experiments import EXPERIMENTS

    for name in EXPERIMENTS.names():
        experiment = EXPERIMENTS.get(name)
        for c in experiment.commands:
            if c.words == words:
                return experiment, c
    return None


def fingerprint_now(words: str, form: str = "") -> str:
    """The fingerprint of the config command `words` runs now at `form` ("": its defaults)."""
    found = command(words)
    if found is None:
        raise ValueError(f"no experiment command {words!r}")
    return config_fingerprint(found[0].defaults(words, form or None))


def problems(listed: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the entries: a key missing, a time measured on uncommitted source, a
    command or form that does not exist, two entries of one (command, form) or one example, or a
    command's config fingerprint that is not the config's now (its defaults changed since it was
    timed; an example's: `examples.stale`). Each line names the script that times it again."""
    out, seen = [], set()
    for e in listed:
        if e.get("uncommitted_source"):
            out.append(
                f"{e.get('command') or e.get('example')!r} was timed on uncommitted source: "
                f"time it again from a commit with {SCRIPT}"
            )
        if "example" in e:
            missing = [k for k in EXAMPLE_KEYS if k not in e]
            if missing:
                out.append(f"an entry lacks {', '.join(missing)}: {e}")
            elif ("example", e["example"]) in seen:
                out.append(f"example {e['example']!r} has two entries")
            seen.add(("example", e.get("example")))
            continue
        missing = [k for k in KEYS if k not in e]
        if missing:
            out.append(f"an entry lacks {', '.join(missing)}: {e}")
            continue
        words, form = e["command"], e["form"]
        key = (words, form)
        if key in seen:
            out.append(f"{words!r} form {form or 'defaults'!r} has two entries")
        seen.add(key)
        found = command(words)
        if found is None:
            out.append(f"{words!r} is no experiment command: remove its entry")
            continue
        if form and form not in found[0].forms:
            out.append(f"{words!r} has no form {form!r}: remove its entry")
            continue
        if e["config_fingerprint"] != fingerprint_now(words, form):
            run = f"python {SCRIPT} {words!r}" + (f" --form {form}" if form else "")
            out.append(
                f"{words!r} ({form or 'defaults'}) was timed with another config than it runs "
                f"now: time it again with `{run}`"
            )
    return out


def wall(seconds: float) -> str:
    """Whole seconds as the results logs write them: 'S s' under a minute, else 'M min S s'."""
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def machine(m: dict[str, Any]) -> str:
    """'2 cores of an AMD EPYC 7B13 with AVX-512', or '2 CPU cores' where the model was not
    recorded."""
    flags = set(m.get("flags") or ())
    simd = " with AVX-512" if "avx512f" in flags else " with AVX2" if "avx2" in flags else ""
    cpu = m.get("cpu") or ""
    where = f"{m['cores']} cores of an {cpu}" if cpu else f"{m['cores']} CPU cores"
    return where + simd


def took(e: dict[str, Any]) -> str:
    """'<wall> on 2 cores of an AMD EPYC 7B13 with AVX-512 (commit <hash>, <date>)', and
    where other work took a tenth of the cores or more while it ran, how much."""
    shared = e.get("others_cpu_seconds", 0) / (e["seconds"] * e["machine"]["cores"])
    busy = f", other work taking {shared:.0%} of the cores" if shared >= 0.1 else ""
    when = f"(commit {e['commit']}, {e['date']}{busy})"
    return f"{wall(e['seconds'])} on {machine(e['machine'])} {when}"


def defaults_took(command) -> str:
    """`--help`'s sentence on what the command's defaults took to run, as the timings file
    records it, or that no time was measured."""
    entry = find(command.words)
    what = f"the {command.form} form" if command.form else "the quick form"
    if entry is None:
        return f"No time measured for {what} (the defaults)."
    return f"{what[0].upper()}{what[1:]} (the defaults) took {took(entry)}."


def form_took(command, form: str, estimate: str | None) -> str | None:
    """A form's time in its flag's help: measured (the timings file), else the manifest's
    estimate, which says it is one, else none."""
    entry = find(command.words, form)
    return f"took {took(entry)}" if entry else estimate
