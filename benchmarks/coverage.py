"""Coverage of the shared model's 95% intervals on multipliers, by simulation at a degree sweep's
sizes (`blocklab.experiments.degree_sweep.analysis.coverage`): which interval method holds its level
where.

    PYTHONPATH=src python benchmarks/coverage.py [--replications 200] [--boot-replications 60]
    PYTHONPATH=src python benchmarks/coverage.py --sized [--replications 300]
    PYTHONPATH=src python benchmarks/coverage.py --matched --teachers 12 [--replications 400]

The grid: units 3, 4, 6, 8; teachers 1, 2, 3 where they divide the units; sigma (the SD of one
unit's log loss in one cell) 0.1, 0.3, 1.0; tau = 0.1 between teachers in each log multiplier.
Each cell is a coverage in percent over the replications, with its Monte Carlo standard error.
The target is the population's multiplier with >= 2 teachers and the drawn teacher's own with
one (a second table gives one teacher against the population, which no interval from one
teacher can reach). The bootstrap refits up to `--n-boot` draws per replication, so it runs
on the first `--boot-replications` replications only, to keep the grid within ten minutes on
one core; the t intervals run on all of them (the same draws).

`--sized`: the "units" intervals of a run sized to +-R (`--target-resolution`), one seed a
teacher as the demo runs: at a fixed size (the 10 teachers the demo's recorded run sizes +-10%
to), and sized by the intervals of its own first 3 or 10 teachers (the internal pilot `sizing`
applies when --out holds a run: `degree_sweep.analysis.coverage.simulate_sized`), at R = 0.1, sigma
0.1 and 0.3, tau 0.1 and 0.2.

`--matched`: the matched answer's intervals (`degree_sweep.analysis.matched`) at a run's size
(`--teachers`, one seed each, the demo's ladders and negative control), with heavy-tailed units
(one unit in 20 with one rung 30x off) and without, rung noise sigma 0.05 and 0.15, tau 0.1
between teachers, on a pure power law and on one that bends (L_inf > 0): the coverage of the
trimmed mean's Yuen interval (the answer's) and of the plain mean's t interval beside it.
"""

from __future__ import annotations

import argparse
import math
import time

from blocklab.experiments.degree_sweep.analysis import coverage
from blocklab.formatting import markdown_table

UNITS = (3, 4, 6, 8)
SIGMAS = (0.1, 0.3, 1.0)


def designs():
    for units in UNITS:
        for teachers in (1, 2, 3):
            if units % teachers == 0:
                for sigma in SIGMAS:
                    yield coverage.Design(units, teachers, sigma)


def _cell(row) -> str:
    return f"{100 * row.coverage:.1f} ±{100 * row.se:.1f}"


def table(rows, target_of) -> list[str]:
    """One line per (design, method): each quantity's coverage against `target_of(teachers)`,
    the median half width of m2/m4's interval (as +-%), and the share of unbounded intervals."""
    keyed = {(r.units, r.teachers, r.sigma, r.method, r.quantity, r.target): r for r in rows}
    header = ["units", "teachers", "sigma", "method", "R", *coverage.QUANTITIES]
    header += ["m2/m4 +-%", "unbounded"]
    body = []
    for d in sorted({(r.units, r.teachers, r.sigma) for r in rows}):
        target = target_of(d[1])
        if target is None:
            continue
        for method in coverage.METHODS:
            if method == "units-naive" and d[1] == 1:
                continue  # the same intervals as "units" with one teacher
            got = [keyed.get((*d, method, q, target)) for q in coverage.QUANTITIES]
            if None in got:
                continue
            hw = got[coverage.QUANTITIES.index("m2/m4")].half_width
            width = f"{100 * math.expm1(hw):.0f}" if math.isfinite(hw) else "-"
            unbounded = f"{max(g.unbounded for g in got):.2f}"
            cells = [*map(str, d), method, str(got[0].replications), *map(_cell, got)]
            body.append([*cells, width, unbounded])
    return markdown_table(header, body)


# (rule, first units, cap): the recorded run's fixed size, and runs sized from their own first
# 3 or 10 units (a demo in --out, or the recorded run grown by the same command)
SIZED_RULES = (("fixed", 10, 10), ("pilot", 3, 40), ("pilot", 10, 40))
SIZED_TARGET = 0.1


