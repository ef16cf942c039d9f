"""Benchmarks (run as modules, never as timed unit tests)."""
