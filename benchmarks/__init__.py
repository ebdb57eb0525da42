"""Benchmark scripts, run as ``python -m benchmarks.<name>``."""
