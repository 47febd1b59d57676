"""Resource bounds: a client that opens more files than the daemon may hold
gets EMFILE for the excess (not EIO, not a crash), memory stays bounded, and
everything is released when it closes them; 64 concurrent readers all get
the right bytes."""

import errno
import hashlib
import json
import os
import resource
import subprocess
import threading
import time

from conftest import BIN, run

DAEMON_FILES = 1000
OPENS = 10_000


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def fds_on(pid, target):
    """How many of the process's descriptors are open on file `target`."""
    held = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            held += os.readlink(f"/proc/{pid}/fd/{fd}") == target
        except OSError:
            pass
    return held


# The daemon's own files come and go meanwhile (a store connection opened
# or closed by another thread, the release of the first read answered
# after it was counted): a few more than before is not a leak of the
# thousands of opens.
OWN_FILES_SLACK = 8


def limited(n):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def test_ten_thousand_opens_and_sixty_four_readers(store, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = open(tmp_path / "mount.log", "w+")
    daemon = subprocess.Popen([BIN, "mount", str(mnt), "--db", str(store)], preexec_fn=limited(DAEMON_FILES),
                              stdout=log, stderr=log)
    try:
        deadline = time.time() + 20
        while not os.path.ismount(mnt):
            assert daemon.poll() is None and time.time() < deadline, "mount did not come up"
            time.sleep(0.05)
        track = json.loads(run("export", "--db", str(store)).stdout)[0]
        path, backing = os.path.join(mnt, track["path"]), os.path.realpath(track["backing_path"])
        with open(path, "rb") as f:
            want = hashlib.sha256(f.read()).hexdigest()
        fds_before, rss_before = open_fds(daemon.pid), rss_kib(daemon.pid)

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, OPENS + 100)), hard))
        held, refused = [], []
        for _ in range(OPENS):
            try:
                held.append(os.open(path, os.O_RDONLY))
            except OSError as e:
                refused.append(e.errno)
        assert held and refused, (len(held), len(refused))
        assert set(refused) <= {errno.EMFILE, errno.ENFILE}, set(refused)
        assert len(held) < DAEMON_FILES
        rss_held = rss_kib(daemon.pid)
        for fd in held:
            os.close(fd)
        assert daemon.poll() is None

        # Everything was released: the daemon holds the backing file no
        # more, and no more files of its own than before, give or take.
        deadline = time.time() + 10
        while fds_on(daemon.pid, backing) > 0 and time.time() < deadline:
            time.sleep(0.05)
        assert fds_on(daemon.pid, backing) == 0
        assert open_fds(daemon.pid) <= fds_before + OWN_FILES_SLACK
        assert rss_held - rss_before < 64 * 1024, f"RSS grew {rss_held - rss_before} KiB for {len(held)} opens"

        # 64 threads reading at once get the right bytes.
        results = []

        def reader():
            for _ in range(20):
                with open(path, "rb") as f:
                    results.append(hashlib.sha256(f.read()).hexdigest())

        threads = [threading.Thread(target=reader) for _ in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [want] * 64 * 20
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
        daemon.wait(timeout=20)
    log.seek(0)
    lines = log.read()
    assert "panic" not in lines
    assert lines.count("out of file descriptors") == 1, lines[-2000:]
