"""Readers reading every file of a mount in a loop and a writer running
`retagfs tag set comment=N` in a loop, while a test does something to the
store under them (a backup, a compaction)."""

import contextlib
import os
import subprocess
import threading

from conftest import BIN


def files_under(root):
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names)


class Load:
    def __init__(self):
        self.failures = []
        self.committed = []


@contextlib.contextmanager
def reads_and_edits(mnt, store, track, readers=2):
    """Yields a Load: `failures` (path, error) of the reads, `committed`
    the comments the writer set, in order."""
    paths = [os.path.join(mnt, p) for p in files_under(mnt)]
    stop = threading.Event()
    load = Load()

    def read_all():
        while not stop.is_set():
            for p in paths:
                try:
                    with open(p, "rb") as f:
                        f.read()
                except OSError as e:
                    load.failures.append((p, e))

    def edit():
        n = 0
        while not stop.is_set():
            n += 1
            p = subprocess.run([BIN, "tag", "--db", str(store), "set", str(track), f"comment={n}"],
                               capture_output=True, text=True)
            if p.returncode != 0:
                load.failures.append(("tag set", p.stderr))
                continue
            load.committed.append(n)

    workers = [threading.Thread(target=read_all) for _ in range(readers)] + [threading.Thread(target=edit)]
    for w in workers:
        w.start()
    try:
        yield load
    finally:
        stop.set()
        for w in workers:
            w.join()
