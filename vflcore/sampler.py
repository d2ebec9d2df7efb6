"""Choose train/test rows and per-epoch batches that every party computes identically, without talking.

Parties hold the same aligned rows in the same order and the same job seed, so seeding NumPy's
generator with the seed (and epoch) gives each party the same split and the same batches.
Nothing here depends on process state, which is what makes the agreement hold across machines.
"""

from __future__ import annotations

import numpy as np

__all__ = ["epoch_batches", "split_rows"]


def split_rows(num_rows: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split row indices into (train_rows, test_rows), each sorted ascending, as int64 arrays.

    The test rows are the first round(num_rows * test_fraction) entries of a seeded permutation;
    sorting each part keeps row access in file order, which is cheaper and easier to inspect.
    """
    if num_rows < 1:
        raise ValueError(f"num_rows must be at least 1, got {num_rows}")
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    num_test = round(num_rows * test_fraction)
    if num_rows - num_test < 1:
        raise ValueError(
            f"test_fraction {test_fraction} leaves no training rows out of {num_rows}; lower test_fraction"
        )
    permutation = np.random.default_rng(seed).permutation(num_rows).astype(np.int64)
    test_rows = np.sort(permutation[:num_test])
    train_rows = np.sort(permutation[num_test:])
    return train_rows, test_rows


def epoch_batches(train_rows: np.ndarray, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Shuffle train_rows for this epoch and cut them into batches; the last batch may be smaller.

    Seeding with [seed, epoch] gives each epoch its own order that any party can recompute
    independently, e.g. after a restart, without replaying earlier epochs.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if epoch < 0:
        raise ValueError(f"epoch must be non-negative, got {epoch}")
    shuffled = np.random.default_rng([seed, epoch]).permutation(np.asarray(train_rows, dtype=np.int64))
    return [shuffled[start : start + batch_size] for start in range(0, len(shuffled), batch_size)]
