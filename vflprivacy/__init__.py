"""Privacy: what each party can learn from what it legitimately receives, and the defences that stop it.

One floor above ``vflcore``, below the algorithms and the daemons, so that the party whose data a
defence protects applies it in its own process:

- ``noise``: each party's secret noise key, kept in its own job folder. Every defence draws its
  noise from it, keyed by where in training the noise is used, so a resumed run draws the same
  noise and no other party (who knows the job's seed) can reproduce or subtract it.
- the defences (label protection at the active party, embedding protection at a passive party)
  and the accountant that states ε (opacus);
- the attack probes: label inference from the gradients a passive party receives, and feature
  inversion from the embeddings the active party receives.
"""
