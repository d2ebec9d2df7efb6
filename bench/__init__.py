"""Benchmarks, a folder per family (bench/README.md): each prints its figures, then a BENCH line; make bench-<name>."""
