"""Benchmark scripts: each prints figures measured in one run on this machine."""
