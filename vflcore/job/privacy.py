"""The job's ``[privacy]`` table: which defences each party applies to what it sends.

Two parties have something to protect, and each protects it itself, in its own process:

- the active party's labels leak through the gradients it returns (the norm and direction
  attacks of Li et al., ICLR 2022). It perturbs each answer before it leaves
  (``label_defence``: Marvell's shaped noise, max-norm or isotropic Gaussian noise), and may
  train on randomised-response labels (``label_dp_epsilon``: ε-label-DP);
- a passive party's features leak through the embeddings it sends (inversion by the active
  party). It clips each row's embedding to ``embedding_clip`` and adds Gaussian noise of
  standard deviation ``embedding_noise_multiplier × embedding_clip`` before it sends;
- in APFed the active party sends its own embedding h^A, which gives the labels away through its
  features (no label defence touches it): it clips and noises h^A the same way
  (``active_embedding_clip``, ``active_embedding_noise_multiplier``), with ε from the same accountant.

The settings travel with the job (``JobSpec.privacy``), so every party knows what the others
apply; a passive party's own config may require more than a job asks for, and that party
refuses the job at Join (``vflclient``). Every defence is off by default. ``vflprivacy`` holds the
defences, the accountant and the attack probes; this module only names and checks the settings,
so that the job (``vflcore.job.spec``) can carry them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from vflcore.errors import ConfigError
from vflcore.settings import (
    Section,
    at_least,
    check_declared,
    one_of,
    read_settings,
    refuse_unknown,
    setting,
    table_keys,
    within,
)

#: ``label_defence``: what the active party does to each gradient before it answers.
LABEL_DEFENCES = ("none", "marvell", "marvell_full", "max_norm", "gaussian")
#: The defences bounded by ``marvell_sum_kl``, for binary labels: Marvell as its paper summarises each
#: class (its mean and one variance), and "marvell_full", which matches each class's whole covariance.
MARVELL = frozenset({"marvell", "marvell_full"})
_ACTIVE_EMBEDDING_KEYS = ("active_embedding_clip", "active_embedding_noise_multiplier")
#: ``dp_delta``: a probability strictly between 0 and 1.
_DELTA = within(0, 1, "give a probability in (0, 1), e.g. 1e-5", low_included=False)
#: A scale or a budget: 0 turns it off, and none may be negative.
_OFF_AT_ZERO = setting("privacy", check=at_least(0, "give a number, at least 0 (0 turns it off)"))


def _persistence(value: Any) -> str | None:
    """``noise_persistence``: a share in [0, 1); 1 would be noise that cancels out of two releases' difference."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        return "; give a share in [0, 1), at least 0 (0 turns it off)"
    if value >= 1:
        return (
            " must be below 1: noise the same in every epoch cancels out of the difference of two releases "
            "(0.5 keeps half of it fresh)"
        )
    return None


