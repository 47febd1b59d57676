"""End-to-end: a served file's mtime and ctime move on whenever what it
serves changes (indexers such as MPD re-read a file only then), never go
back, and stay put while nothing changed (docs/store.md, "Change times")."""

import os
import sqlite3
import time

from conftest import run
from test_live import export, wait_for


def served_times(mnt):
    out = {}
    for d, _, files in os.walk(mnt):
        for f in files:
            st = os.stat(os.path.join(d, f))
            out[os.path.relpath(os.path.join(d, f), mnt)] = (st.st_mtime_ns, st.st_ctime_ns)
    return out


def test_an_unchanged_file_keeps_its_times_across_remount_and_rescan(store, library, mount):
    m = mount(store)
    before = served_times(m.mnt)
    assert before
    m.stop()
    run("scan", str(library), "--db", str(store))
    m = mount(store, name="again")
    assert served_times(m.mnt) == before


def test_a_tag_only_edit_moves_the_times_a_second_on_and_a_burst_never_back(store, library, mount):
    m = mount(store)
    flac = export(store)[str(library / "tagged.flac")]
    path = os.path.join(m.mnt, flac["path"])
    first = os.stat(path)
    assert first.st_mtime == os.stat(flac["backing_path"]).st_mtime, "unedited: the backing file's time"
    # The template has no genre: the file stays where it is.
    run("tag", "--db", str(store), "set", str(flac["id"]), "genre=Changed Genre")
    wait_for(lambda: os.stat(path).st_mtime_ns != first.st_mtime_ns)
    edited = os.stat(path)
    assert int(edited.st_mtime) >= int(first.st_mtime) + 1
    assert int(edited.st_mtime) >= int(time.time()) - 2
    assert edited.st_ctime_ns == edited.st_mtime_ns
    seen = [int(edited.st_mtime)]
    for n in range(4):
        run("tag", "--db", str(store), "set", str(flac["id"]), "genre=Burst %d" % n)
        wait_for(lambda: int(os.stat(path).st_mtime) > seen[-1])
        seen.append(int(os.stat(path).st_mtime))
    assert seen == sorted(set(seen)), seen
    # A raw SQL edit per the store's contract stamps the time too.
    with sqlite3.connect(str(store)) as db:
        db.execute("UPDATE tags SET value = 'Raw' WHERE track_id = ? AND key = 'genre'", (flac["id"],))
    wait_for(lambda: int(os.stat(path).st_mtime) > seen[-1])
    # The time is kept by the store: a remount serves the same.
    now = os.stat(path).st_mtime_ns
    m.stop()
    m = mount(store, name="again")
    assert os.stat(os.path.join(m.mnt, flac["path"])).st_mtime_ns == now


def test_a_store_migrated_by_a_newer_retagfs_keeps_the_view_and_says_to_restart(store, library, mount):
    m = mount(store)
    flac = export(store)[str(library / "tagged.flac")]
    path = os.path.join(m.mnt, flac["path"])
    data = open(path, "rb").read()
    with sqlite3.connect(str(store)) as db:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        db.execute("PRAGMA user_version = %d" % (version + 1))
        db.execute("UPDATE tags SET value = 'From The Future' WHERE track_id = ? AND key = 'title'",
                    (flac["id"],))
    deadline = time.time() + 5
    while "restart it with the newer retagfs" not in open(str(m.mnt) + ".log").read():
        assert time.time() < deadline, "no log line"
        time.sleep(0.05)
    assert open(path, "rb").read() == data, "the last view is still served, whole"
    assert not any("From The Future" in f for f in os.listdir(os.path.dirname(path)))
    log = m.stop()
    assert log.count("restart it with the newer retagfs") == 1, log
