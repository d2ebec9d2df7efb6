"""The service as operated: federation overhead, WAN links, a long-running server, recovery, inference, fuzzing.

``make bench-overhead`` (``overhead``), ``bench-wan`` (``wan``, with its in-process yardstick
``wan_reference``), ``bench-service`` (``service``), ``bench-recovery`` (``recovery``),
``bench-inference`` (``inference``) and ``bench-fuzz`` (``fuzz``).
"""
