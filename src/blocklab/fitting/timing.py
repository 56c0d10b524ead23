"""What one step of a fit costs, timed on its own network: an AdamW step of a warm start
(`adam_step`) and a Levenberg-Marquardt iteration (`lm_iteration`), each as the run takes it, on
the spot, so the machine's load counts as it will in the run; and what an AdamW trial's parts
cost (`adam_costs`: its data, a step of its loop, a validation and a test pass), from which a
plan prices it at its steps (`AdamCosts.seconds`). A small network's step costs mostly the calls
it makes (the Jacobian by layers, J^T J, the solve, the residuals), which no FLOP count sees;
`plan` bounds the fits' time with these. Each times a copy of the network the checks before the
run built (`built`), so the steps that train it change no network another check reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


def sync(device: str) -> None:
    """Wait for `device`'s queued work (a CUDA device; the CPU runs in order), for timing."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def adam_step(spec, device: str = "cpu", steps: int = 16) -> float:
    """Seconds of one AdamW step of `spec`'s network on a batch of its `batch_size`, as a warm
    start takes it (`train.train`: forward, loss, backward, clipping, update, the loss read
    back, and its share of drawing a generative task's fresh examples): the mean of `steps`
    in a row after two that warm up."""
    from blocklab.fitting import built
    from blocklab.fitting.converge import training_set
    from blocklab.fitting.network import task_data
    from blocklab.fitting.train import ONLINE_CHUNK, autocast
    from blocklab.tasks.base import loss

    cfg = spec.train
    data = task_data(spec.task, spec.task_options, spec.data_seed)
    model = built.shared().copied(spec).to(device)  # a copy: these steps train it
    batch = training_set(data, cfg.batch_size, spec.seed)
    x, y = batch.x.to(device, torch.float32), batch.y.to(device, torch.float32)  # (B, ...)
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    cast = autocast(device, cfg.precision)
    for i in range(steps + 2):
        if i == 2:
            sync(device)
            start = time.perf_counter()
        with cast:
            out = model(x)
        value = loss(out.float(), y, data.kind)
        opt.zero_grad(set_to_none=True)
        value.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.clip)
        opt.step()
        value.item()
    seconds = (time.perf_counter() - start) / steps
    if data.online:  # fresh examples come ONLINE_CHUNK batches at a time
        start = time.perf_counter()
        data.sample(ONLINE_CHUNK * cfg.batch_size, torch.Generator().manual_seed(spec.seed))
        seconds += (time.perf_counter() - start) / ONLINE_CHUNK
    return seconds


# the damping the timed iterations start from, relative to the Marquardt scale: large enough that
# a step from a network's initialization is a short gradient step, which lowers the loss and is
# accepted, where the fit's own start (1e-3) may reject its first steps while its damping grows
TIMED_DAMPING = 1e2


def lm_iteration(spec, device: str = "cpu", iterations: int = 2) -> float:
    """Seconds of one Levenberg-Marquardt iteration of `spec`'s network on its fit's training set
    in float64 (`converge.fit_once`: `converge.examples` and `converge.training_set`, the
    network in float64), whole `run` calls timed: the damped solve, the residuals at the step,
    and for an accepted step the next Jacobian and J^T J. The mean of `iterations` after one
    that warms up, each step accepted (`TIMED_DAMPING`): an accepted step is an iteration's
    dearest, a rejected one evaluates the residuals alone."""
    from blocklab.fitting import built, converge
    from blocklab.fitting.fit import LevenbergMarquardt
    from blocklab.fitting.network import task_data

    data = task_data(spec.task, spec.task_options, spec.data_seed)
    # a copy: `double` converts it in place and the iterations fit it
    model = built.shared().copied(spec).to(device).double()
    params = sum(q.numel() for q in model.parameters() if q.requires_grad)
    available = None if data.online else len(data.train)
    train = converge.training_set(data, converge.examples(spec.train, params, available), spec.seed)
    fitter = LevenbergMarquardt(model, train.x.to(device), train.y.to(device))  # (N, ...)
    fitter.mu = TIMED_DAMPING
    fitter.run(1)
    sync(device)
    before, start = fitter.iterations, time.perf_counter()
    fitter.run(iterations)
    sync(device)
    return (time.perf_counter() - start) / max(1, fitter.iterations - before)


