"""The privacy bench (``make bench-privacy``, ``python -m bench.privacy``): attack AUC against cost, per defence.

``__main__``: the options and the run; ``plan``: which settings each algorithm runs; ``tasks``: the
datasets; ``runs``: one job and its probes on the live service; ``party``: the recording passive
party; ``cells``: mean and 95 % interval per cell; ``report``: the table, the plot and the verdict.
"""
