"""End-to-end: real FUSE mounts read by independent readers (mutagen,
ffmpeg, flac), plus the CLI's promises (exit codes, JSON shape, EROFS)."""

import ctypes
import errno
import hashlib
import json
import os
import signal
import stat
import struct
import shutil
import subprocess
import time

import pytest
from mutagen.flac import FLAC

import views
from conftest import BIN, FIXTURES, run


def export(db, *extra):
    return json.loads(run("export", "--db", str(db), *extra).stdout)


def pcm_sha256(path):
    out = subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(path), "-map", "0:a",
                          "-c:a", "pcm_f64le", "-f", "hash", "-hash", "sha256", "-"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_export_shape(store):
    tracks = export(store)
    assert len(tracks) == 9
    for t in tracks:
        assert set(t) == {"id", "backing_path", "path", "format", "duration", "tags", "art"}
        assert os.path.isabs(t["backing_path"])
        # The fixtures are a second long (truncated.flac is not served).
        assert t["duration"] is not None and 0.9 < t["duration"] < 1.2, t
        assert t["format"] in {"flac", "mp3", "mp4", "vorbis", "opus", "wav"}
        assert all(isinstance(v, list) for v in t["tags"].values())
        for a in t["art"]:
            assert set(a) == {"sha256", "mime", "picture_type"}
    flac = next(t for t in tracks if t["backing_path"].endswith("/tagged.flac"))
    assert flac["tags"]["artist"] == ["First Artist", "Second Artist"]
    assert flac["tags"]["tracknumber"] == ["3"] and flac["tags"]["totaltracks"] == ["12"]
    # The same song twice (a copy in a subfolder): one gets a " (2)" suffix.
    copies = sorted(t["path"] for t in tracks if t["tags"].get("title") == ["Fixture Song"])
    assert copies == ["Fixture Band/Fixture Album/03 Fixture Song (2).flac",
                      "Fixture Band/Fixture Album/03 Fixture Song.flac"]
    assert {t["format"] for t in tracks} == {"flac", "mp3", "mp4", "vorbis", "opus", "wav"}


# Formats whose tags are synthesized; the others are served byte-identical.
SYNTHESIZED = {"flac", "mp3", "wav", "vorbis", "opus", "mp4"}


def test_synthesis_seen_by_mutagen_and_ffmpeg(store, mount):
    # A bulk retag with non-ASCII text and new art, as users do before mounting.
    for t in export(store):
        run("tag", "--db", str(store), "set", str(t["id"]), f"title=Ünïcødé ☃ {t['id']}")
        run("art", "--db", str(store), "set", "--type", "back", str(t["id"]), os.path.join(FIXTURES, "cover.png"))
    tracks = export(store)
    m = mount(store)
    for t in tracks:
        served = os.path.join(m.mnt, t["path"])
        assert os.path.getsize(served) == len(open(served, "rb").read())
        if t["format"] not in SYNTHESIZED:
            assert sha256(served) == sha256(t["backing_path"])
            continue
        assert views.view(served, t["format"]) == views.expected(t), t["path"]
        assert pcm_sha256(served) == pcm_sha256(t["backing_path"]), t["path"]
        if t["format"] == "flac":
            assert FLAC(served).tags.as_dict() == t["tags"], t["path"]
            subprocess.run(["flac", "-t", "-s", served], check=True)
    log = m.stop()
    assert "ERROR" not in log and "panicked" not in log, log


def kernel_passthrough_expected():
    """FUSE passthrough needs Linux 6.9+ and CAP_SYS_ADMIN."""
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    return os.geteuid() == 0 and (major, minor) >= (6, 9)


@pytest.mark.parametrize("passthrough", [True, False])
def test_structure_only_is_byte_identical(store, mount, passthrough):
    tracks = export(store)
    m = mount(store, "--mode", "structure-only", "-v", *([] if passthrough else ["--no-kernel-passthrough"]))
    for t in tracks:
        assert sha256(os.path.join(m.mnt, t["path"])) == sha256(t["backing_path"]), t["path"]
    # Two handles of one file at once share the kernel's backing file.
    path = os.path.join(m.mnt, tracks[0]["path"])
    with open(path, "rb") as a, open(path, "rb") as b:
        assert a.read() == b.read() == open(tracks[0]["backing_path"], "rb").read()
    log = m.stop()
    on = passthrough and kernel_passthrough_expected()
    assert "kernel passthrough for byte-identical files: %s" % ("on" if on else "off") in log, log
    assert "refused" not in log and "ERROR" not in log, log


