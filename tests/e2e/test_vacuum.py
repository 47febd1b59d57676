"""End-to-end: `retagfs vacuum` compacts the store while a mount reads it
and a writer edits it: no read fails, every committed edit is there after,
the store is smaller, the pictures served are the same bytes; a running
scan is waited for, then refused. These run once."""

import fcntl
import hashlib
import json
import os
import time

import pytest

from conftest import run
from test_live import export, wait_for
from under_load import files_under, reads_and_edits

pytestmark = pytest.mark.once


def digest_of_files(root):
    digests = {}
    for p in files_under(root):
        with open(os.path.join(root, p), "rb") as f:
            digests[p] = hashlib.sha256(f.read()).hexdigest()
    return digests


def test_compacting_under_reads_and_edits_loses_nothing(tmp_path, store, library, mount):
    tracks = export(store)
    # Space to give back: large values written, then removed.
    edits = tmp_path / "edits.json"
    for lyrics in ("la " * 300_000, None):
        edits.write_text(json.dumps([{"id": t["id"], "tags": {"lyrics": lyrics}} for t in tracks.values()]))
        run("import", "--db", str(store), str(edits))
    m = mount(store)
    served = digest_of_files(m.mnt)
    track = tracks[str(library / "tagged.flac")]["id"]
    with reads_and_edits(m.mnt, store, track) as load:
        time.sleep(0.5)
        p = run("vacuum", "--db", str(store), "--json")
        time.sleep(0.3)
    assert not load.failures, load.failures[:3]
    sizes = json.loads(p.stdout)
    # (The edit journal keeps the large values, for undo.)
    assert sizes["after_bytes"] < sizes["before_bytes"] * 0.9, sizes
    assert "compacted" in p.stderr and "MiB before" in p.stderr, p.stderr
    assert export(store)[str(library / "tagged.flac")]["tags"]["comment"] == [str(load.committed[-1])]
    # Pictures are read by row id: with the edited comment as it was, every
    # file is the same bytes after as before.
    comment = tracks[str(library / "tagged.flac")]["tags"].get("comment")
    if comment:
        run("tag", "--db", str(store), "set", str(track), *("comment=" + c for c in comment))
    else:
        run("tag", "--db", str(store), "rm", str(track), "comment")
    wait_for(lambda: digest_of_files(m.mnt) == served)


def test_a_running_scan_is_waited_for_then_refused(store):
    with open(str(store) + "-scan.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = time.monotonic()
        p = run("vacuum", "--db", str(store), "--wait", "1", check=False)
        took = time.monotonic() - started
    assert p.returncode == 1, p.stderr
    assert "scan" in p.stderr and "--wait" in p.stderr, p.stderr
    assert 1 <= took < 10, took
    assert run("vacuum", "--db", str(store)).returncode == 0
