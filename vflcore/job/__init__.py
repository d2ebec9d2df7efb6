"""The job: what every party of one training run knows and checks, because it crosses the wire.

- ``spec``: ``JobSpec``, the settings every party shares, each key with its own rule; ``Offer``.
- ``schedule``: the row split, the batches of each epoch, the model seeds, and ``Position``,
  where training continues: derived from the job's numbers alone, identically on every party.
- ``privacy``: ``PrivacySpec``, the ``[privacy]`` table (the defences each party applies).
- ``distill``: ``DistillSpec``, the ``[distill]`` table (a student the active party serves alone).
- ``rules``: ``validate_job``, the rules across keys, which the server checks at submission and
  a passive party again before it joins.
- ``document``: a job document's shared tables read into a ``JobSpec``.

What only the active party runs of a job (its plan, and the checks against its table) is
``vflserver.plan``.
"""
