"""What every bench family shares, and the one place a family takes a helper from another's work.

``paths``: where results (``bench/out``) and generated inputs (``bench/.cache``) go. ``machine``:
how busy the machine was while a phase ran. ``pool``: independent in-process runs on a process
pool. ``jobs``: one job as the product runs it (vfl-server + vfl-client processes over mTLS).
``daemons``: the long-running server and its two client daemons, and when they are ready.
``stats``: mean ± sample standard deviation over seeds. ``plots``: matplotlib on the Agg backend.
"""
