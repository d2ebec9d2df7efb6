"""Benchmarks: each prints its figures and ends with one BENCH line (see the README); run with make bench-<name>."""