def sized(replications: int, seed: int) -> None:
    start = time.perf_counter()
    header = ["rule", "units", "sigma", "tau", "reps", *coverage.SIZED, "units run", "reached"]
    body = []
    for k, (rule, first, cap) in enumerate(SIZED_RULES):
        for sigma in (0.1, 0.3):
            for tau in (0.1, 0.2):
                rows = coverage.simulate_sized(rule, first, SIZED_TARGET, cap, sigma, tau,
                                               replications, seed + k)  # fmt: skip
                r = rows[0]
                size = f"{r.units_median:g} (max {r.units_max})"
                body.append([rule, str(first), f"{sigma:g}", f"{tau:g}", str(r.replications),
                             *map(_cell, rows), size, f"{r.reached:.2f}"])  # fmt: skip
                print(f"# {rule} {first} sigma {sigma} tau {tau}: "
                      f"{time.perf_counter() - start:.0f} s", flush=True)  # fmt: skip
    print(f"\nCoverage (%) of the population's multipliers, runs sized to +-{SIZED_TARGET:g}\n")
    print("\n".join(markdown_table(header, body)))
    print(f"\n{time.perf_counter() - start:.0f} s")


def matched(teachers: int, replications: int, n_boot: int, seed: int) -> None:
    start = time.perf_counter()
    head = ["sigma", "heavy", "L_inf", "interval", *coverage.MATCHED_QUANTITIES, "m2/m4 +-%"]
    body = []
    for k, (sigma, heavy, floor) in enumerate(
        (s, h, f) for s in (0.05, 0.15) for h in (True, False) for f in (False, True)
    ):
        design = coverage.MatchedDesign(teachers, sigma, heavy=heavy, floor=floor)
        got = coverage.simulate_matched(design, replications, n_boot, seed + k)
        for how in ("trimmed", "plain"):
            cells = [f"{100 * got[(q, how)][0]:.1f} ±{100 * got[(q, how)][1]:.1f}"
                     for q in coverage.MATCHED_QUANTITIES]  # fmt: skip
            width = f"{100 * got['width']:.1f}" if how == "trimmed" else ""
            body.append([f"{sigma:g}", "yes" if heavy else "no", "> 0" if floor else "0", how,
                         *cells, width])  # fmt: skip
        print(f"# sigma {sigma}, heavy {heavy}, floor {floor}: {time.perf_counter() - start:.0f} s",
              flush=True)  # fmt: skip
    print()
    print(f"Coverage (%) of the matched answer's 95% intervals at {teachers} teachers x 1 seed,")
    print(f"{replications} replications each, tau = 0.1 between teachers (Monte Carlo se beside)")
    print()
    print("\n".join(markdown_table(head, body)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sized", action="store_true", help="runs sized to a resolution")
    parser.add_argument("--replications", type=int, default=200)
    parser.add_argument("--boot-replications", type=int, default=60)
    parser.add_argument("--n-boot", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--matched", action="store_true", help="the matched answer's intervals")
    parser.add_argument("--teachers", type=int, default=12, help="--matched: the run's teachers")
    args = parser.parse_args()
    if args.sized:
        return sized(args.replications, args.seed)
    if args.matched:
        return matched(args.teachers, args.replications, args.n_boot, args.seed)
    start = time.perf_counter()
    rows = []
    for k, design in enumerate(designs()):
        rows += coverage.simulate(
            design, args.replications, coverage.METHODS[:-1], 0, args.seed + k
        )
        rows += coverage.simulate(design, args.boot_replications, ("bootstrap",), args.n_boot,
                                  args.seed + k)  # fmt: skip
        print(f"# {design} done at {time.perf_counter() - start:.0f} s", flush=True)
    print()
    print("Coverage (%) of the 95% intervals: the population's multipliers with >= 2 teachers,")
    print("the drawn teacher's own with one")
    print()
    print("\n".join(table(rows, lambda t: "population" if t > 1 else "teachers")))
    print()
    print("One teacher, against the population's multiplier (tau = 0.1 between teachers)")
    print()
    print("\n".join(table(rows, lambda t: "population" if t == 1 else None)))
    print()
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
