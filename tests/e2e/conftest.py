"""Shared fixtures for the end-to-end tests: a fresh library copied from the
committed fixture files, a store scanned from it, and real FUSE mounts."""

import os
import shutil
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
BIN = os.environ.get("RETAGFS_BIN", os.path.join(ROOT, "target", "release", "retagfs"))


def pytest_configure(config):
    # No configuration file of the machine's user changes what is tested.
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="retagfs-test-config-")
    os.environ.pop("RETAGFS_CONFIG", None)
    config.addinivalue_line(
        "markers", "once: does not depend on how requests reach the daemon; "
        "tests/e2e/run.sh runs it in its first pass only")


def fuse_unavailable():
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist on this machine"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user"
    if shutil.which("fusermount3") is None and os.geteuid() != 0:
        return "fusermount3 is not installed (apt-get install fuse3)"
    return None


def run(*args, check=True, **kw):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, **kw)
    # The allocator's settings are compiled in: one it does not take is
    # warned about at every start.
    assert "<jemalloc>" not in p.stderr, p.stderr
    if check and p.returncode != 0:
        raise AssertionError("retagfs %s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr))
    return p


@pytest.fixture
def library(tmp_path):
    lib = tmp_path / "library"
    lib.mkdir()
    for name in os.listdir(FIXTURES):
        shutil.copy(os.path.join(FIXTURES, name), lib / name)
    # A nested folder too, as real libraries have.
    (lib / "Some Folder").mkdir()
    shutil.copy(os.path.join(FIXTURES, "tagged.flac"), lib / "Some Folder" / "copy.flac")
    return lib


@pytest.fixture
def store(tmp_path, library):
    db = tmp_path / "store.db"
    run("scan", str(library), "--db", str(db))
    return db


class Mount:
    def __init__(self, db, mnt, *extra):
        self.mnt = mnt
        self.log = open(str(mnt) + ".log", "w+")
        self.proc = subprocess.Popen([BIN, "mount", str(mnt), "--db", str(db), *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not os.path.ismount(mnt):
            if self.proc.poll() is not None or time.time() > deadline:
                self.log.seek(0)
                raise AssertionError("mount did not come up: " + self.log.read())
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                subprocess.run(["umount", "-l", str(self.mnt)], check=False)
        self.log.seek(0)
        return self.log.read()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the test, so fixtures can tell a failure."""
    report = yield
    setattr(item, "report_" + report.when, report)
    return report


@pytest.fixture
def mount(tmp_path, request):
    reason = fuse_unavailable()
    if reason:
        pytest.skip("SKIPPED LOUDLY: end-to-end mount tests need FUSE: " + reason)
    mounts = []

    def start(db, *extra, name="mnt"):
        mnt = tmp_path / name
        mnt.mkdir(exist_ok=True)
        m = Mount(db, mnt, *extra)
        mounts.append(m)
        return m

    yield start
    failed = getattr(request.node, "report_call", None) is not None and request.node.report_call.failed
    for m in mounts:
        log = m.stop()
        if failed:
            # The daemon's side of a failure (pytest shows it with the test).
            print("---- log of the mount at %s ----\n%s" % (m.mnt, log))


FAULTFS = os.path.join(os.path.dirname(BIN), "retagfs-faultfs")


@pytest.fixture
def faulty(tmp_path, library):
    """(backing mountpoint, control file) of a faultfs view of the library."""
    control = tmp_path / "faults"
    control.write_text("mode=ok")
    backing = tmp_path / "backing"
    backing.mkdir()
    proc = subprocess.Popen([FAULTFS, str(library), str(backing), "--control", str(control)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 20
    while not os.path.ismount(backing):
        assert proc.poll() is None and time.time() < deadline, "faultfs did not come up"
        time.sleep(0.05)
    yield backing, control
    subprocess.run(["umount", "-l", str(backing)], check=False)
    proc.wait(timeout=20)


def set_faults(control, text):
    control.write_text(text)
    # The control file is re-read when its mtime changes; make sure it does.
    t = time.time() + 1
    os.utime(control, (t, t))
