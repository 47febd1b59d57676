"""End-to-end: the mount follows the store while mounted: CLI edits, raw
SQL edits per docs/store.md, re-scans; readers never see mixed versions."""

import json
import os
import shutil
import sqlite3
import subprocess
import time

from conftest import BIN, FIXTURES, run, set_faults


def export(db):
    return {t["backing_path"]: t for t in json.loads(run("export", "--db", str(db)).stdout)}


def wait_for(predicate, timeout=5.0):
    """Seconds until predicate() held; fails after `timeout`."""
    start = time.perf_counter()
    while not predicate():
        assert time.perf_counter() - start < timeout, "not visible within %.0f s" % timeout
        time.sleep(0.002)
    return time.perf_counter() - start


def test_cli_edit_shows_up_without_remount(store, library, mount):
    m = mount(store, "-v")
    flac = export(store)[str(library / "tagged.flac")]
    album = os.path.join(m.mnt, "Fixture Band", "Fixture Album")
    before = set(os.listdir(album))  # the kernel caches the listing
    old_name = os.path.basename(flac["path"])
    old_size = os.path.getsize(os.path.join(album, old_name))
    run("tag", "--db", str(store), "set", str(library / "tagged.flac"), "title=Live Édit")
    new = os.path.join(album, "03 Live Édit.flac")
    # The kernel is told to drop the cached listing just after the new name
    # resolves (never while a request may wait on the daemon), so the two
    # are a few microseconds apart. Only the edited track moved; its copy
    # keeps its name.
    wait_for(lambda: set(os.listdir(album)) == before - {old_name} | {"03 Live Édit.flac"})
    assert os.path.exists(new)
    assert os.path.getsize(new) != old_size
    assert len(open(new, "rb").read()) == os.path.getsize(new)
    log = m.stop()
    assert "refresh: 1 track(s) changed" in log, log


def test_a_file_of_the_mount_is_edited_by_its_path_there(tmp_path, store, library, mount):
    m = mount(store)
    flac = export(store)[str(library / "tagged.flac")]
    served = os.path.join(m.mnt, flac["path"])
    # No --db: the mount names its store, the file's inode its track.
    assert run("tag", "get", served, "title").stdout == "title=%s\n" % flac["tags"]["title"][0]
    run("tag", "set", served, "title=Named Through The Mount")
    moved = os.path.join(os.path.dirname(served), "03 Named Through The Mount.flac")
    wait_for(lambda: os.path.exists(moved))
    assert export(store)[str(library / "tagged.flac")]["tags"]["title"] == ["Named Through The Mount"]
    # The old path names nothing now: an error, not a usage mistake.
    wait_for(lambda: not os.path.exists(served))
    p = run("tag", "set", served, "title=Gone", check=False)
    assert p.returncode == 1 and "No such file or directory" in p.stderr, p.stderr
    run("art", "set", moved, str(library / "cover.png"))
    assert export(store)[str(library / "tagged.flac")]["art"]
    # Another store of the same library holds the same track ids: refused,
    # so that an edit never lands on another store's track.
    other = tmp_path / "other.db"
    run("scan", str(library), "--db", str(other))
    p = run("tag", "--db", str(other), "set", moved, "title=Wrong Store", check=False)
    assert p.returncode == 1 and "is in the view of" in p.stderr and str(store) in p.stderr, p.stderr
    assert "Wrong Store" not in run("export", "--db", str(other)).stdout
    # The store given is the mount's: fine.
    run("tag", "--db", str(store), "get", moved, "title")
    # Without --db, anything outside a mounted view is a usage error.
    for reference in (str(flac["id"]), str(library / "tagged.flac")):
        p = run("tag", "get", reference, check=False)
        assert p.returncode == 2 and "--db" in p.stderr, p.stderr


