"""`blocklab bench`: the matmul ceiling, sequential vs ensemble training speed, and certified
second-order fits one at a time vs batched, in one run."""

from __future__ import annotations

import argparse
import dataclasses
import json

from blocklab.config import number

# what `bench.BenchConfig` takes from the command line; a flag left out keeps the config's default
SETTINGS = ("widths", "members", "depth", "degree", "batch_size", "seconds", "repeats", "threads")
SETTINGS += ("lm_widths", "lm_batch_size")
SETTINGS += ("fit_depths", "fit_width", "fit_restarts", "fit_iterations", "split_depths")


def add_parser(sub) -> None:
    # the defaults are BenchConfig's, read when the command runs: the module that holds them
    # imports torch, which the command line's help must not
    p = sub.add_parser("bench", help="training speed: one network at a time vs an ensemble")
    count = number(int, ge=1)
    p.add_argument("--widths", type=count, nargs="+", help="network widths (32 64 128 256)")
    p.add_argument("--members", type=count, help="ensemble size E (16)")
    p.add_argument("--depth", type=count, help="layers (4)")
    p.add_argument("--degree", type=count, help="polynomial degree (3)")
    p.add_argument("--batch-size", type=count, help="(128)")
    p.add_argument(
        "--seconds", type=number(float, gt=0), help="time of the shorter timed run (0.5)"
    )
    p.add_argument("--repeats", type=count, help="timed runs per length, fastest kept (3)")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument("--threads", type=count, help="torch threads (default: torch's, all cores)")
    p.add_argument(
        "--lm-widths",
        type=count,
        nargs="*",
        help="language-model widths (16 32 64); none: no language-model rows",
    )
    p.add_argument("--lm-batch-size", type=count, help="language-model sequences per step (32)")
    p.add_argument(
        "--fit-depths",
        type=count,
        nargs="*",
        help="depths of the Levenberg-Marquardt fits (2 6); none: no fit rows",
    )
    p.add_argument("--fit-width", type=count, help="width of the fitted networks (4)")
    p.add_argument("--fit-restarts", type=count, help="fits per depth, K (4)")
    p.add_argument("--fit-iterations", type=count, help="iterations per fit (64)")
    p.add_argument(
        "--split-depths",
        type=count,
        nargs="*",
        help="depths at --fit-width whose Levenberg-Marquardt iteration is split into its parts "
        "(8 24); none: no split rows",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from blocklab.bench import BenchConfig, run_bench
    from blocklab.engine.devices import device_name

    device = device_name(args.device)
    given = {k: getattr(args, k) for k in SETTINGS if getattr(args, k) is not None}
    for key in ("widths", "lm_widths", "fit_depths", "split_depths"):
        if key in given:
            given[key] = tuple(given[key])
    cfg = dataclasses.replace(BenchConfig(), device=device, **given)
    result = run_bench(cfg)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(_table(result))
    return 0


def _table(r: dict) -> str:
    lines = [
        f"{r['device']}, {r['threads']} torch threads; E = {r['members']} networks of degree "
        f"{r['degree']}, depth {r['depth']}, batch {r['batch_size']}; the fastest of "
        f"{r['repeats']} runs of each length",
        f"{(r['widths'] or [{}])[0].get('precision', 'float32')} matmul ceiling: "
        f"{r['matmul_ceiling_gflops']:.1f} GFLOP/s",
        "",
        "width  sequential  (1 thread)  ensemble  speed-up  ensemble GFLOP/s  of ceiling  "
        "matmul share",
        "       (model-steps per second)                    (of the ensemble's step, profiled)",
    ]
    for w in r["widths"]:
        single = w["sequential_1_thread_steps_per_s"]
        lines.append(
            f"{w['width']:>5}  {w['sequential_steps_per_s']:>10.0f}  "
            f"{'-' if single is None else f'{single:.0f}':>10}  "
            f"{w['ensemble_steps_per_s']:>8.0f}  {w['speedup']:>7.2f}x  "
            f"{w['ensemble_gflops']:>16.1f}  {w['fraction_of_ceiling']:>9.0%}  "
            f"{'-' if w['matmul_share'] is None else format(w['matmul_share'], '.0%'):>12}"
            f"{_slower(w['speedup'])}"
        )
    if r["lm_widths"]:
        lm = r["lm"]
        lines += [
            "",
            f"language models: depth {lm['depth']}, {lm['heads']} heads of causal softmax "
            f"attention, ReLU 4x feed-forward, layer norm; vocabulary {lm['vocab']}, "
            f"{lm['seq_len']} tokens, batch {lm['batch_size']}",
            "width  sequential  ensemble  speed-up  ensemble GFLOP/s  of ceiling",
            "       (model-steps per second)",
        ]
        lines += [
            f"{w['width']:>5}  {w['sequential']:>10.0f}  {w['ensemble']:>8.0f}  "
            f"{w['speedup']:>7.2f}x  {w['ensemble_gflops']:>16.1f}  "
            f"{w['fraction_of_ceiling']:>9.0%}{_slower(w['speedup'])}"
            for w in r["lm_widths"]
        ]
    if r["fit_depths"]:
        f = r["fit"]
        lines += [
            "",
            f"converged fits: K = {f['restarts']} restarts of a degree-{f['degree']} network of "
            f"width {f['width']} on the {f['task']} task, {f['data_ratio']:g} examples per "
            f"parameter, {f['iterations']} Levenberg-Marquardt iterations each, certified at half",
            "depth  params  examples  one at a time   batched  speed-up  certified",
            "                         (fits per minute)                  (one at a time, batched)",
        ]
        lines += [
            f"{w['depth']:>5}  {w['params']:>6}  {w['examples']:>8}  "
            f"{w['sequential_fits_per_min']:>13.1f}  {w['batched_fits_per_min']:>8.1f}  "
            f"{w['speedup']:>7.2f}x  {w['sequential_converged']:>6}, {w['batched_converged']}"
            for w in r["fit_depths"]
        ]
    if r["fit_split"]:
        lines += [
            "",
            "one Levenberg-Marquardt iteration (float64), the fastest of each part; J^T J against "
            "the device's float64 matmul rate",
            "params  examples  residuals  Jacobian  (path)  J^T J   solve  J^T J GFLOP/s  "
            "of matmul",
            "                  (ms)",
        ]
        lines += [
            f"{w['params']:>6}  {w['examples']:>8}  {w['residuals_ms']:>9.1f}  "
            f"{w['jacobian_ms']:>8.1f}  {w['jacobian_path']:>6}  {w['normal_ms']:>6.1f}  "
            f"{w['solve_ms']:>6.1f}  {w['normal_gflops']:>13.1f}  {w['gemm_fraction']:>9.0%}"
            for w in r["fit_split"]
        ]
    return "\n".join(lines)


def _slower(speedup: float) -> str:
    """A row's words where the ensemble trained its members slower than one by one in the run."""
    return "  ensemble slower than one by one" if speedup < 1 else ""