def test_mount_is_read_only(store, mount):
    m = mount(store)
    path = os.path.join(m.mnt, export(store)[0]["path"])
    for attempt in (lambda: open(path, "r+b"), lambda: open(os.path.join(m.mnt, "new.txt"), "w"),
                    lambda: os.mkdir(os.path.join(m.mnt, "d")), lambda: os.unlink(path)):
        with pytest.raises(OSError) as e:
            attempt()
        assert e.value.errno == errno.EROFS


def test_owner_group_and_modes_are_served_and_enforced(store, mount, tmp_path):
    m = mount(store, "--allow-other", "--owner", "0", "--group", "0", "--file-mode", "440", "--dir-mode", "550")
    rel = export(store)[0]["path"]
    path = os.path.join(m.mnt, rel)
    st = os.stat(path)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o440)
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o550
    # Another user may reach the mountpoint, but the modes keep it out.
    for d in (tmp_path, tmp_path.parent, tmp_path.parent.parent):
        os.chmod(d, os.stat(d).st_mode | 0o005)
    as_nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    p = subprocess.run(as_nobody + ["cat", path], capture_output=True, text=True)
    assert p.returncode != 0 and "Permission denied" in p.stderr, p.stderr
    p = subprocess.run(as_nobody + ["ls", str(m.mnt)], capture_output=True, text=True)
    assert p.returncode != 0 and "Permission denied" in p.stderr, p.stderr
    m.stop()
    m = mount(store, "--allow-other", name="open")
    path = os.path.join(m.mnt, rel)
    p = subprocess.run(as_nobody + ["cat", path], capture_output=True)
    with open(path, "rb") as f:
        assert p.returncode == 0 and p.stdout == f.read()


def test_write_bits_are_refused_with_a_hint(store, tmp_path):
    p = run("mount", str(tmp_path / "m"), "--db", str(store), "--file-mode", "644", check=False)
    assert p.returncode == 2 and "read-only" in p.stderr and "444" in p.stderr
    p = run("mount", str(tmp_path / "m"), "--db", str(store), "--owner", "no-such-user-x", "--dry-run", check=False)
    assert p.returncode == 2 and "no such user" in p.stderr


def test_retag_moves_the_path_after_remount(store, mount):
    before = next(t for t in export(store) if t["backing_path"].endswith("/tagged.flac"))
    run("tag", "--db", str(store), "set", before["backing_path"], "title=Renamed", "albumartist=New Band")
    after = next(t for t in export(store) if t["id"] == before["id"])
    assert after["path"] == "New Band/Fixture Album/03 Renamed.flac"
    assert before["path"] != after["path"]
    m = mount(store)
    assert os.path.exists(os.path.join(m.mnt, after["path"]))
    # The library holds a copy of tagged.flac ("Some Folder/copy.flac"); which
    # of the two took the unsuffixed name depends on scan order. After the
    # retag the copy is alone in the old folder, under the unsuffixed name.
    assert os.listdir(os.path.join(m.mnt, "Fixture Band", "Fixture Album")) == ["03 Fixture Song.flac"]
    assert FLAC(os.path.join(m.mnt, after["path"]))["title"] == ["Renamed"]


def test_inodes_are_stable_across_remounts(store, mount):
    path = export(store)[0]["path"]
    m = mount(store, name="a")
    first = (os.stat(os.path.join(m.mnt, path)).st_ino, os.stat(os.path.dirname(os.path.join(m.mnt, path))).st_ino)
    m.stop()
    m = mount(store, name="b")
    second = (os.stat(os.path.join(m.mnt, path)).st_ino, os.stat(os.path.dirname(os.path.join(m.mnt, path))).st_ino)
    assert first == second


