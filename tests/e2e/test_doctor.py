"""End-to-end: `retagfs doctor` passes on a healthy setup (exit 0) and
fails (exit 1), saying what to do, on each problem provoked: /dev/fuse
closed to the user, a store of a newer schema, a library folder gone. A
scan running is a note, not a failure (the scan lock is the kernel's: a
dead scan holds none). These run once."""

import fcntl
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile

import pytest

from conftest import BIN, run

pytestmark = pytest.mark.once


def doctor(*args, **kw):
    p = run("doctor", "--json", *args, check=False, **kw)
    assert p.returncode in (0, 1), p.stderr
    report = json.loads(p.stdout)
    return p.returncode, report["ok"], {c["check"]: (c["status"], c["detail"]) for c in report["checks"]}


def test_a_healthy_setup_passes(store, library):
    code, ok, checks = doctor("--db", str(store))
    assert (code, ok) == (0, True), checks
    assert checks["fuse device"][0] == "ok" and checks["mounting"][0] == "ok"
    assert checks["store"][0] == "ok" and "intact" in checks["store"][1]
    assert checks["library"] == ("ok", "%s can be read" % library)
    assert checks["io_uring"][0] == "note" and checks["free space"][0] == "ok"
    text = run("doctor", "--db", str(store)).stdout
    assert "a mount would work" in text


def test_a_store_of_a_newer_schema_fails(tmp_path, store):
    newer = tmp_path / "newer.db"
    shutil.copy(store, newer)
    with sqlite3.connect(newer) as db:
        db.execute("PRAGMA user_version = 999")
    code, ok, checks = doctor("--db", str(newer))
    assert (code, ok) == (1, False)
    assert checks["store"][0] == "fail" and "upgrade retagfs" in checks["store"][1], checks["store"]


def test_a_library_folder_gone_fails(tmp_path, store, library):
    library.rename(tmp_path / "moved")
    code, _, checks = doctor("--db", str(store))
    assert code == 1 and checks["library"][0] == "fail", checks["library"]
    assert str(library) in checks["library"][1] and "mount its share" in checks["library"][1]


def test_a_running_scan_is_a_note(store):
    with open(str(store) + "-scan.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        code, _, checks = doctor("--db", str(store))
    assert code == 0 and checks["scan"][0] == "note", checks["scan"]


def test_a_fuse_device_closed_to_the_user_fails():
    """/dev/fuse replaced, in a mount namespace of its own, by a device
    node only root may open; the doctor runs as nobody."""
    folder = tempfile.mkdtemp(dir="/tmp")
    try:
        os.chmod(folder, 0o755)
        binary = os.path.join(folder, "retagfs")
        shutil.copy(BIN, binary)
        os.chmod(binary, 0o755)
        script = (f"mknod {folder}/fuse c 10 229 && chmod 600 {folder}/fuse && "
                  f"mount --bind {folder}/fuse /dev/fuse && "
                  f"exec setpriv --reuid 65534 --regid 65534 --clear-groups {binary} doctor --json")
        p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                           capture_output=True, text=True, env={**os.environ, "HOME": folder})
        assert p.returncode == 1, p.stderr
        checks = {c["check"]: (c["status"], c["detail"]) for c in json.loads(p.stdout)["checks"]}
        assert checks["fuse device"][0] == "fail", checks
        assert "cannot open /dev/fuse, mode 600" in checks["fuse device"][1], checks["fuse device"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