@dataclass(frozen=True)
class PrivacySpec:
    """The defences of one job; the defaults turn every one off."""

    #: How the active party perturbs the gradients it returns: "none", "marvell" (binary tasks:
    #: noise shaped so the two classes' gradient distributions overlap, Li et al. ICLR 2022),
    #: "marvell_full" (the same bound, each class modelled by its whole covariance),
    #: "max_norm" (every row's gradient brought to the batch's largest norm, plus noise) or
    #: "gaussian" (isotropic noise, ``gradient_noise`` × the batch's mean gradient norm).
    label_defence: str = field(default="none", metadata=setting("privacy", check=one_of(LABEL_DEFENCES)))
    #: Marvell's bound on the symmetrised KL divergence between the two classes' perturbed
    #: gradient distributions, per batch: smaller is stronger protection and more noise.
    marvell_sum_kl: float = field(default=0.25, metadata=_OFF_AT_ZERO)
    #: "gaussian": the noise's standard deviation, relative to the batch's mean gradient norm.
    gradient_noise: float = field(default=1.0, metadata=_OFF_AT_ZERO)
    #: Randomised response on the training labels, ε-label-DP (0: off): each label is kept with
    #: probability e^ε / (e^ε + K - 1), else replaced by one of the K - 1 others.
    label_dp_epsilon: float = field(default=0.0, metadata=_OFF_AT_ZERO)
    #: Each passive party clips every row's embedding to this L2 norm before it sends (0: off).
    embedding_clip: float = field(default=0.0, metadata=_OFF_AT_ZERO)
    #: Gaussian noise on each clipped embedding: standard deviation = this × ``embedding_clip``.
    embedding_noise_multiplier: float = field(default=0.0, metadata=_OFF_AT_ZERO)
    #: The δ at which ε is reported for the embedding noise (opacus's RDP accountant).
    dp_delta: float = field(default=1e-5, metadata=setting("privacy", check=_DELTA))
    #: APFed: the active party clips every row of its own embedding h^A to this L2 norm before it
    #: sends it to the passive parties (0: off). h^A reveals the labels through the active party's
    #: features, which no label defence changes.
    active_embedding_clip: float = field(default=0.0, metadata=_OFF_AT_ZERO)
    #: Gaussian noise on each clipped row of h^A: standard deviation = this × ``active_embedding_clip``.
    active_embedding_noise_multiplier: float = field(default=0.0, metadata=_OFF_AT_ZERO)
    #: The share ρ (0 to below 1) of the active party's noise, its label defence's and h^A's, that is
    #: the same for a row in every epoch (0: all fresh). A passive party lines a row's releases up by
    #: its own IDs and averages them: fresh noise shrinks as 1/T, the row's fixed share never does.
    noise_persistence: float = field(default=0.0, metadata=setting("privacy", check=_persistence))

    def __post_init__(self) -> None:
        check_declared(self)

    @property
    def protects_active_embedding(self) -> bool:
        return self.active_embedding_clip > 0

    @property
    def protects_embeddings(self) -> bool:
        return self.embedding_clip > 0

    @property
    def protects_labels(self) -> bool:
        return self.label_defence != "none" or self.label_dp_epsilon > 0

    @property
    def needs_noise_key(self) -> bool:
        """Whether the active party draws noise of its own: for a label defence, label DP or h^A's noise."""
        return self.protects_labels or self.protects_active_embedding

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def privacy_keys() -> tuple[str, ...]:
    """Every key ``[privacy]`` may hold."""
    return table_keys(PrivacySpec, "privacy")


def privacy_from_table(table: Mapping[str, Any], where: str = "job") -> PrivacySpec:
    """``[privacy]`` read and completed with the defaults; a ConfigError names a key unknown or of the wrong type.

    Its rules are checked with the rest of the job (``check_privacy``, from ``vflcore.job.rules``),
    since some depend on the job's task.
    """
    refuse_unknown(Section({"privacy": table}, "privacy", where), privacy_keys())
    return PrivacySpec(**read_settings(PrivacySpec, {"privacy": table}, where))


def check_privacy(spec: PrivacySpec, where: str = "job", *, task: str = "classification") -> None:
    """Refuse settings no party can apply together, naming the keys; each key's own rule is its declaration's."""
    if spec.label_defence in MARVELL and spec.marvell_sum_kl <= 0:
        raise ConfigError(
            f"{where}: [privacy] marvell_sum_kl must be positive with label_defence = {spec.label_defence!r}"
        )
    for clip, noise in (("embedding_clip", "embedding_noise_multiplier"), _ACTIVE_EMBEDDING_KEYS):
        if getattr(spec, noise) > 0 and getattr(spec, clip) <= 0:
            raise ConfigError(f"{where}: [privacy] {noise} needs {clip} > 0 (the noise's scale is the clipping norm)")
    if spec.noise_persistence > 0 and spec.label_defence == "none" and spec.active_embedding_noise_multiplier <= 0:
        raise ConfigError(
            f"{where}: [privacy] noise_persistence = {spec.noise_persistence:g} shapes the active party's noise, but "
            "this job adds none; set label_defence, or active_embedding_noise_multiplier (APFed), or remove the key"
        )
    if task != "classification" and (spec.label_defence in MARVELL or spec.label_dp_epsilon > 0):
        key = "label_dp_epsilon" if spec.label_dp_epsilon > 0 else "label_defence"
        raise ConfigError(f"{where}: [privacy] {key} protects class labels; a {task} job has none (remove it)")


__all__ = ["LABEL_DEFENCES", "MARVELL", "PrivacySpec", "check_privacy", "privacy_from_table", "privacy_keys"]