def test_a_folder_is_edited_with_r_through_the_mount_or_the_library(store, library, mount):
    m = mount(store)
    tracks = export(store)
    album = os.path.join(m.mnt, "Fixture Band", "Fixture Album")
    in_album = {t["backing_path"] for t in tracks.values() if t["path"].startswith("Fixture Band/Fixture Album/")}
    assert len(in_album) >= 2
    p = run("tag", "set", album, "genre=Folder Genre", check=False)
    assert p.returncode == 2 and "add -r" in p.stderr, p.stderr
    p = run("tag", "set", "-r", album, "genre=Folder Genre")
    assert "edited %d track(s)" % len(in_album) in p.stderr, p.stderr
    run("art", "set", "-r", album, str(library / "cover.png"))
    after = export(store)
    for path, t in after.items():
        assert (t["tags"].get("genre") == ["Folder Genre"]) == (path in in_album), path
        if path in in_album:
            assert [a["picture_type"] for a in t["art"]].count(3) == 1, path
        else:
            assert t["art"] == tracks[path]["art"], path
    p = run("tag", "get", "-r", album, check=False)
    assert p.returncode == 2 and "one track" in p.stderr, p.stderr
    # A folder of the library names the tracks under it, in the store given.
    run("tag", "--db", str(store), "add", "-r", str(library / "Some Folder"), "genre=Copied")
    after = export(store)
    assert [p for p, t in after.items() if "Copied" in t["tags"].get("genre", [])] == [
        str(library / "Some Folder" / "copy.flac")
    ]
    run("tag", "--db", str(store), "rm", "-r", str(library), "genre")
    assert all("genre" not in t["tags"] for t in export(store).values())


def test_raw_sql_edit_per_store_contract_shows_up(store, mount):
    m = mount(store)
    tracks = export(store)
    mp3 = next(t for t in tracks.values() if t["format"] == "mp3")
    with sqlite3.connect(str(store)) as db:
        db.execute("UPDATE tags SET value = 'Raw SQL Title' WHERE track_id = ? AND key = 'title'", (mp3["id"],))
    new = os.path.join(m.mnt, os.path.dirname(mp3["path"]), "04 Raw SQL Title.mp3")
    wait_for(lambda: os.path.exists(new))
    # The stale name is dropped from the kernel's cache right after.
    wait_for(lambda: not os.path.exists(os.path.join(m.mnt, mp3["path"])))


def test_reader_during_retag_gets_one_consistent_version(store, library, mount):
    m = mount(store)
    flac = next(t for t in export(store).values() if t["backing_path"].endswith("/tagged.flac"))
    path = os.path.join(m.mnt, flac["path"])
    whole_before = open(path, "rb").read()
    with open(path, "rb", buffering=0) as f:
        got = f.read(4096)
        run("tag", "--db", str(store), "set", str(flac["id"]), "title=Changed While Playing",
            "comment=" + "long " * 500)
        time.sleep(0.2)  # let the refresh run
        while chunk := f.read(4096):
            got += chunk
    assert got == whole_before
    # A new open sees the new version, whole.
    new = os.path.join(os.path.dirname(path), "03 Changed While Playing.flac")
    wait_for(lambda: os.path.exists(new))
    data = open(new, "rb").read()
    assert len(data) == os.path.getsize(new) and data != whole_before


def test_rescan_while_mounted_adds_and_removes(store, library, mount):
    m = mount(store)
    shutil.copy(os.path.join(FIXTURES, "tagged.mp3"), library / "added.mp3")
    run("tag", "--db", str(store), "set", str(library / "tagged.mp3"), "title=Original")
    run("scan", str(library), "--db", str(store))
    added = os.path.join(m.mnt, "MP3 Artist", "Fixture Album", "04 MP3 Song.mp3")
    wait_for(lambda: os.path.exists(added))
    os.remove(library / "added.mp3")
    run("scan", str(library), "--db", str(store), "--prune")
    wait_for(lambda: not os.path.exists(added))
    assert os.path.exists(os.path.join(m.mnt, "MP3 Artist", "Fixture Album", "04 Original.mp3"))


