"""End-to-end: a library in an S3-compatible bucket, scanned and mounted
straight from the bucket. The server is a real one (versitygw, on
loopback, files uploaded through the S3 API by rclone so that it computes
the ETags); retagfs reaches it through tests/e2e/s3_proxy.py, which counts
requests and injects faults. Nothing here depends on how the kernel hands
FUSE requests over: these run once."""

import errno
import os
import shutil
import socket
import subprocess
import threading
import time

import mutagen
import pytest

from conftest import run
from s3_proxy import S3Proxy
from test_http import Server, quoted
from test_live import export, wait_for

pytestmark = pytest.mark.once

ACCESS, SECRET = "retagfs-test", "retagfs-test-secret"
BUCKET = "music"
# Short, so that every fault resolves within a test's patience.
DEADLINE = 2.0


def versitygw_binary():
    found = shutil.which("versitygw")
    if found:
        return found
    gopath = subprocess.run(["go", "env", "GOPATH"], capture_output=True, text=True).stdout.strip()
    path = os.path.join(gopath or os.path.expanduser("~/go"), "bin", "versitygw")
    assert os.path.exists(path), "versitygw is not installed: run `make test-deps`"
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    """versitygw serving a folder as S3 on loopback; killed and restarted
    on the same port by the fault tests."""

    def __init__(self, root):
        self.root, self.port = root, free_port()
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [versitygw_binary(), "--access", ACCESS, "--secret", SECRET,
             "--port", "127.0.0.1:%d" % self.port, "--keep-alive", "--quiet", "posix", str(self.root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None and time.time() < deadline, "versitygw did not start"
                time.sleep(0.05)

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=10)


def rclone(gateway, *args):
    """rclone against the gateway directly (not through the proxy). Debian's
    rclone refuses to start with AWS_CA_BUNDLE set."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env.update({
        "RCLONE_CONFIG_GW_TYPE": "s3", "RCLONE_CONFIG_GW_PROVIDER": "Other",
        "RCLONE_CONFIG_GW_ENDPOINT": "http://127.0.0.1:%d" % gateway.port,
        "RCLONE_CONFIG_GW_ACCESS_KEY_ID": ACCESS, "RCLONE_CONFIG_GW_SECRET_ACCESS_KEY": SECRET,
        "RCLONE_CONFIG_GW_REGION": "us-east-1", "RCLONE_CONFIG_GW_FORCE_PATH_STYLE": "true",
    })
    p = subprocess.run(["rclone", *args], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def make_library(lib):
    """Twenty-second tracks of every format, tags, one FLAC whose picture
    pushes its audio past the first 128 KiB, non-ASCII names, a cover."""
    tmp = lib.parent / "gen"
    tmp.mkdir()
    tone = tmp / "tone.wav"
    subprocess.run(["sox", "-n", "-r", "44100", "-c", "2", "-b", "16", str(tone),
                    "synth", "20", "sine", "440", "sine", "660", "gain", "-6"], check=True)
    noise = tmp / "noise.png"
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "nullsrc=s=400x400",
                    "-vf", "geq=random(1)*255:128:128", "-frames:v", "1", str(noise)], check=True)
    a, b = lib / "Ünïcode Artist", lib / "Other # Folder"
    a.mkdir()
    b.mkdir()
    subprocess.run(["flac", "-s", "-f", "-o", str(a / "01 Sœng #1.flac"), "-T", "TITLE=Sœng #1",
                    "-T", "ARTIST=Ünïcode Artist", "-T", "ALBUM=Remote Album", "-T", "TRACKNUMBER=1",
                    "--picture=3|image/png|front||%s" % noise, str(tone)], check=True)

    def ffmpeg(out, *codec, title):
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(tone), *codec,
                        "-metadata", "title=" + title, "-metadata", "artist=Other Artist",
                        "-metadata", "album=Remote Album", str(out)], check=True)

    ffmpeg(a / "02 Song.mp3", "-c:a", "libmp3lame", "-b:a", "128k", title="Two")
    ffmpeg(b / "03 Song.m4a", "-c:a", "aac", "-b:a", "96k", title="Three")
    ffmpeg(b / "04 Song.ogg", "-c:a", "libvorbis", "-q:a", "2", title="Four")
    ffmpeg(b / "05 Song.opus", "-c:a", "libopus", "-b:a", "64k", title="Five")
    ffmpeg(b / "06 Song.wav", "-c:a", "pcm_s16le", title="Six")
    shutil.copy(noise, b / "cover.png")
    shutil.rmtree(tmp)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    root = tmp_path_factory.mktemp("s3")
    g = Gateway(root)
    rclone(g, "mkdir", "gw:" + BUCKET)
    yield g
    g.kill()


@pytest.fixture(scope="module")
def uploaded(tmp_path_factory, gateway):
    """The generated library, in a local folder and in the bucket."""
    lib = tmp_path_factory.mktemp("remote") / "library"
    lib.mkdir()
    make_library(lib)
    return lib


@pytest.fixture
def s3(tmp_path, gateway, uploaded, monkeypatch):
    """A prefix of the bucket holding the library (one per test), and the
    proxy retagfs reaches the gateway through."""
    prefix = tmp_path.name
    rclone(gateway, "copy", str(uploaded), "gw:%s/%s" % (BUCKET, prefix))
    proxy = S3Proxy(gateway.port)
    proxy.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:%d" % proxy.port)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    yield "s3://%s/%s" % (BUCKET, prefix), proxy
    proxy.stop()


def tree_of(root):
    """{relative path: bytes} of every file under a mounted view."""
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, root)] = f.read()
    return files


def stat_all(root):
    for dirpath, dirs, names in os.walk(root):
        for name in dirs + names:
            os.stat(os.path.join(dirpath, name))


def retag_all(db):
    """The same bulk retag for a store of either kind, by backing path."""
    for path, track in export(db).items():
        run("tag", "--db", str(db), "set", path, "comment=retagged", "genre=Remote")


def test_a_bucket_is_served_as_the_same_library_in_a_local_folder(tmp_path, s3, uploaded, mount):
    root, proxy = s3
    local_db, remote_db = tmp_path / "local.db", tmp_path / "remote.db"
    run("scan", str(uploaded), "--db", str(local_db))
    scanned = run("scan", root, "--db", str(remote_db), "--json")
    assert '"added":6' in scanned.stdout.replace(" ", ""), scanned.stdout
    tracks = export(remote_db)
    # Backing paths: plain UTF-8 keys, no endpoint, no credentials.
    assert root + "/Ünïcode Artist/01 Sœng #1.flac" in tracks, list(tracks)
    assert all(ACCESS not in p and "127.0.0.1" not in p for p in tracks)
    retag_all(local_db)
    retag_all(remote_db)

    local = mount(local_db, name="local")
    remote = mount(remote_db, "--remote-deadline", str(DEADLINE), name="remote")
    proxy.reset_counts()
    stat_all(remote.mnt)
    assert sum(proxy.counts.values()) == 0, ("ls and stat asked the remote", proxy.requests)

    expected, served = tree_of(local.mnt), tree_of(remote.mnt)
    assert sorted(served) == sorted(expected)
    for name, data in expected.items():
        assert served[name] == data, name
    some = next(n for n in served if n.endswith(".flac"))
    assert mutagen.File(os.path.join(remote.mnt, some))["comment"] == ["retagged"]
    # `serve` reads the objects the same way.
    server = Server(remote_db, tmp_path / "serve.log")
    try:
        status, _, body = server.request("GET", quoted(some))
        assert status == 200 and body == expected[some]
    finally:
        server.stop()
    # Large ranges, not one GET per kernel read: a few per file at most.
    assert proxy.counts["GET"] <= 6 * 12, proxy.counts
    for secret in (SECRET, ACCESS):
        assert secret not in remote.stop()
        assert secret not in open(remote_db, "rb").read().decode("latin-1")


def test_an_indexers_first_pass_and_a_rescan_of_an_unchanged_bucket_cost_no_get(tmp_path, s3, mount):
    root, proxy = s3
    db = tmp_path / "remote.db"
    run("scan", root, "--db", str(db))
    proxy.reset_counts()
    rescan = run("scan", root, "--db", str(db), "--json")
    assert '"unchanged":6' in rescan.stdout.replace(" ", ""), rescan.stdout
    assert proxy.counts["GET"] == 0 and proxy.counts["HEAD"] == 0, proxy.requests
    assert proxy.counts["LIST"] >= 1

    m = mount(db)
    proxy.reset_counts()
    for dirpath, _, names in os.walk(m.mnt):
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as f:
                assert len(f.read(4096)) == 4096
    assert proxy.counts["GET"] == 0, ("the scan's cache of file starts was not used", proxy.requests)


def test_an_object_overwritten_since_the_scan_is_eio_until_scanned_again(tmp_path, s3, gateway, uploaded, mount):
    root, proxy = s3
    db = tmp_path / "remote.db"
    run("scan", root, "--db", str(db))
    m = mount(db, "--remote-deadline", str(DEADLINE), "--cache-size", "0")
    name = next(n for n in tree_of(m.mnt) if n.endswith(".wav"))
    served = os.path.join(m.mnt, name)
    before = timed_read(served)[1]
    # Another recording of the same length over the object.
    changed = tmp_path / "changed.wav"
    wav = uploaded / "Other # Folder" / "06 Song.wav"
    data = bytearray(wav.read_bytes())
    data[-100000:] = bytes(len(data[-100000:]))
    changed.write_bytes(bytes(data))
    prefix = root[len("s3://"):]
    rclone(gateway, "copyto", str(changed), "gw:%s/Other # Folder/06 Song.wav" % prefix)

    assert timed_read(served)[0] == errno.EIO
    wait_for(lambda: "changed since it was scanned" in open(str(m.mnt) + ".log").read())
    assert "06 Song.wav" in open(str(m.mnt) + ".log").read()

    run("scan", root, "--db", str(db))
    def reads_new_version():
        code, now, _ = timed_read(served)
        return code == 0 and now != before and now[-1000:] == bytes(1000)
    wait_for(reads_new_version, timeout=10)


def test_a_moved_object_keeps_its_edited_tags(tmp_path, s3, gateway):
    root, proxy = s3
    db = tmp_path / "remote.db"
    run("scan", root, "--db", str(db))
    old = root + "/Other # Folder/04 Song.ogg"
    new = root + "/Moved/04 Song.ogg"
    run("tag", "--db", str(db), "set", old, "title=Edited before the move")
    prefix = root[len("s3://"):]
    rclone(gateway, "moveto", "gw:%s/Other # Folder/04 Song.ogg" % prefix, "gw:%s/Moved/04 Song.ogg" % prefix)
    summary = run("scan", root, "--db", str(db), "--prune", "--json").stdout.replace(" ", "")
    assert '"moved":1' in summary and '"removed":0' in summary, summary
    tracks = export(db)
    assert old not in tracks
    assert tracks[new]["tags"]["title"] == ["Edited before the move"]


def test_a_listing_that_fails_changes_nothing(tmp_path, s3):
    root, proxy = s3
    db = tmp_path / "remote.db"
    run("scan", root, "--db", str(db))
    before = export(db)
    proxy.set_fault("status", code=500)
    p = run("scan", root, "--db", str(db), "--prune", "--remote-deadline", str(DEADLINE), check=False)
    proxy.clear_fault()
    assert p.returncode != 0 and "nothing was changed" in p.stderr, p.stderr
    assert export(db) == before


# Reads a file whole after dropping its pages from the kernel's cache (a
# mount keeps the pages of a version it served): every read reaches the
# daemon. Exit status 3 and the errno on stdout when a read fails.
READER = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
chunks = []
try:
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
except OSError as e:
    sys.stdout.write(str(e.errno))
    sys.exit(3)
sys.stdout.buffer.write(b"".join(chunks))
"""


def timed_read(path, timeout=30):
    """(errno or 0, bytes, seconds) of reading a whole file, uncached, in a
    child process, which a hung read cannot take the test down with."""
    started = time.perf_counter()
    p = subprocess.run(["python3", "-c", READER, str(path)], capture_output=True, timeout=timeout)
    took = time.perf_counter() - started
    if p.returncode == 0:
        return 0, p.stdout, took
    assert p.returncode == 3, p.stderr
    return int(p.stdout), b"", took


def test_faults_give_eio_within_the_deadline_never_wrong_bytes_and_recover(tmp_path, s3, gateway, mount):
    root, proxy = s3
    db = tmp_path / "remote.db"
    run("scan", root, "--db", str(db))
    m = mount(db, "--remote-deadline", str(DEADLINE), "--cache-size", "0")
    expected = tree_of(m.mnt)
    flac = os.path.join(m.mnt, next(n for n in expected if n.endswith(".flac")))
    want = expected[os.path.relpath(flac, m.mnt)]
    limit = DEADLINE + 1.0 + 0.5  # the deadline, the second of slack, scheduling

    def browse_is_fast():
        """Seconds to stat the tree and look up a name never seen (which the
        kernel cannot answer from its cache)."""
        started = time.perf_counter()
        stat_all(m.mnt)
        assert not os.path.exists(os.path.join(m.mnt, "never-seen-%f" % time.time()))
        return time.perf_counter() - started

    # Retried faults are invisible but for the time: the bytes are right.
    for fault in [dict(kind="latency", ms=50), dict(kind="reset", only="GET", times=2),
                  dict(kind="status", code=503, only="GET", times=2),
                  dict(kind="status", code=500, only="GET", times=1),
                  dict(kind="cut", bytes=1000, only="GET", times=2)]:
        proxy.set_fault(**fault)
        code, data, took = timed_read(flac)
        proxy.clear_fault()
        print("retried fault %s: errno %d in %.2f s" % (fault, code, took))
        assert (code, data == want) == (0, True), (fault, code, took)
        assert took < limit, (fault, took)

    # Lasting faults: EIO within the deadline, browsing stays fast, and
    # once the remote answers again reads recover without a remount.
    for fault in [dict(kind="status", code=503, only="GET"), dict(kind="stall", only="GET"),
                  dict(kind="cut", bytes=1000, only="GET"), dict(kind="refuse")]:
        proxy.set_fault(**fault)
        reader = {}
        t = threading.Thread(target=lambda: reader.update(result=timed_read(flac)))
        t.start()
        # Readers of every other file wait on the remote too.
        others = [threading.Thread(target=timed_read, args=(os.path.join(m.mnt, name),))
                  for name in expected if not flac.endswith(name)]
        for other in others:
            other.start()
        time.sleep(0.2)
        assert browse_is_fast() < 1.0, fault
        t.join(timeout=60)
        for other in others:
            other.join(timeout=60)
        code, _, took = reader["result"]
        print("lasting fault %s: errno %d in %.2f s" % (fault, code, took))
        assert code == errno.EIO and took < limit, (fault, code, took)
        # The remote is known down now: reads fail at once.
        code, _, took = timed_read(flac)
        assert code == errno.EIO and took < 1.0, (fault, "not failing fast", took)
        proxy.clear_fault()
        recovered = wait_for(lambda: timed_read(flac)[:2] == (0, want), timeout=10)
        print("  failing fast: %.3f s; recovered %.2f s after the fault ended" % (took, recovered))

    # The server killed in the middle of reads, then restarted.
    proxy.latency_ms = 20
    reader = {}
    t = threading.Thread(target=lambda: reader.update(result=timed_read(flac)))
    t.start()
    time.sleep(0.05)
    gateway.kill()
    t.join(timeout=60)
    code, data, took = reader["result"]
    print("server killed mid-read: errno %d in %.2f s" % (code, took))
    assert (code == errno.EIO or data == want) and took < limit, (code, took)
    assert browse_is_fast() < 1.0
    gateway.start()
    proxy.latency_ms = 0
    recovered = wait_for(lambda: timed_read(flac)[:2] == (0, want), timeout=10)
    print("  recovered %.2f s after the restart" % recovered)
    assert m.proc.poll() is None, "the mount went down"
    assert "not answering" in open(str(m.mnt) + ".log").read()


def test_credentials_come_from_a_profile_and_wrong_ones_say_so_without_the_secret(tmp_path, s3, monkeypatch):
    root, proxy = s3
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n\n"
        "[music]\naws_access_key_id = %s\naws_secret_access_key = %s\n" % (ACCESS, SECRET))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_PROFILE", "music")
    db = tmp_path / "remote.db"
    assert '"added":6' in run("scan", root, "--db", str(db), "--json").stdout.replace(" ", "")

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a-wrong-secret")
    p = run("scan", root, "--db", str(db), "--remote-deadline", str(DEADLINE), check=False)
    assert p.returncode != 0, p.stderr
    assert "could not be listed" in p.stderr and "SignatureDoesNotMatch" in p.stderr, p.stderr
    assert "a-wrong-secret" not in p.stderr


def test_a_root_of_many_folders_is_listed_whole_in_a_few_requests(tmp_path, s3, gateway):
    root, proxy = s3
    many = tmp_path / "many"
    fixture = os.path.join(os.path.dirname(__file__), "..", "fixtures", "untagged.flac")
    for i in range(40):
        (many / ("Artist %02d" % i)).mkdir(parents=True)
        shutil.copy(fixture, many / ("Artist %02d" % i) / "01.flac")
    prefix = root[len("s3://"):] + "-many"
    rclone(gateway, "copy", str(many), "gw:" + prefix)
    db = tmp_path / "many.db"
    proxy.reset_counts()
    assert '"added":40' in run("scan", "s3://" + prefix, "--db", str(db), "--json").stdout.replace(" ", "")
    assert proxy.counts["LIST"] <= 3, proxy.counts
    proxy.reset_counts()
    rescan = run("scan", "s3://" + prefix, "--db", str(db), "--json").stdout.replace(" ", "")
    assert '"unchanged":40' in rescan
    assert proxy.counts["LIST"] <= 3 and proxy.counts["GET"] == 0, proxy.counts
