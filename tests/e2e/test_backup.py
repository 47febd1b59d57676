"""End-to-end: `retagfs backup` copies the store while a mount reads it and
a writer edits it: no read fails, the copy holds every edit committed
before it began, and a mount of the copy serves the same view. These run
once."""

import os
import subprocess
import threading
import time

import pytest

from conftest import BIN, run
from test_live import export

pytestmark = pytest.mark.once


def files_under(root):
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names)


def test_a_backup_taken_under_reads_and_edits_holds_every_committed_edit(tmp_path, store, library, mount):
    m = mount(store)
    paths = [os.path.join(m.mnt, p) for p in files_under(m.mnt)]
    track = export(store)[str(library / "tagged.flac")]["id"]
    stop = threading.Event()
    failures, committed = [], []

    def read_all():
        while not stop.is_set():
            for p in paths:
                try:
                    with open(p, "rb") as f:
                        f.read()
                except OSError as e:
                    failures.append((p, e))

    def edit():
        n = 0
        while not stop.is_set():
            n += 1
            subprocess.run([BIN, "tag", "--db", str(store), "set", str(track), f"comment={n}"],
                           check=True, capture_output=True)
            committed.append(n)

    workers = [threading.Thread(target=read_all) for _ in range(2)] + [threading.Thread(target=edit)]
    for w in workers:
        w.start()
    time.sleep(0.5)
    before = committed[-1]
    copy = tmp_path / "copy.db"
    p = run("backup", "--db", str(store), str(copy))
    time.sleep(0.3)
    stop.set()
    for w in workers:
        w.join()
    assert not failures, failures[:3]
    assert "backed up" in p.stderr and copy.exists() and not os.path.exists(str(copy) + ".partial")
    copied = export(copy)[str(library / "tagged.flac")]["tags"]["comment"]
    assert int(copied[0]) >= before, (copied, before)
    assert export(store)[str(library / "tagged.flac")]["tags"]["comment"] == [str(committed[-1])]
    assert files_under(mount(copy, name="copy-mnt").mnt) == files_under(m.mnt)
    again = run("backup", "--db", str(store), str(copy), check=False)
    assert again.returncode == 1 and "exists" in again.stderr, again.stderr