@dataclass(frozen=True)
class AdamCosts:
    """Seconds of an AdamW trial's parts, timed on its network (`adam_costs`): making its data
    (each trial makes its own, from its seed), one step of `train.train`'s loop, and one
    evaluation on the validation and on the test split."""

    data: float
    step: float
    val: float
    test: float

    def seconds(self, cfg) -> float:
        """The trial trained alone at `cfg` (its `TrainConfig`) with every step taken: its steps
        and its wsd branch's (`train.half_run`), the monitor's validation passes
        (`monitor.eval_steps`, the branch's and the final one), and the test pass. An upper bound
        where it trains in an ensemble, whose members share a step's calls, and where it
        diverges, as it stops there."""
        from blocklab.fitting.monitor import eval_steps
        from blocklab.fitting.train import half_run

        branch = half_run(cfg)
        steps = cfg.steps + (branch[1] - branch[0] if branch else 0)
        vals = len(eval_steps(cfg.steps, cfg.eval_points)) + 1 + (branch is not None)
        return self.data + steps * self.step + vals * self.val + self.test


def adam_costs(spec, device: str = "cpu", steps: int = 8) -> AdamCosts:
    """The parts of `spec`'s AdamW trial timed (`AdamCosts`): its data made from its seed, the
    mean of `steps` steps after two that warm up, each as `train.train` takes it (a batch of its
    training split, or of fresh examples with its share of drawing them, the forward pass under
    its precision, the loss in float32, backward, clipping, the update, the loss and the norm
    read back: `train.backward`), and one validation and one test pass (`train.evaluate`)."""
    import dataclasses

    from blocklab.fitting import built
    from blocklab.fitting.train import ONLINE_CHUNK, autocast, backward, evaluate
    from blocklab.tasks import make_task

    cfg = spec.train
    # built first, on the task's seed-0 data: what a task makes once and caches (a tokenizer)
    # is made there, so the data timed next cost what every trial pays
    model = built.shared().copied(spec).to(device)  # a copy: these steps train it
    seed = spec.seed if spec.data_seed is None else spec.data_seed
    start = time.perf_counter()
    data = make_task(spec.task, **spec.task_options).make(seed)
    made = time.perf_counter() - start
    gen = torch.Generator().manual_seed(spec.seed)
    if data.online:
        x, y = data.sample(cfg.batch_size, gen)  # (B, ...)
    else:
        x, y = data.train.x[: cfg.batch_size], data.train.y[: cfg.batch_size]  # (B, ...)
    batch = (x.to(device), y.to(device))
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    cast = autocast(device, cfg.precision)

    def clip() -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(params, cfg.clip)

    for i in range(steps + 2):
        if i == 2:
            sync(device)
            start = time.perf_counter()
        value, norm = backward(model, batch, data.kind, cast, opt.zero_grad, clip)
        torch.stack([value.detach().double(), norm.double()]).tolist()  # the loop's one read
        opt.step()
    step = (time.perf_counter() - start) / steps
    if data.online:  # fresh examples come ONLINE_CHUNK batches at a time
        start = time.perf_counter()
        data.sample(ONLINE_CHUNK * cfg.batch_size, gen)
        step += (time.perf_counter() - start) / ONLINE_CHUNK
    passes = []
    for split in (data.val, data.test):
        split = dataclasses.replace(split, x=split.x.to(device), y=split.y.to(device))
        sync(device)
        start = time.perf_counter()
        evaluate(model, split, data.kind, data.tolerance)
        sync(device)
        passes.append(time.perf_counter() - start)
    return AdamCosts(made, step, *passes)
