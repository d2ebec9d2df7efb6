"""A federated model served again: after its job, when a passive party restarts, and after a server crash.

A federated model (SplitNN, VIM, AdptVFedConv) is kept served after its job, until the next job
starts (``JobRunner._serve``); it needs every passive party for each prediction. The pieces, in
the order they act:

- ``terms``: ``RejoinTerms``, what a party must still hold to come back (the same IDs, the
  saved alignment, the checkpoint at the end of training), checked at its Join.
- ``readmission``: ``Readmission``, the thread that has each reconnected party load its
  alignment and its trained part again.
- ``saved_terms``: ``served_model.json``, the terms written beside the active party's
  checkpoints when the model is first served, read back after a server crash.
- ``standalone``: at start, the models that need no passive party (APFed's, a ``[distill]``
  job's student) put on the endpoint again.
- ``federated``: at start, the newest federated model that was served rebuilt from disk
  (``ActiveParty.serve_saved``) and its job opened again on the board.
- ``saved_jobs``: what this package reads of the job store, as protocols, since the store is
  on the floor above.
"""
