"""The attacker of ``test_symlink_race.py``, in a process of its own so that it runs truly beside
the engine: swaps a path of a source for a symbolic link to a folder outside it, and back, until
SIGTERM; it then finishes the swap under way (the real tree is back) and prints how many it made.

    python symlink_swapper.py file|folder|source SOURCE OUTSIDE

- ``file``: ``SOURCE/swap.md`` becomes a link to ``OUTSIDE/secret.md`` and the file again, each in
  one rename over it (a hidden hard link keeps the real file between its turns);
- ``folder``: ``SOURCE/sub`` moves aside and a link to ``OUTSIDE`` takes its name, then it comes back;
- ``source``: the same with the source folder itself.
Each state is held for a random number of system calls, so a scan meets every mix of them.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from collections.abc import Callable
from pathlib import Path

HOLD = 64


def hold(path: Path) -> None:
    for _ in range(random.randrange(HOLD)):
        os.lstat(path)


def file_swap(source: Path, outside: Path) -> tuple[Callable[[], None], Callable[[], None]]:
    target, keep = source / "swap.md", source / ".keep"
    os.link(target, keep)

    def swap_once() -> None:
        os.symlink(outside / "secret.md", source / ".link")
        os.replace(source / ".link", target)
        hold(target)
        os.link(keep, source / ".real")
        os.replace(source / ".real", target)
        hold(target)

    return swap_once, keep.unlink


def folder_swap(folder: Path, outside: Path) -> tuple[Callable[[], None], Callable[[], None]]:
    aside = folder.with_name(f".{folder.name}-aside")

    def swap_once() -> None:
        os.rename(folder, aside)
        os.symlink(outside, folder)
        hold(folder)
        os.unlink(folder)
        os.rename(aside, folder)
        hold(folder)

    return swap_once, lambda: None


def main(kind: str, source: Path, outside: Path) -> None:
    stopped = False

    def stop(*_: object) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)
    if kind == "file":
        swap_once, done = file_swap(source, outside)
    else:
        swap_once, done = folder_swap(source / "sub" if kind == "folder" else source, outside)
    print("ready", flush=True)
    swaps = 0
    while not stopped:
        swap_once()
        swaps += 1
    done()
    print(swaps, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
