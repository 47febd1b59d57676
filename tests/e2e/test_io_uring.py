"""End-to-end: FUSE over io_uring. With `--io-uring on` the daemon takes
requests on rings, one thread set per CPU, and serves exactly what it
serves through /dev/fuse. (`tests/e2e/run.sh` also runs the whole suite
both ways.)"""

import hashlib
import os

import pytest

PARAM = "/sys/module/fuse/parameters/enable_uring"


@pytest.fixture
def kernel_param():
    """The fuse module parameter, restored after the test."""
    if not os.path.exists(PARAM):
        pytest.skip("SKIPPED LOUDLY: this kernel has no FUSE over io_uring (Linux 6.14+ needed)")
    if not os.access(PARAM, os.W_OK):
        pytest.skip("SKIPPED LOUDLY: the fuse module parameter enable_uring is not writable here (root needed)")
    with open(PARAM) as f:
        old = f.read().strip()
    yield
    with open(PARAM, "w") as f:
        f.write(old)


def ring_threads(pid):
    names = []
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
            names.append(f.read().strip())
    return [n for n in names if n.startswith("ring-")]


def snapshot(root):
    """Every directory's listing, every file's attributes and content."""
    seen = {}
    for dirpath, dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        seen[rel] = sorted(dirs + files)
        for name in files:
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            with open(p, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            seen[os.path.join(rel, name)] = (st.st_size, st.st_mode, st.st_mtime_ns, st.st_ino, digest)
    return seen


def test_io_uring_serves_what_dev_fuse_serves(store, mount, kernel_param):
    ring = mount(store, "--io-uring", "on", "-v", name="ring")
    dev = mount(store, "--io-uring", "off", name="dev")
    threads = ring_threads(ring.proc.pid)
    assert threads, "no ring threads in the daemon"
    assert ring_threads(dev.proc.pid) == []
    a, b = snapshot(ring.mnt), snapshot(dev.mnt)
    assert len(a) > 10
    assert a == b
    # Reads at odd offsets and sizes, and past the end.
    some = next(k for k, v in a.items() if isinstance(v, tuple) and v[0] > 10000)
    with open(os.path.join(ring.mnt, some), "rb") as f, open(os.path.join(dev.mnt, some), "rb") as g:
        for offset, size in [(1, 7), (4095, 4097), (a[some][0] - 3, 100), (a[some][0] + 5, 10)]:
            f.seek(offset)
            g.seek(offset)
            assert f.read(size) == g.read(size)
    fs_ring, fs_dev = os.statvfs(ring.mnt), os.statvfs(dev.mnt)
    assert (fs_ring.f_files, fs_ring.f_namemax, fs_ring.f_bsize) == (fs_dev.f_files, fs_dev.f_namemax, fs_dev.f_bsize)
    log = ring.stop()
    assert "requests through io_uring: on" in log
    assert "panicked" not in log


def test_io_uring_off_keeps_to_dev_fuse(store, mount, kernel_param):
    with open(PARAM, "w") as f:
        f.write("Y")
    m = mount(store, "--io-uring", "off", "-v")
    assert ring_threads(m.proc.pid) == []
    assert os.listdir(m.mnt)
    assert "requests through io_uring: off" in m.stop()


def test_auto_turns_io_uring_on_as_root(store, mount, kernel_param):
    with open(PARAM, "w") as f:
        f.write("N")
    m = mount(store, "--io-uring", "auto", "-v")
    with open(PARAM) as f:
        assert f.read().strip() == "Y"
    assert ring_threads(m.proc.pid), "auto did not take requests through io_uring"
    assert os.listdir(m.mnt)
    log = m.stop()
    assert "turned on FUSE over io_uring" in log
    assert "requests through io_uring: on" in log
