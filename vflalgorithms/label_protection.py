"""Where the active party's label defence meets the algorithms: each label-dependent tensor sent down, perturbed first.

A passive party learns the labels from the per-row tensors it is sent (``vflprivacy.label_defences``).
The active party perturbs each such answer in its own process, just before it is published,
with the labels of the answer's rows: in the SplitNN family that is ``SplitNNFamilyServer._publish``,
which every member's answers pass through (a whole batch, each micro-batch part, or async's
answer to one sender). What is perturbed is the algorithm's ``label_defended`` tensors:

- SplitNN, FedBCD, async and VIMSGD: the gradient ∂L/∂h^k of the party's rows;
- VIMADMM and VIMADMM-J: the duals λ_B and the party's residual s^k_B, each on its own, with the
  same defence (issue 38: both gave the labels away, direction attack 1.00 and 0.95). The party's
  τ local steps then follow the perturbed state; its head W_k (a weight matrix) is sent as is.

The noise of an answer is drawn from the active party's secret key, keyed by
("label_defence", epoch, batch on the wire, party), and for a tensor other than the gradient by
its name too: a resumed job sends exactly the bytes the uninterrupted one would have, and no other
party can regenerate the noise from the job's seed. With ``[privacy] noise_persistence`` ρ > 0 a
share ρ of every draw is keyed by the row instead (``vflprivacy.noise.RowNormals``): the same in
every epoch, so a passive party that averages a row's answers over epochs cannot average it away.
With ``[algorithm] micro_batches`` each part is perturbed on its own, and Marvell's statistics
(class means, spread, positive fraction) are those of the part.

Algorithms with no such tensor (APFed sends the active party's own embedding h^A, AdptVFedConv its
extractor's weights once) cannot take a label defence, and a job that asks for one is refused
(``check_privacy_applies``), with what does protect them: for APFed that is clipping and noise on
h^A (``active_embedding_clip``), since h^A reveals the labels through the active party's own
features, which neither a label defence nor label DP changes. Randomised-response label DP
(``label_dp_epsilon``) applies to every algorithm: the active party trains on the randomised
labels, and whatever is sent is computed from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from vflalgorithms.contexts import ActiveContext
from vflalgorithms.halves import ServerAlgorithm
from vflcore.errors import ConfigError
from vflcore.job.privacy import PrivacySpec
from vflcore.job.spec import JobSpec
from vflcore.wire.names import GRADIENT
from vflprivacy.embedding_noise import name_position
from vflprivacy.label_defences import JobPower, protect_gradients
from vflprivacy.noise import RowNormals, noise_generator

#: The defence's name in ``noise_generator``: its noise never coincides with another defence's.
LABEL_DEFENCE_NOISE = "label_defence"
#: The checkpoint's entry for the defence's job-level floor (``JobPower``).
LABEL_DEFENCE_POWER = "label_defence_power"


def check_privacy_applies(job: JobSpec, half: type[ServerAlgorithm], where: str = "job") -> None:
    """Refuse a defence the algorithm gives nothing to apply to: the key, the algorithm and what works instead."""
    spec = job.privacy
    if spec.label_defence != "none" and not half.label_defended:
        raise ConfigError(
            f"{where}: [privacy] label_defence = {spec.label_defence!r}: {job.algorithm} sends the passive parties no "
            f"per-row tensor computed from the labels to perturb; remove the key, and {half.label_defence_instead}"
        )
    if spec.protects_active_embedding and half.active_embedding is None:
        raise ConfigError(
            f"{where}: [privacy] active_embedding_clip = {spec.active_embedding_clip:g}: {job.algorithm} sends the "
            "passive parties no embedding of the active party's (only APFed-R and APFed-C do); remove the key"
        )


@dataclass(frozen=True)
class LabelProtection:
    """The job's label defence, as the active half applies it to each gradient it publishes."""

    spec: PrivacySpec
    key: bytes
    #: The rows' training labels (randomised ones if the job asks for label DP): what Marvell shapes by.
    labels: torch.Tensor
    #: The job's typical row power per (party, tensor), which every defence's floor keeps to; training
    #: state, in the active party's checkpoint (``SplitNNFamilyServer.state``).
    power: JobPower = field(default_factory=JobPower)

    @classmethod
    def of(cls, ctx: ActiveContext) -> LabelProtection | None:
        """The job's label defence; None when it has none.

        Whether the algorithm can take it (``check_privacy_applies``) was checked once, when the
        job's plan was made, and whether the labels suit it (Marvell: two classes) by the active
        party when it read its table.
        """
        spec = ctx.job.privacy
        if spec.label_defence == "none":
            return None
        if ctx.privacy_key is None:
            raise ConfigError(
                f"[privacy] label_defence = {spec.label_defence!r} needs the active party's noise key; "
                "ActiveParty creates it in the job's folder (vflprivacy.noise.noise_key)"
            )
        return cls(spec, ctx.privacy_key, ctx.labels)

    def perturb(
        self, tensor: torch.Tensor, rows: np.ndarray, epoch: int, batch: int, party: int, name: str = GRADIENT
    ) -> torch.Tensor:
        """``tensor`` (wire name ``name``) of ``rows`` as sent to ``party`` for wire batch ``batch`` of ``epoch``."""
        position = name_position(name)
        where = (epoch, batch, party) if name == GRADIENT else (epoch, batch, party, position)
        fresh = noise_generator(self.key, LABEL_DEFENCE_NOISE, *where)
        persistence = self.spec.noise_persistence
        rng = RowNormals(fresh, self.key, LABEL_DEFENCE_NOISE, (party, position), rows, persistence)
        return protect_gradients(self.spec, tensor, self.labels[rows], rng, self.power, (party, name))


__all__ = ["LABEL_DEFENCE_NOISE", "LABEL_DEFENCE_POWER", "LabelProtection", "check_privacy_applies"]