def test_backing_file_rewritten_while_mounted_is_eio_not_stale_bytes(store, library, mount):
    m = mount(store)
    wav = next(t for t in export(store).values() if t["format"] == "wav")
    path = os.path.join(m.mnt, wav["path"])
    with open(path, "rb", buffering=0) as f:
        # Opened while intact, truncated before anything is read (and cached).
        with open(wav["backing_path"], "r+b") as b:
            b.truncate(1000)
        try:
            f.read(100000)
            raise AssertionError("read after truncation succeeded")
        except OSError as e:
            assert e.errno == 5
    # A player retrying: every open fails, and the log says so once (a
    # line per attempt would grow the log for as long as it retries).
    for _ in range(20):
        try:
            open(path, "rb").read()
            raise AssertionError("open after truncation succeeded")
        except OSError as e:
            assert e.errno == 5
    log = m.stop()
    assert log.count("backing file changed since it was scanned") == 1, log
    assert "\x1b[" not in log, "colour codes in a log that is not a terminal"


def change_count(db):
    with sqlite3.connect(str(db)) as c:
        return c.execute("SELECT count(*) FROM changes").fetchone()[0]


def test_import_round_trip_is_a_noop_and_edits_apply_atomically(store, tmp_path, mount):
    exported = run("export", "--db", str(store)).stdout
    (tmp_path / "same.json").write_text(exported)
    before = change_count(store)
    p = run("import", "--db", str(store), str(tmp_path / "same.json"))
    assert "0 change(s)" in p.stderr and change_count(store) == before

    m = mount(store)
    tracks = json.loads(exported)
    edits = [{"id": t["id"], "tags": {"album": "Imported Album", "genre": None}} for t in tracks]
    # One bad entry at the end: nothing at all is applied.
    bad = edits + [{"backing_path": "/nowhere.flac", "tags": {"title": "x"}}]
    (tmp_path / "bad.json").write_text(json.dumps(bad, indent=1))
    p = run("import", "--db", str(store), str(tmp_path / "bad.json"), check=False)
    assert p.returncode == 2 and "no track with backing_path" in p.stderr and "line " in p.stderr
    assert change_count(store) == before

    dry = run("import", "--db", str(store), "-", "--dry-run", input=json.dumps(edits))
    assert "Imported Album" in dry.stdout and change_count(store) == before
    run("import", "--db", str(store), "-", input=json.dumps(edits))
    after = export(store)
    assert all(t["tags"]["album"] == ["Imported Album"] and "genre" not in t["tags"] for t in after.values())
    wait_for(lambda: os.path.isdir(os.path.join(m.mnt, "Fixture Band", "Imported Album")))
    wait_for(lambda: not os.path.exists(os.path.join(m.mnt, "Fixture Band", "Fixture Album")))


def test_import_refuses_an_id_and_a_path_naming_two_tracks(store, tmp_path):
    """An export of another store (other ids for the same files) must not
    put one file's tags on another: an entry whose `id` and `backing_path`
    name two different tracks is refused; without ids, paths match."""
    tracks = json.loads(run("export", "--db", str(store)).stdout)
    a, b = tracks[0], tracks[1]
    a["id"], b["id"] = b["id"], a["id"]
    for t in (a, b):
        t["tags"]["title"] = ["Title of " + os.path.basename(t["backing_path"])]
    (tmp_path / "other.json").write_text(json.dumps([a, b], indent=1))
    before = change_count(store)
    p = run("import", "--db", str(store), str(tmp_path / "other.json"), check=False)
    assert p.returncode == 2 and "another store" in p.stderr, p.stderr
    assert change_count(store) == before
    for t in (a, b):
        del t["id"]
    (tmp_path / "by_path.json").write_text(json.dumps([a, b], indent=1))
    run("import", "--db", str(store), str(tmp_path / "by_path.json"))
    after = export(store)
    for t in (a, b):
        assert after[t["backing_path"]]["tags"]["title"] == t["tags"]["title"]


def test_same_path_new_size_is_seen_at_once_despite_long_cache_timeouts(store, library, mount):
    m = mount(store)
    mp3 = next(t for t in export(store).values() if t["format"] == "mp3")
    path = os.path.join(m.mnt, mp3["path"])
    old = open(path, "rb").read()  # attributes and pages now cached
    assert os.path.getsize(path) == len(old)
    run("tag", "--db", str(store), "set", str(mp3["id"]), "comment=" + "x" * 5000)
    wait_for(lambda: os.path.getsize(path) != len(old))
    new = open(path, "rb").read()
    assert len(new) == os.path.getsize(path) and len(new) > len(old) + 5000
    assert new.endswith(old[-1000:])  # the audio, untouched


