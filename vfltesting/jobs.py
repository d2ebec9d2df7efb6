"""The digits job that tests and benchmarks start from; each derives its own with ``dataclasses.replace``.

The example digits split (``vfltesting.datasets.write_digits_split``) with two passive parties,
batch 64, 16-dim embeddings from one hidden layer of 64, Adam at 0.003 and 20 % held out: 936
training rows, 15 batches an epoch. A test or bench names only what it changes (seed, epochs,
algorithm, ...), so what sets it apart from the others is what it writes.
"""

from __future__ import annotations

from vflcore.job.spec import JobSpec

__all__ = ["DIGITS_JOB"]

DIGITS_JOB = JobSpec(
    job_id="digits",
    seed=0,
    epochs=2,
    batch_size=64,
    embedding_dim=16,
    bottom_hidden=(64,),
    optimizer="adam",
    learning_rate=0.003,
    test_fraction=0.2,
    passive_parties=(2, 3),
)