def files_of(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


def stop_with_files_open(store, mount, name):
    """A mount with one file read from and another opened but not yet read,
    then a SIGTERM, as a service manager's stop sends."""
    m = mount(store, name=name)
    first, second = files_of(m.mnt)[:2]
    read_fd, unread_fd = os.open(first, os.O_RDONLY), os.open(second, os.O_RDONLY)
    head = os.pread(read_fd, 4096, 0)
    m.proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 10
    while os.path.ismount(m.mnt):
        assert time.time() < deadline, "a signal with files open left the mount in place"
        time.sleep(0.05)
    assert m.proc.poll() is None, "the daemon stopped while files were open"
    return m, first, read_fd, unread_fd, head


def test_a_signal_with_files_open_detaches_and_serves_them_until_closed(store, mount):
    m, first, read_fd, unread_fd, head = stop_with_files_open(store, mount, "detached")
    try:
        assert os.pread(read_fd, 4096, 0) == head
        assert len(os.pread(unread_fd, 1 << 20, 0)) > 0
    finally:
        os.close(read_fd)
        os.close(unread_fd)
    assert m.proc.wait(timeout=20) == 0
    log = m.stop()
    assert "files are still open" in log and "unmounted" in log, log


def test_a_second_signal_stops_at_once_with_files_open(store, mount):
    m, _, read_fd, unread_fd, _ = stop_with_files_open(store, mount, "stopped")
    try:
        m.proc.send_signal(signal.SIGTERM)
        assert m.proc.wait(timeout=20) == 0
        # Nothing of it was cached, so the read needs the daemon, now gone.
        with pytest.raises(OSError) as e:
            os.pread(unread_fd, 4096, 0)
        assert e.value.errno in (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO), e.value
    finally:
        os.close(read_fd)
        os.close(unread_fd)
    assert "stopping now" in m.stop()
    assert f" {m.mnt} " not in open("/proc/mounts").read()


def test_a_signal_as_the_mount_comes_up_unmounts_it(tmp_path, store):
    """SIGTERM the moment the mount point is mounted (the daemon still
    starting its threads): the daemon unmounts and leaves no dead mount."""
    mnt = tmp_path / "early"
    mnt.mkdir()
    for _ in range(10):
        proc = subprocess.Popen([BIN, "mount", str(mnt), "--db", str(store)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 20
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, proc.stderr.read()
        assert not os.path.ismount(mnt), "a dead mount was left behind"


def test_a_second_mount_on_a_mountpoint_in_use_says_what_is_mounted_there(store, mount):
    m = mount(store)
    p = run("mount", str(m.mnt), "--db", str(store), check=False)
    assert p.returncode == 1 and "is in use" in p.stderr, p.stderr
    assert "retagfs:" in p.stderr and "fusermount3 -u" in p.stderr, p.stderr
    assert os.listdir(m.mnt), "the first mount still serves"


def test_an_empty_mountpoint_that_is_a_mount_itself_is_mounted_on(store, mount, tmp_path):
    """A container's bind-mounted volume is a mountpoint, and empty."""
    if os.geteuid() != 0:
        pytest.skip("SKIPPED LOUDLY: a bind mount needs root")
    volume = tmp_path / "volume"
    volume.mkdir()
    subprocess.run(["mount", "--bind", str(volume), str(volume)], check=True)
    try:
        m = mount(store, name="volume")
        assert len(files_of(m.mnt)) == len(export(store))
        m.stop()
    finally:
        subprocess.run(["umount", str(volume)], check=True)


def test_art_set_is_served(store, mount, library):
    run("art", "--db", str(store), "set", str(library / "untagged.flac"), str(library / "cover.png"))
    t = next(t for t in export(store) if t["backing_path"].endswith("/untagged.flac"))
    m = mount(store)
    pics = FLAC(os.path.join(m.mnt, t["path"])).pictures
    assert [p.type for p in pics] == [3]
    assert pics[0].data == open(library / "cover.png", "rb").read()


def test_exit_codes_and_messages(tmp_path, store, library):
    p = run("scan", str(tmp_path / "nope"), "--db", str(tmp_path / "x.db"), check=False)
    assert p.returncode == 1 and "does not exist" in p.stderr
    p = run("mount", str(tmp_path), "--db", str(store), "--template", "${album", "--dry-run", check=False)
    assert p.returncode == 2 and "never closed" in p.stderr
    p = run("mount", str(library), "--db", str(store), check=False)
    assert p.returncode == 1 and "not empty" in p.stderr
    p = run("mount", str(tmp_path / "m"), "--db", str(tmp_path / "missing.db"), check=False)
    assert p.returncode == 1 and "retagfs scan" in p.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    run("scan", str(empty), "--db", str(tmp_path / "empty.db"))
    p = run("mount", str(empty), "--db", str(tmp_path / "empty.db"), check=False)
    assert p.returncode == 1 and "no tracks" in p.stderr
    p = run("scan", check=False)
    assert p.returncode == 2


def test_export_streams_and_a_reader_that_stops_early_is_no_error(tmp_path):
    lib = tmp_path / "many"
    lib.mkdir()
    for i in range(300):
        shutil.copy(os.path.join(FIXTURES, "tagged.flac"), lib / ("%03d.flac" % i))
    db = tmp_path / "many.db"
    run("scan", str(lib), "--db", str(db))
    full = run("export", "--db", str(db)).stdout
    tracks = json.loads(full)
    assert len(tracks) == 300 and len(full) > 256 * 1024
    assert sorted(t["backing_path"] for t in tracks) == sorted(str(p) for p in lib.iterdir())
    # `retagfs export | head -c 100`: the pipe closes long before the end.
    p = subprocess.Popen([BIN, "export", "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.read(100) == full.encode()[:100]
    p.stdout.close()
    assert p.wait(timeout=20) == 0
    assert p.stderr.read() == b""


LIBC = ctypes.CDLL(None, use_errno=True)


def file_handle(path):
    """name_to_handle_at(2): what an NFS server hands its clients."""
    handle = ctypes.create_string_buffer(8 + 128)
    struct.pack_into("I", handle, 0, 128)
    mount_id = ctypes.c_int()
    if LIBC.name_to_handle_at(-100, os.fsencode(path), handle, ctypes.byref(mount_id), 0) != 0:
        raise OSError(ctypes.get_errno(), "name_to_handle_at " + path)
    return handle


def open_by_handle(mnt, handle, flags):
    mount_fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = LIBC.open_by_handle_at(mount_fd, handle, flags)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "open_by_handle_at")
        return fd
    finally:
        os.close(mount_fd)


def test_file_handles_outlive_the_kernels_inode_cache(store, library, mount):
    """An NFS export of the mount hands out file handles that clients use
    long after the kernel dropped the inodes: they must open the same file
    and folder again, not fail with ESTALE."""
    m = mount(store)
    t = next(t for t in export(store) if t["backing_path"].endswith("/tagged.mp3"))
    path = os.path.join(m.mnt, t["path"])
    folder = os.path.dirname(path)
    served = open(path, "rb").read()
    handles = file_handle(path), file_handle(folder)
    # Drop every unused dentry and inode, the mount's included.
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")
    fd = open_by_handle(m.mnt, handles[0], os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        assert f.read() == served
    fd = open_by_handle(m.mnt, handles[1], os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert os.path.basename(path) in os.listdir(fd)
        # Reconnecting a folder walks up with "..": it is where it was.
        assert os.readlink("/proc/self/fd/%d" % fd) == folder
    finally:
        os.close(fd)
    # A track gone from the library (and so from the store) is gone for
    # its handle too.
    os.remove(t["backing_path"])
    run("scan", str(library), "--db", str(store), "--prune")
    deadline = time.time() + 5
    while os.path.exists(path):
        assert time.time() < deadline, "the removed track is still served"
        time.sleep(0.01)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")
    with pytest.raises(OSError) as e:
        os.close(open_by_handle(m.mnt, handles[0], os.O_RDONLY))
    assert e.value.errno == errno.ESTALE


def test_a_full_or_read_only_file_system_under_the_store_is_named_as_such(store, tmp_path):
    """SQLite reports a -shm file it cannot grow as "disk I/O error", and
    one it cannot create as "unable to open database file", even to a
    reader: the CLI says the disk is full (and how much is free), or that
    the folder cannot be written."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)], check=True)
    try:
        db = small / "store.db"
        shutil.copy(store, db)
        fd = os.open(small / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError as e:
            assert e.errno == errno.ENOSPC
        finally:
            os.close(fd)
        p = run("export", "--db", str(db), check=False)
        assert p.returncode == 1
        assert "has 0 KiB free" in p.stderr and "free some space" in p.stderr, p.stderr
        os.remove(small / "filler")
        assert len(json.loads(run("export", "--db", str(db)).stdout)) == 9
        subprocess.run(["mount", "-o", "remount,ro", str(small)], check=True)
        for command in (["export"], ["mount", str(tmp_path / "mnt")]):
            p = run(*command, "--db", str(db), check=False)
            assert p.returncode == 1
            assert "cannot be written (a read-only file system)" in p.stderr, p.stderr
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_a_scan_that_fills_the_disk_says_so_and_the_next_one_finishes(tmp_path, library):
    """The store's file system fills while a first scan writes: the scan
    stops with the disk-full hint, and once there is room the next scan
    adds every track."""
    lyrics = library / "lyrics"
    lyrics.mkdir()
    first = lyrics / "00.flac"
    shutil.copy(os.path.join(FIXTURES, "tagged.flac"), first)
    tags = FLAC(first)
    tags["lyrics"] = "la " * 40_000
    tags.save()
    for i in range(1, 40):
        shutil.copy(first, lyrics / f"{i:02}.flac")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)], check=True)
    try:
        db = str(small / "store.db")
        p = run("scan", str(library), "--db", db, check=False)
        assert p.returncode == 1, p
        assert "database or disk is full" in p.stderr, p.stderr
        assert "KiB free" in p.stderr and "free some space" in p.stderr, p.stderr
        subprocess.run(["mount", "-o", "remount,size=64m", str(small)], check=True)
        summary = json.loads(run("scan", str(library), "--db", db, "--json").stdout)
        exported = json.loads(run("export", "--db", db).stdout)
        # The fixtures hold one truncated file, refused.
        assert (len(exported), summary["failed"]) == (9 + 40, 1), summary
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_a_reader_that_stops_early_is_no_error(store, library):
    # More output than a pipe holds: export must write after `head` is gone.
    run("tag", "--db", str(store), "set", str(library / "tagged.flac"), "comment=" + "x" * 120_000)
    p = subprocess.run(["bash", "-c", f"'{BIN}' export --db '{store}' | head -c 10 >/dev/null; "
                        "echo ${PIPESTATUS[0]}"], capture_output=True, text=True)
    assert (p.stdout.strip(), p.stderr) == ("0", ""), p


def test_scan_summary_and_rescan(tmp_path, library):
    db = str(tmp_path / "s.db")
    first = json.loads(run("scan", str(library), "--db", db, "--json").stdout)
    assert (first["added"], first["failed"]) == (9, 1)
    assert first["failures"][0]["path"].endswith("truncated.flac")
    again = json.loads(run("scan", str(library), "--db", db, "--json").stdout)
    assert (again["added"], again["updated"], again["unchanged"]) == (0, 0, 9)
    # The file refused before is unchanged: counted and named again.
    assert (again["failed"], again["failures"]) == (1, first["failures"])


def test_dry_run_prints_sample_and_counts(store, tmp_path):
    p = run("mount", str(tmp_path / "unused"), "--db", str(store), "--dry-run",
            "--template", "$format/${artist|filename}")
    lines = p.stdout.splitlines()
    assert lines[-1] == "9 files, 7 directories"
    assert "flac/First Artist, Second Artist.flac" in lines
    assert "no track has a value" not in p.stderr


def test_a_template_field_no_track_has_is_named(store, tmp_path):
    p = run("mount", str(tmp_path / "unused"), "--db", str(store), "--dry-run",
            "--template", "${albumartis}/$album/$title")
    assert "no track has a value for ${albumartis} in the template" in p.stderr
    assert "${album}" not in p.stderr


def test_names_windows_accepts_are_served_when_asked(store, mount):
    track = json.loads(run("export", "--db", str(store)).stdout)[0]
    run("tag", "--db", str(store), "set", str(track["id"]), 'title=What? "Live": AUX...', "artist=CON")
    ext = os.path.splitext(track["path"])[1]
    m = mount(store, "--template", "$artist/$title", "--windows-names")
    assert os.listdir(m.mnt).count("CON_") == 1
    assert os.path.isfile(os.path.join(m.mnt, "CON_", "What_ _Live__ AUX" + ext))
    exported = run("export", "--db", str(store), "--template", "$artist/$title", "--windows-names").stdout
    assert "CON_/What_ _Live__ AUX" + ext in exported


def test_symbolic_links_not_followed_are_named(tmp_path, library):
    os.symlink(library / "Some Folder", library / "linked folder")
    db = str(tmp_path / "s.db")
    p = run("scan", str(library), "--db", db)
    assert "not following a symbolic link" in p.stderr
    assert "linked folder" in p.stderr and "--follow-symlinks" in p.stderr
    p = run("scan", str(library), "--db", str(tmp_path / "followed.db"), "--follow-symlinks")
    assert "symbolic link" not in p.stderr


def test_names_that_are_not_utf8_are_scanned_and_served(tmp_path, mount):
    """A Latin-1 folder and file name (as copied from an old Windows share):
    scanned, edited by its path, served with the store's tags before the
    original audio, named by `filename` as Latin-1 reads, and found
    unchanged by a re-scan; an export of it imports back as it is."""
    lib = tmp_path / "lib"
    folder = os.path.join(os.fsencode(lib), b"Caf\xe9")
    os.makedirs(folder)
    backing = os.path.join(folder, b"\xc9t\xe9.flac")
    shutil.copy(os.path.join(FIXTURES, "tagged.flac"), backing)
    db = tmp_path / "s.db"
    scanned = json.loads(run("scan", str(lib), "--db", str(db), "--json").stdout)
    assert (scanned["added"], scanned["failed"]) == (1, 0), scanned
    # The file named by its path in the library, bytes and all.
    run("tag", "--db", str(db), "set", os.fsdecode(backing), "title=Served Anyway")
    m = mount(db, "--template", "${filename} - $title")
    served = os.path.join(m.mnt, "Été - Served Anyway.flac")
    assert FLAC(served)["title"] == ["Served Anyway"]
    assert pcm_sha256(served) == pcm_sha256(os.fsdecode(backing))
    again = json.loads(run("scan", str(lib), "--db", str(db), "--json").stdout)
    assert (again["unchanged"], again["added"]) == (1, 0), again
    dump = tmp_path / "t.json"
    dump.write_text(run("export", "--db", str(db)).stdout)
    run("import", "--db", str(db), str(dump))
    assert export(db)[0]["tags"]["title"] == ["Served Anyway"]


def test_unsynthesizable_files_are_served_byte_identical_with_one_log_line(tmp_path, mount):
    lib = tmp_path / "odd"
    lib.mkdir()
    src = os.path.join(os.path.dirname(FIXTURES), "fixtures-passthrough")
    for name in ("chained.ogg", "fragmented.m4a", "rf64.wav"):
        shutil.copy(os.path.join(src, name), lib / name)
    db = tmp_path / "odd.db"
    run("scan", str(lib), "--db", str(db))
    tracks = export(db)
    assert len(tracks) == 3
    m = mount(db)
    for t in tracks:
        for _ in range(2):
            assert sha256(os.path.join(m.mnt, t["path"])) == sha256(t["backing_path"]), t["path"]
    log = m.stop()
    for why in ("chained Ogg stream", "fragmented MP4", "RF64"):
        assert log.count(why) == 1, log


def test_oddly_made_files_keep_their_audio_and_carry_the_store_tags(tmp_path, mount):
    src = os.path.join(os.path.dirname(FIXTURES), "fixtures-odd")
    lib = tmp_path / "odd"
    lib.mkdir()
    for name in os.listdir(src):
        if not name.endswith(".py"):
            shutil.copy(os.path.join(src, name), lib / name)
    db = tmp_path / "odd.db"
    scan = json.loads(run("scan", str(lib), "--db", str(db), "--json").stdout)
    assert (scan["added"], scan["failed"]) == (8, 0), scan
    titles = {os.path.basename(t["backing_path"]): t["tags"].get("title") for t in export(db)}
    assert titles["v22.mp3"] == ["V22 Title"]
    assert titles["two-tags-padding.mp3"] == ["Two Tags"]
    assert titles["v23-unsync.mp3"] == ["Unsynced"]
    assert titles["v1-only.mp3"] == ["V1 Title"]
    assert titles["odd-chunks.wav"] == ["Odd WAV"]
    for t in export(db):
        run("tag", "--db", str(db), "set", str(t["id"]), f"title=Nëw {t['id']}", "artist=Ödd")
        run("art", "--db", str(db), "set", str(t["id"]), os.path.join(FIXTURES, "cover.png"))
    m = mount(db)
    for t in export(db):
        served = os.path.join(m.mnt, t["path"])
        assert views.view(served, t["format"]) == views.expected(t), t["path"]
        assert pcm_sha256(served) == pcm_sha256(t["backing_path"]), t["path"]
    log = m.stop()
    assert "ERROR" not in log and "WARN" not in log, log


def nobodys_library(tmp_path, library):
    """The library and its store in a home of user 65534: the command
    prefix that runs as that user, the store and a mountpoint."""
    home = tmp_path / "nobody"
    shutil.copytree(library, home / "lib")
    (home / "mnt").mkdir()
    subprocess.run(["chown", "-R", "65534:65534", str(home)], check=True)
    for d in (home, tmp_path, tmp_path.parent, tmp_path.parent.parent):
        os.chmod(d, os.stat(d).st_mode | 0o005)
    as_nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "env", f"HOME={home}"]
    db, mnt = str(home / "store.db"), str(home / "mnt")
    subprocess.run(as_nobody + [BIN, "scan", str(home / "lib"), "--db", db], check=True, capture_output=True)
    return as_nobody, db, mnt


def test_a_user_who_cannot_open_dev_fuse_is_told_what_to_do(tmp_path, library):
    """/dev/fuse closed to users (as on this machine, or a host without
    Debian's udev rule): the mount fails at once, exit code 1, and says
    how to open it up rather than only "permission denied"."""
    as_nobody, db, mnt = nobodys_library(tmp_path, library)
    mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
    os.chmod("/dev/fuse", 0o600)
    try:
        p = subprocess.run(as_nobody + [BIN, "mount", mnt, "--db", db], capture_output=True, text=True,
                           timeout=20)
    finally:
        os.chmod("/dev/fuse", mode)
    assert p.returncode == 1, p.stderr
    assert "this user cannot open /dev/fuse, mode 600" in p.stderr, p.stderr
    assert "chmod 0666 /dev/fuse" in p.stderr, p.stderr
    assert f" {mnt} " not in open("/proc/mounts").read()


def test_an_ordinary_user_mounts_through_fusermount3(tmp_path, library):
    """No root needed: a user mounts and unmounts with fusermount3 (Debian's
    /dev/fuse is world-usable; this machine's may not be, so the test opens
    it up for its duration)."""
    as_nobody, db, mnt = nobodys_library(tmp_path, library)
    mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
    os.chmod("/dev/fuse", 0o666)
    daemon = None
    try:
        daemon = subprocess.Popen(as_nobody + [BIN, "mount", mnt, "--db", db],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 20
        # Not os.path.ismount: without --allow-other, even root cannot stat it.
        while f" {mnt} " not in open("/proc/mounts").read():
            assert daemon.poll() is None, daemon.stderr.read()
            assert time.time() < deadline, "mount did not come up"
            time.sleep(0.05)
        listing = subprocess.run(as_nobody + ["find", mnt, "-type", "f"], capture_output=True, text=True)
        assert listing.returncode == 0 and listing.stdout.count("\n") >= 8, listing.stderr
        first = listing.stdout.splitlines()[0]
        assert subprocess.run(as_nobody + ["cat", first], capture_output=True).returncode == 0
        # A mount made through fusermount3 names its store too.
        title = subprocess.run(as_nobody + [BIN, "tag", "get", first, "title"], capture_output=True, text=True)
        assert title.returncode == 0 and title.stdout.startswith("title="), title.stderr
        subprocess.run(as_nobody + ["fusermount3", "-u", mnt], check=True)
        assert daemon.wait(timeout=20) == 0
    finally:
        os.chmod("/dev/fuse", mode)
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            subprocess.run(["umount", "-l", mnt], check=False)


def test_prune_keeps_tracks_under_a_folder_it_cannot_read(tmp_path):
    """A folder that fails to list (a permission, a network share's hiccup)
    is not a folder whose files are gone: --prune keeps its tracks and their
    edits, and removes them once the folder reads again without them."""
    home = tmp_path / "nobody"
    (home / "lib" / "locked").mkdir(parents=True)
    shutil.copy(os.path.join(FIXTURES, "tagged.flac"), home / "lib" / "open.flac")
    shutil.copy(os.path.join(FIXTURES, "tagged.ogg"), home / "lib" / "locked" / "kept.ogg")
    subprocess.run(["chown", "-R", "65534:65534", str(home)], check=True)
    for d in (tmp_path, tmp_path.parent, tmp_path.parent.parent):
        os.chmod(d, os.stat(d).st_mode | 0o005)
    as_nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", BIN]
    db, locked = str(home / "store.db"), home / "lib" / "locked"
    kept = str(locked / "kept.ogg")

    def scan(*extra):
        p = subprocess.run(as_nobody + ["scan", str(home / "lib"), "--db", db, "--json", *extra],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout), p.stderr

    scan()
    subprocess.run(as_nobody + ["tag", "--db", db, "set", kept, "title=Edited"], check=True)
    os.chown(locked, 0, 0)
    os.chmod(locked, 0)
    try:
        summary, err = scan("--prune")
        assert (summary["removed"], summary["unreadable"]) == (0, 1), summary
        assert "kept as they are" in err and "Permission denied" in err, err
    finally:
        os.chmod(locked, 0o755)
        os.chown(locked, 65534, 65534)
    tracks = {t["backing_path"]: t for t in json.loads(run("export", "--db", db).stdout)}
    assert tracks[kept]["tags"]["title"] == ["Edited"]
    os.remove(kept)
    summary, _ = scan("--prune")
    assert (summary["removed"], summary["unreadable"]) == (1, 0), summary


def write_wav(path, seconds, seed):
    """A 16-bit stereo WAV of noise, no tags."""
    import random
    import struct
    rate = 44100
    data = random.Random(seed).randbytes(int(seconds * rate) * 4)
    fmt = struct.pack("<HHIIHH", 1, 2, rate, rate * 4, 4, 16)
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(data)) + b"WAVE")
        f.write(b"fmt " + struct.pack("<I", len(fmt)) + fmt)
        f.write(b"data" + struct.pack("<I", len(data)) + data)


def cached_bytes(path):
    """Bytes of `path` in the page cache (util-linux's fincore: a probing
    read would itself start the kernel's read-ahead)."""
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", str(path)],
                         check=True, capture_output=True, text=True).stdout
    return int(out.split()[0])


def evict(path):
    """Drops `path` from the page cache (written out first: dirty pages stay)."""
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def test_reading_a_file_through_reads_the_next_files_ahead(tmp_path, mount):
    lib = tmp_path / "album"
    lib.mkdir()
    # Sizes tell the files apart: the served ones differ from these by
    # the same header size.
    seconds = [6, 6.5, 7]
    for i, s in enumerate(seconds):
        write_wav(lib / ("%02d.wav" % (i + 1)), s, i)
    db = tmp_path / "album.db"
    run("scan", str(lib), "--db", str(db))
    m = mount(db)
    served = sorted((os.path.join(d, f) for d, _, fs in os.walk(m.mnt) for f in fs))
    assert len(served) == 3 and len({os.path.dirname(p) for p in served}) == 1, served
    backing = {os.path.getsize(p): str(p) for p in lib.iterdir()}
    delta = min(map(os.path.getsize, served)) - min(backing)
    first = backing[os.path.getsize(served[0]) - delta]
    others = sorted(p for p in backing.values() if p != first)
    assert len(others) == 2
    # Far more than warming reads (the files' headers and the kernel's
    # read-ahead after them, 16 KiB here), less than what is read ahead
    # (the first MiB).
    much = 768 << 10
    for p in backing.values():
        evict(p)
    if any(cached_bytes(p) >= much for p in backing.values()):
        pytest.skip("SKIPPED LOUDLY: the backing file system keeps every page in memory "
                    "(tmpfs?), so reading ahead cannot be observed")
    with open(served[0], "rb", buffering=0) as f:
        f.read(4096)
        # Reading a file's start (a tagger) reads little of the others.
        time.sleep(0.3)
        assert [cached_bytes(p) for p in others if cached_bytes(p) >= much] == []
        while f.read(1 << 20):
            pass
    # Reading it through starts reading the next ones.
    deadline = time.time() + 10
    while time.time() < deadline:
        cached = [p for p in others if cached_bytes(p) >= much]
        if len(cached) == 2:
            break
        time.sleep(0.05)
    assert cached == others
