"""End-to-end: `retagfs backup` copies the store while a mount reads it and
a writer edits it: no read fails, the copy holds every edit committed
before it began, and a mount of the copy serves the same view. These run
once."""

import os
import time

import pytest

from conftest import run
from test_live import export
from under_load import files_under, reads_and_edits

pytestmark = pytest.mark.once


def test_a_backup_taken_under_reads_and_edits_holds_every_committed_edit(tmp_path, store, library, mount):
    m = mount(store)
    track = export(store)[str(library / "tagged.flac")]["id"]
    copy = tmp_path / "copy.db"
    with reads_and_edits(m.mnt, store, track) as load:
        time.sleep(0.5)
        before = load.committed[-1]
        p = run("backup", "--db", str(store), str(copy))
        time.sleep(0.3)
    assert not load.failures, load.failures[:3]
    assert "backed up" in p.stderr and copy.exists() and not os.path.exists(str(copy) + ".partial")
    copied = export(copy)[str(library / "tagged.flac")]["tags"]["comment"]
    assert int(copied[0]) >= before, (copied, before)
    assert export(store)[str(library / "tagged.flac")]["tags"]["comment"] == [str(load.committed[-1])]
    assert files_under(mount(copy, name="copy-mnt").mnt) == files_under(m.mnt)
    again = run("backup", "--db", str(store), str(copy), check=False)
    assert again.returncode == 1 and "exists" in again.stderr, again.stderr
