"""Benchmarks: figures as JSON under benchmarks/results and tables in docs/performance.md.

Each benchmark module exposes ``NAME``, ``run(quick: bool) -> dict`` (returns what it also
writes to ``results/<NAME>.json``) and ``render(result: dict) -> str`` (a markdown section).
"""