def test_a_store_moved_over_the_mounted_one_is_loaded_and_stays_sound(store, library, tmp_path, mount):
    """A store rebuilt elsewhere and moved into place: the mount follows it,
    and the old store's -wal/-shm (kept by the mount's connections, paired by
    SQLite with any database of that name) do not corrupt it."""
    m = mount(store, "-v")
    flac = str(library / "tagged.flac")
    run("tag", "--db", str(store), "set", flac, "title=Old Store Edit")
    album = os.path.join(m.mnt, "Fixture Band", "Fixture Album")
    wait_for(lambda: "03 Old Store Edit.flac" in os.listdir(album))
    rebuilt = tmp_path / "rebuilt.db"
    run("scan", str(library), "--db", str(rebuilt))
    run("tag", "--db", str(rebuilt), "set", flac, "title=Rebuilt Store")
    os.replace(rebuilt, store)
    wait_for(lambda: os.path.exists(os.path.join(album, "03 Rebuilt Store.flac")))
    with sqlite3.connect(str(store)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert len(export(store)) == 9
    run("tag", "--db", str(store), "set", flac, "title=Edited After")
    wait_for(lambda: os.path.exists(os.path.join(album, "03 Edited After.flac")))
    assert "was replaced" in m.stop()


def all_files(top):
    return sorted(os.path.relpath(os.path.join(d, f), top) for d, _, fs in os.walk(top) for f in fs)


def test_a_store_removed_and_scanned_anew_is_loaded_when_the_scan_ends(store, library, faulty, mount):
    """The store removed while mounted and scanned anew: the mount serves the
    old store, whole, until the scan ends, then the new one. The old store's
    -wal (holding an edit, kept open by the mount) does not spoil the new one."""
    m = mount(store, "-v")
    log = lambda: open(str(m.mnt) + ".log").read()  # noqa: E731
    album = os.path.join(m.mnt, "Fixture Band", "Fixture Album")
    fresh = sorted(os.listdir(album))
    run("tag", "--db", str(store), "set", str(library / "tagged.flac"), "title=Old Store Edit")
    wait_for(lambda: "03 Old Store Edit.flac" in os.listdir(album))
    old = all_files(m.mnt)
    os.remove(store)
    assert os.path.exists(f"{store}-wal")
    # The new store scans the library through a slow view of it: the mount
    # sees the new file while the scan runs.
    backing, control = faulty
    set_faults(control, "mode=ok delay_ms=100")
    scan = subprocess.Popen([BIN, "scan", str(backing), "--db", str(store)], stderr=subprocess.PIPE, text=True)
    wait_for(lambda: "until the scan ends" in log(), timeout=20)
    assert all_files(m.mnt) == old
    _, err = scan.communicate(timeout=120)
    assert scan.returncode == 0, err
    wait_for(lambda: "loaded the new one" in log(), timeout=20)
    assert sorted(os.listdir(album)) == fresh
    with sqlite3.connect(str(store)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    tracks = export(store)
    assert len(tracks) == 9 and all(path.startswith(str(backing)) for path in tracks)
    m.stop()


def test_the_store_moved_away_and_back_keeps_its_wal(store, library, mount):
    """Moving the mounted store away and back is not a replacement: its
    -wal (holding the last edit) must stay where it is."""
    m = mount(store)
    log = lambda: open(str(m.mnt) + ".log").read()  # noqa: E731
    flac = str(library / "tagged.flac")
    run("tag", "--db", str(store), "set", flac, "title=Kept In The WAL")
    album = os.path.join(m.mnt, "Fixture Band", "Fixture Album")
    wait_for(lambda: "03 Kept In The WAL.flac" in os.listdir(album))
    away = store.with_name("away.db")
    os.rename(store, away)
    wait_for(lambda: "was removed" in log())
    os.rename(away, store)
    wait_for(lambda: "is back" in log())
    assert export(store)[flac]["tags"]["title"] == ["Kept In The WAL"]
    with sqlite3.connect(str(store)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    run("tag", "--db", str(store), "set", flac, "title=Edited After")
    wait_for(lambda: os.path.exists(os.path.join(album, "03 Edited After.flac")))
    assert "replaced" not in m.stop()
