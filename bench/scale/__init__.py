"""Data at scale: reading 1M and 10M-row tables, training on 10M aligned rows, batch scoring 10M rows.

``make bench-data`` (``data``), ``bench-train-10m`` (``train_10m``), ``bench-score`` (``scoring``).
PSI at 10M is ``bench.psi.psi_10m``, beside the PSI bench whose code it reuses.
"""
