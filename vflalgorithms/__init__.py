"""The training algorithms: one folder each, both halves together, found by discovery.

Each folder holds ``spec.py`` (its name, options and tensor names, registered with
``vflalgorithms.registry.register``), ``active.py`` (the active party's half), ``passive.py`` (a
passive party's half), ``reference.py`` (the same maths in one process, the yardstick) and
``maths.py`` where both halves share mathematics. ``vflalgorithms.registry.algorithm_spec(name)``
imports every folder's ``spec.py`` the first time it is asked, so adding a folder is all it
takes to add an algorithm.
"""
