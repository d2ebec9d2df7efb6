"""The plan: one job as the active party runs it, read from its document and checked before it is queued.

- ``job_plan``: ``JobPlan`` (the ``JobSpec`` and how the active party runs it: datasets, models,
  top model, serving, student) and ``check_plan``, the checks every plan meets when it is made.
- ``document``: ``plan_from_document``, a job document read into its plan; unknown tables and
  keys are refused by name.
- ``admission``: the checks that need the active party's table (its classes, its feature
  columns, the shapes of its own models and of the student), at submission; and reading that
  table for the job's run.

A floor of its own, below ``training``: the runner (``jobs``) and ``ActiveParty`` (``training``)
both hold a plan. What every party shares of the job is ``vflcore.job``.
"""
