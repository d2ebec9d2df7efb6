"""Where the active party's label defence meets the algorithms: every gradient it sends down, perturbed first.

A passive party learns the labels from the per-row gradients it is sent (``vflprivacy.label_defences``).
The active party perturbs each such answer in its own process, just before it is published,
with the labels of the answer's rows: in the SplitNN family that is ``SplitNNFamilyServer._publish``,
which every member's answers pass through (a whole batch, each micro-batch part, or async's
answer to one sender).

The noise of an answer is drawn from the active party's secret key, keyed by
("label_defence", epoch, batch on the wire, party): a resumed job sends exactly the bytes the
uninterrupted one would have, and no other party can regenerate the noise from the job's seed.
With ``[algorithm] micro_batches`` each part is perturbed on its own, and Marvell's statistics
(class means, spread, positive fraction) are those of the part.

Algorithms whose passive parties receive something other than the gradient of their rows
(``ServerAlgorithm.sends_gradients`` is False) cannot take a label defence, and a job that asks
for one is refused (``check_label_defence``): VIMADMM and VIMADMM-J send ADMM state (λ_B, s^k_B,
W_k), APFed sends the active party's own embedding h^A, AdptVFedConv sends its extractor's
weights once. Randomised-response label DP (``label_dp_epsilon``) applies to every algorithm:
the active party trains on the randomised labels, and whatever is sent is computed from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vflalgorithms.base import ActiveContext, ServerAlgorithm
from vflcore.errors import ConfigError
from vflcore.job import JobSpec
from vflcore.privacy import PrivacySpec
from vflprivacy.label_defences import check_classes, protect_gradients
from vflprivacy.noise import noise_generator

#: The defence's name in ``noise_generator``: its noise never coincides with another defence's.
LABEL_DEFENCE_NOISE = "label_defence"


def check_label_defence(job: JobSpec, half: type[ServerAlgorithm], where: str = "job") -> None:
    """Refuse a label defence the algorithm gives no gradient to apply to, naming the key and the algorithm."""
    defence = job.privacy.label_defence
    if defence != "none" and not half.sends_gradients:
        raise ConfigError(
            f"{where}: [privacy] label_defence = {defence!r}: {job.algorithm} sends the passive parties no "
            "per-row gradient to perturb; remove the key, or protect the labels with label_dp_epsilon"
        )


@dataclass(frozen=True)
class LabelProtection:
    """The job's label defence, as the active half applies it to each gradient it publishes."""

    spec: PrivacySpec
    key: bytes
    #: The rows' training labels (randomised ones if the job asks for label DP): what Marvell shapes by.
    labels: torch.Tensor

    @classmethod
    def of(cls, ctx: ActiveContext, half: type[ServerAlgorithm]) -> LabelProtection | None:
        """The job's label defence for ``half``; None when it has none."""
        spec = ctx.job.privacy
        if spec.label_defence == "none":
            return None
        check_label_defence(ctx.job, half)
        if ctx.job.task == "classification":
            check_classes(spec, ctx.num_outputs)
        if ctx.privacy_key is None:
            raise ConfigError(
                f"[privacy] label_defence = {spec.label_defence!r} needs the active party's noise key; "
                "ActiveParty creates it in the job's folder (vflprivacy.noise.noise_key)"
            )
        return cls(spec, ctx.privacy_key, ctx.labels)

    def perturb(self, gradient: torch.Tensor, rows: np.ndarray, epoch: int, batch: int, party: int) -> torch.Tensor:
        """``gradient`` of ``rows`` as sent to ``party`` for ``batch`` (its index on the wire) of ``epoch``."""
        rng = noise_generator(self.key, LABEL_DEFENCE_NOISE, epoch, batch, party)
        return protect_gradients(self.spec, gradient, self.labels[rows], rng)


__all__ = ["LABEL_DEFENCE_NOISE", "LabelProtection", "check_label_defence"]
