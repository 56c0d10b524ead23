"""MNIST-1D (Greydanus 2020): ten 1-D digit templates, padded, sheared, shifted and noised."""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS
from blocklab.tasks.base import Split, Task, TaskData, split_val

PUBLISHED_TEST_ACCURACY = {"logistic regression": 0.32, "mlp": 0.68, "cnn": 0.94, "gru": 0.91}


@functools.lru_cache(maxsize=4)
def _generate(num_samples: int, data_seed: int, shuffle_seq: bool):
    """Build the dataset procedurally (never downloads), once per process: every trial of a
    sweep reads the same one."""
    import mnist1d.data  # pulls in scipy and requests: only when the task is used

    args = mnist1d.data.get_dataset_args()
    args.num_samples, args.seed, args.shuffle_seq = num_samples, data_seed, shuffle_seq
    # make_dataset reseeds NumPy's and Python's global RNGs; leave the caller's streams untouched
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        d = mnist1d.data.make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    x, x_test = (torch.tensor(d[k], dtype=torch.float32) for k in ("x", "x_test"))  # (n, 40)
    y, y_test = (torch.tensor(d[k], dtype=torch.int64) for k in ("y", "y_test"))  # (n,)
    return x, y, x_test, y_test


@TASKS.register
class Mnist1d(Task):
    """The fixed MNIST-1D benchmark (published size: 4000 train, 1000 test; 10 classes, 40 steps).

    `make(seed)` ignores `seed` for the data: the dataset is a benchmark fixed by `data_seed`, and
    the validation split is carved with `data_seed` too, so every trial sees the same split. Trial
    seeds vary only initialization and batch order, and numbers compare with the published ones.
    """

    kind = "classification"
    default_threshold = 1.25  # cross-entropy
    small_options: ClassVar[dict] = {"num_samples": 1000, "n_val": 100}
    seed_dependent: ClassVar[bool] = False

    @dataclass(frozen=True)
    class Options:
        num_samples: int = 5000  # 80% train, 20% test, as published
        data_seed: int = 42  # the published dataset's seed
        n_val: int = 400  # carved from the training part
        shuffle_seq: bool = False  # permute the 40 steps (a control: destroys locality)

        def __post_init__(self):
            if self.num_samples < 50:
                raise UserError(f"num_samples must be >= 50, got {self.num_samples}")
            n_train = int(0.8 * (self.num_samples // 10 * 10))  # how make_dataset splits
            if not 1 <= self.n_val < n_train:
                raise UserError(f"n_val must be in [1, {n_train}), got {self.n_val}")

    def make(self, seed: int) -> TaskData:
        o = self.options
        x, y, x_test, y_test = _generate(o.num_samples, o.data_seed, o.shuffle_seq)
        g = torch.Generator().manual_seed(o.data_seed)
        train, val = split_val(x, y, o.n_val, g)  # indexing copies: the cache stays untouched
        test = Split(x_test.clone(), y_test.clone())
        info = {
            "published_test_accuracy": dict(PUBLISHED_TEST_ACCURACY),
            "n_train": len(train),
            "n_val": len(val),
            "n_test": len(test),
        }
        return TaskData(train, val, test, self.kind, 10, info)
