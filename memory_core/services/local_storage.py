"""What ``memcore project storage`` and ``project remove`` report (brief §6).

Project Local Storage holds only rebuildable commit generations: moving or clearing it never
touches Runs, Cases or blobs, which live in ``local.db`` and the blob store.
"""

from __future__ import annotations

import attrs

CURRENT, PREVIOUS, UNREFERENCED = "current", "previous", "unreferenced"


@attrs.frozen
class StoredGeneration:
    index_revision: str
    role: str  # current, previous, or unreferenced (left for the next index to prune)
    directory: str
    size_bytes: int


@attrs.frozen
class ProjectStorage:
    project_id: str
    location: str  # the directory that holds ``generations/``
    default_location: bool  # True: ``<home>/projects/<project_id>``
    size_bytes: int  # everything under the location, staging and trash included
    generations: tuple[StoredGeneration, ...]


@attrs.frozen
class ProjectRemoval:
    project_id: str
    purged: bool  # True: its Evaluation Cases and their pinned Runs went too
    deleted_runs: int
    kept_pinned: int  # this project's pinned Runs that stay (a Case still refers to each)
    deleted_cases: int
    deleted_blobs: int
