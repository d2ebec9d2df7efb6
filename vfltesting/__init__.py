"""What the tests, benchmarks and examples share, and the product never imports: not installed with it.

``datasets`` writes vertically split example data; ``localrun`` starts the daemons as local
processes; ``pki`` issues a throwaway CA and party certificates with the product's own tooling;
``jobs`` holds the digits job that tests and benchmarks derive theirs from. What two test modules
share lives here too, never in one of them: ``in_process`` (an active party served from the test
process), ``faults`` (the recovery tests' recipe), ``eventually`` (the one wait), ``equivalence``,
``models``, ``servables``, ``onnx_models``, ``id_tables``, ``paths`` and the ``throwaway`` algorithm.
Run from the repository root (``python -m pytest``, ``python -m bench.<family>.<bench>``), or with the root on
``PYTHONPATH`` (the Makefile does this for ``examples/``).
"""
