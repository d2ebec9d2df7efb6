"""The training algorithms measured: rounds, bytes and wall time to a target, and the papers' tables.

``make bench-comm`` (``comm``), ``bench-fedbcd`` (``fedbcd``), ``bench-async`` (``asynchronous``)
run federated jobs over mTLS and read their learning curves (``curves``); ``bench-apfed``
(``apfed``), ``bench-adptvfedconv`` (``adptvfedconv``) and ``bench-distill`` (``distill``) train
in-process references on a process pool, each with its ``*_runs`` (one run) and ``*_report``.
"""
