"""Failing backing storage: the library sits on retagfs-faultfs, a FUSE view
that injects read errors, short reads or a vanished directory on command.
Affected reads fail cleanly, the mount stays up, and everything reads as
before once the storage is back."""

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import run, set_faults


def read_uncached(path):
    """The whole file, read after asking the kernel to drop its cached pages,
    so that the read reaches the daemon."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def sha(data):
    return hashlib.sha256(data).hexdigest()


def served_files(mnt):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(mnt) for f in fs)


def test_read_errors_short_reads_and_a_vanished_disk(tmp_path, faulty, mount):
    backing, control = faulty
    db = tmp_path / "store.db"
    run("scan", str(backing), "--db", str(db))
    m = mount(db)
    files = served_files(m.mnt)
    assert len(files) >= 7
    before = {f: sha(read_uncached(f)) for f in files}

    # Short reads from the disk: retagfs keeps reading, the bytes are right.
    set_faults(control, "mode=short")
    assert {f: sha(read_uncached(f)) for f in files} == before

    # A failing disk: every read is EIO, the mount stays up.
    set_faults(control, "mode=eio")
    for f in files:
        with pytest.raises(OSError) as e:
            read_uncached(f)
        assert e.value.errno == errno.EIO, f
    assert served_files(m.mnt) == files

    # The disk is back: everything reads as before.
    set_faults(control, "mode=ok")
    assert {f: sha(read_uncached(f)) for f in files} == before

    # The disk vanishes under an open file and for new opens.
    held = os.open(files[0], os.O_RDONLY)
    set_faults(control, "mode=gone")
    os.posix_fadvise(held, 0, 0, os.POSIX_FADV_DONTNEED)
    with pytest.raises(OSError) as e:
        os.pread(held, 4096, 0)
    assert e.value.errno == errno.EIO
    for f in files[1:]:
        with pytest.raises(OSError) as e:
            read_uncached(f)
        assert e.value.errno in (errno.EIO, errno.ENOENT), f
    assert served_files(m.mnt) == files
    os.close(held)

    # And comes back.
    set_faults(control, "mode=ok")
    assert {f: sha(read_uncached(f)) for f in files} == before
    log = m.stop()
    assert "panic" not in log
    assert "read at" in log or "cannot open backing file" in log


def test_a_library_on_network_storage_is_scanned_on_many_threads(tmp_path, faulty, library):
    """Scanning storage where every request is a round trip waits rather
    than computes: the scan then walks and probes on 16 threads (on local
    disks it walks on one per core, 16 once it waits on the disk, and
    probes on at least 8, as a first scan waits on the disk). faultfs is a
    FUSE file system, which counts as network storage; each metadata
    request there waits 5 ms."""
    backing, control = faulty
    set_faults(control, "mode=ok meta_delay_ms=5")
    cores = len(os.sched_getaffinity(0))
    network = run("scan", "-v", "--json", str(backing), "--db", str(tmp_path / "network.db"))
    many = max(cores, 16)
    assert f"walking on {many} threads, probing on {many}" in network.stderr
    local = run("scan", "-v", "--json", str(library), "--db", str(tmp_path / "local.db"))
    on_disk = f" ({many} once it waits on the disk)" if many > cores else ""
    assert f"walking on {cores} threads{on_disk}, probing on {max(cores, 8)}" in local.stderr
    # The same files found and probed either way.
    found = [json.loads(p.stdout) for p in (network, local)]
    assert found[0]["added"] == found[1]["added"] > 0
    assert found[0]["failed"] == found[1]["failed"]
    # -j still decides.
    assert "walking on 3 threads, probing on 3" in run(
        "scan", "-v", "-j", "3", str(backing), "--db", str(tmp_path / "network.db")).stderr


OPEN_AND_READ_WITH_SIGNALS = r"""
import hashlib, os, signal, sys
signal.signal(signal.SIGUSR1, lambda *_: None)
print("opening", flush=True)
with open(sys.argv[1], "rb", buffering=0) as f:
    print(hashlib.sha256(f.read()).hexdigest(), flush=True)
"""


def test_an_open_interrupted_by_signals_completes(tmp_path, faulty, mount):
    """A signal to a process waiting for an open makes the kernel send the
    daemon an interrupt for the request (seen with strace: opcode 36).
    retagfs does not cancel requests: it answers the interrupt ENOSYS, and
    the kernel waits the open out. The open and the read end with the
    right bytes and the mount stays up."""
    backing, control = faulty
    db = tmp_path / "store.db"
    run("scan", str(backing), "--db", str(db))
    m = mount(db)
    path = served_files(m.mnt)[0]
    expected = sha(read_uncached(path))
    # Each open of a backing file (and each read of one) now waits.
    set_faults(control, "mode=ok meta_delay_ms=400 delay_ms=100")
    reader = subprocess.Popen([sys.executable, "-c", OPEN_AND_READ_WITH_SIGNALS, path],
                              stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "opening"
    for _ in range(5):
        time.sleep(0.1)
        reader.send_signal(signal.SIGUSR1)
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0
    assert out.strip() == expected
    set_faults(control, "mode=ok")
    assert sha(read_uncached(path)) == expected
    assert "panic" not in m.stop()
