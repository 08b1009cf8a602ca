"""The operations: every use case declared once (``registry.py`` says how), by area. Importing
the package registers them all, in this order."""

from memory_core.operations import evaluation, jobs, models, profiles, projects, runs
from memory_core.operations.registry import JOB, MCP, OPERATIONS, READ, UI, WRITE, Operation, Trait, names

__all__ = ["JOB", "MCP", "OPERATIONS", "READ", "UI", "WRITE", "Operation", "Trait", "evaluation", "jobs", "models",
           "names", "profiles", "projects", "runs"]  # fmt: skip
