"""End-to-end: `retagfs serve`, the view over HTTP. Every file's bytes equal
the FUSE mount's for the same version; ranges, validators and conditional
requests follow RFC 9110; listings and playlists work with real clients
(ffprobe, ffmpeg, curl); nothing outside the view is reachable. HTTP does not
depend on how the kernel hands FUSE requests over: these run once."""

import http.client
import json
import os
import random
import re
import socket
import subprocess
import time
import urllib.parse

import pytest

from conftest import BIN, run
from test_live import export, wait_for

pytestmark = pytest.mark.once


class Server:
    def __init__(self, db, log_path, *extra):
        self.log = open(log_path, "w+")
        self.proc = subprocess.Popen([BIN, "serve", "--db", str(db), "--listen", "127.0.0.1:0", *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while True:
            self.log.seek(0)
            m = re.search(r"the view at (https?)://127\.0\.0\.1:(\d+)/", self.log.read())
            if m:
                self.scheme, self.port = m.group(1), int(m.group(2))
                break
            assert self.proc.poll() is None and time.time() < deadline, "serve did not start"
            time.sleep(0.05)

    def request(self, method, path, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        body = r.read()
        conn.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body

    def url(self, path):
        return "%s://127.0.0.1:%d%s" % (self.scheme, self.port, path)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.log.seek(0)
        return self.log.read()


@pytest.fixture
def served(tmp_path, store, library, mount):
    # A bulk retag first: what is served is synthesized from the store.
    run("tag", "--db", str(store), "set", "-r", str(library), "comment=Served over HTTP", "genre=Test")
    m = mount(store)
    s = Server(store, tmp_path / "serve.log")
    yield s, m, store
    s.stop()


def quoted(path):
    return "/" + "/".join(urllib.parse.quote(p, safe="") for p in path.split("/"))


def test_every_file_is_the_mounts_bytes_with_the_right_headers_and_ranges(served):
    s, m, store = served
    rng = random.Random(7)
    types = {".flac": "audio/flac", ".mp3": "audio/mpeg", ".m4a": "audio/mp4", ".ogg": "audio/ogg",
             ".opus": "audio/ogg; codecs=opus", ".wav": "audio/wav"}
    tracks = list(export(store).values())
    assert len(tracks) >= 6
    for t in tracks:
        fuse = open(os.path.join(m.mnt, t["path"]), "rb").read()
        path = quoted(t["path"])
        status, h, body = s.request("GET", path)
        assert status == 200 and body == fuse, t["path"]
        status, h, body = s.request("HEAD", path)
        assert status == 200 and body == b""
        assert int(h["content-length"]) == len(fuse)
        assert h["content-type"] == types[os.path.splitext(t["path"])[1]]
        assert h["accept-ranges"] == "bytes" and h["etag"].startswith('"')
        assert not re.fullmatch(r'"[0-9a-f]{32}"', h["etag"]), "not an MD5-looking tag"
        for _ in range(5):
            a = rng.randrange(len(fuse))
            b = rng.randrange(a, len(fuse))
            status, h, body = s.request("GET", path, {"Range": "bytes=%d-%d" % (a, b)})
            assert status == 206 and body == fuse[a:b + 1]
            assert h["content-range"] == "bytes %d-%d/%d" % (a, b, len(fuse))
        status, _, body = s.request("GET", path, {"Range": "bytes=-100"})
        assert status == 206 and body == fuse[-100:]
        status, _, body = s.request("GET", path, {"Range": "bytes=0-1"})
        assert status == 206 and body == fuse[:2]
        status, h, _ = s.request("GET", path, {"Range": "bytes=%d-" % len(fuse)})
        assert status == 416 and h["content-range"] == "bytes */%d" % len(fuse)
        status, h, body = s.request("GET", path, {"Range": "bytes=0-3,10-13"})
        assert status == 206 and h["content-type"].startswith("multipart/byteranges")
        assert fuse[0:4] in body and fuse[10:14] in body and int(h["content-length"]) == len(body)


def test_conditional_requests_and_versions_across_retags(served):
    s, m, store = served
    flac = next(t for t in export(store).values() if t["format"] == "flac")
    path = quoted(flac["path"])
    # The retag dated the version up to a second ahead of the clock; a date
    # names a version only once its time has come.
    time.sleep(1.1)
    _, h, first = s.request("GET", path)
    etag, modified = h["etag"], h["last-modified"]
    assert s.request("GET", path, {"If-None-Match": etag})[0] == 304
    assert s.request("GET", path, {"If-Modified-Since": modified})[0] == 304
    assert s.request("GET", path, {"If-Match": '"0-0"'})[0] == 412
    assert s.request("GET", path, {"If-Match": etag})[0] == 200
    status, _, body = s.request("GET", path, {"Range": "bytes=0-9", "If-Range": etag})
    assert status == 206 and body == first[:10]
    # Two edits within a second: each a version of its own.
    tags = []
    for n in range(2):
        run("tag", "--db", str(store), "set", str(flac["id"]), "genre=Edit %d" % n)
        wait_for(lambda: s.request("HEAD", path)[1]["etag"] not in [etag] + tags)
        tags.append(s.request("HEAD", path)[1]["etag"])
    assert len(set(tags + [etag])) == 3
    assert s.request("GET", path, {"If-None-Match": etag})[0] == 200
    # A range validated by an old version's tag gets the whole new version.
    status, h, body = s.request("GET", path, {"Range": "bytes=0-9", "If-Range": etag})
    assert status == 200 and body == open(os.path.join(m.mnt, flac["path"]), "rb").read()
    # ... and by an old date too.
    status, _, _ = s.request("GET", path, {"Range": "bytes=0-9", "If-Range": modified})
    assert status == 200


def test_listings_playlists_and_real_clients(served, tmp_path):
    s, m, store = served
    flac = next(t for t in export(store).values() if t["format"] == "flac")
    folder = os.path.dirname(flac["path"])
    status, h, body = s.request("GET", quoted(folder) + "/", {"Accept": "application/json"})
    assert status == 200 and h["content-type"] == "application/json"
    names = {e["name"] for e in json.loads(body)["entries"]}
    assert names == set(os.listdir(os.path.join(m.mnt, folder)))
    status, h, _ = s.request("GET", quoted(folder))
    assert status == 301 and h["location"] == quoted(folder) + "/"
    status, h, page = s.request("GET", quoted(folder) + "/")
    assert status == 200 and b"<audio" in page
    for href in re.findall(rb'href="([^"?]+)"', page):
        if href != b"../":
            assert s.request("HEAD", quoted(folder) + "/" + href.decode())[0] == 200, href
    status, h, playlist = s.request("GET", quoted(folder) + "/?m3u")
    assert status == 200 and playlist.startswith(b"#EXTM3U")
    url = s.url(quoted(flac["path"]))
    probe = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags=genre", "-of", "json", url],
                           capture_output=True, text=True, check=True).stdout
    assert json.loads(probe)["format"]["tags"]["GENRE"] == "Test"
    seek = subprocess.run(["ffmpeg", "-v", "error", "-ss", "0.5", "-i", url, "-f", "null", "-"], capture_output=True)
    assert seek.returncode == 0, seek.stderr
    # A player plays the playlist's entries in turn, each resolved against
    # the playlist's URL (ffmpeg reads only HLS playlists, whose tags would
    # make VLC take the tracks for stream segments).
    entries = [line for line in playlist.decode().splitlines() if line and not line.startswith("#")]
    assert len(entries) == len([n for n in names if "." in n])
    for entry in entries:
        track = urllib.parse.urljoin(s.url(quoted(folder) + "/?m3u"), entry)
        played = subprocess.run(["ffmpeg", "-v", "error", "-i", track, "-f", "null", "-"], capture_output=True)
        assert played.returncode == 0, (entry, played.stderr)
    # curl resumes a download cut short.
    part = tmp_path / "part.flac"
    part.write_bytes(open(os.path.join(m.mnt, flac["path"]), "rb").read()[:1000])
    subprocess.run(["curl", "-s", "-C", "-", "-o", str(part), url], check=True)
    assert part.read_bytes() == open(os.path.join(m.mnt, flac["path"]), "rb").read()


def test_nothing_outside_the_view_and_only_reads(served):
    s, _, _ = served
    for path in ["/../etc/passwd", "/%2e%2e/etc/passwd", "/a%2f..%2fb", "/a%00b", "//etc/passwd",
                 "/" + "a" * 9000]:
        status, _, body = s.request("GET", path)
        assert status in (400, 404, 414, 431), (path, status)
        assert b"root:" not in body
    assert s.request("GET", "/etc/passwd")[0] == 404
    for method in ["POST", "PUT", "DELETE", "PATCH"]:
        status, h, _ = s.request(method, "/")
        assert status == 405 and h["allow"] == "OPTIONS, GET, HEAD, PROPFIND", method
    status, h, _ = s.request("OPTIONS", "/")
    assert status == 200 and "GET" in h["allow"]
    # Headers beyond the server's bound: refused, and the server goes on.
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
        try:
            c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 200_000 + b"\r\n\r\n")
            answer = c.recv(4096)
        except (BrokenPipeError, ConnectionResetError):
            answer = b""
        assert answer == b"" or answer.split(b" ")[1] in (b"400", b"431"), answer[:100]
    assert s.request("GET", "/")[0] == 200


def test_slow_and_idle_clients_are_dropped_and_others_served(tmp_path, store):
    s = Server(store, tmp_path / "serve.log", "--header-timeout", "1", "--max-connections", "8")
    try:
        idle = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(4)]
        slow = socket.create_connection(("127.0.0.1", s.port))
        slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        assert s.request("GET", "/")[0] == 200
        slow.settimeout(10)
        started = time.time()
        answer = slow.recv(4096)  # 408 or a close, once its second is up
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer
        assert time.time() - started < 5, "the slow client was kept"
        for c in idle:
            c.settimeout(10)
            c.recv(1)  # the server closes connections that send nothing
        assert s.request("GET", "/")[0] == 200
    finally:
        s.stop()


def test_a_mount_serves_the_same_view_over_http(tmp_path, store, library, mount):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    m = mount(store, "--serve", "127.0.0.1:%d" % port)
    flac = export(store)[str(library / "tagged.flac")]
    conn = lambda: http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # noqa: E731

    def get(path):
        c = conn()
        c.request("GET", quoted(path))
        r = c.getresponse()
        return r.status, r.read()

    wait_for(lambda: _listening(port))
    assert get(flac["path"]) == (200, open(os.path.join(m.mnt, flac["path"]), "rb").read())
    run("tag", "--db", str(store), "set", str(flac["id"]), "title=Both Ways")
    new = os.path.join(os.path.dirname(flac["path"]), "03 Both Ways.flac")
    wait_for(lambda: get(new)[0] == 200)
    assert get(new)[1] == open(os.path.join(m.mnt, new), "rb").read()


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def chromium():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--autoplay-policy=no-user-gesture-required"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def test_a_browser_follows_every_link_and_plays_every_format_it_decodes(tmp_path, store, library):
    # Names a link must escape: spaces, '#', '?', '%', accents (NFD too).
    run("tag", "--db", str(store), "set", "-r", str(library),
        "albumartist=Ärtist #1? 100%", "album=Cafe\u0301 & Ümlauts")
    s = Server(store, tmp_path / "serve.log")
    driver = chromium()
    try:
        driver.get(s.url(quoted("Ärtist #1? 100%/Cafe\u0301 & Ümlauts") + "/"))
        links = [a.get_attribute("href") for a in driver.find_elements("tag name", "a")]
        assert len(links) > 6, driver.page_source[:500]
        for link in links:
            path = urllib.parse.urlsplit(link)
            status = s.request("GET", path.path + ("?" + path.query if path.query else ""))[0]
            assert status == 200, link
        loaded = {}
        for audio in driver.find_elements("tag name", "audio"):
            src = audio.get_attribute("src")
            duration = driver.execute_async_script(
                "const a = arguments[0], done = arguments[1];"
                "a.preload = 'metadata';"
                "a.onloadedmetadata = () => done(a.duration);"
                "a.onerror = () => done(-1);"
                "setTimeout(() => done(-2), 10000);"
                "a.load();", audio)
            loaded[os.path.splitext(urllib.parse.unquote(src))[1]] = duration
        for ext in [".flac", ".mp3", ".ogg", ".opus", ".wav"]:
            assert loaded.get(ext, 0) > 0, loaded
    finally:
        driver.quit()
        s.stop()


def test_a_client_that_stops_reading_is_cut(tmp_path):
    lib = tmp_path / "big"
    lib.mkdir()
    subprocess.run(["sox", "-n", "-r", "48000", "-c", "2", "-b", "16", str(lib / "long.wav"), "synth", "120",
                    "sine", "300"], check=True)
    db = tmp_path / "big.db"
    run("scan", str(lib), "--db", str(db))
    s = Server(db, tmp_path / "serve.log", "--header-timeout", "1", "-v")
    try:
        path = quoted(json.loads(run("export", "--db", str(db)).stdout)[0]["path"])
        stalled = socket.create_connection(("127.0.0.1", s.port))
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        # It reads nothing: the server cuts it within a few seconds (what
        # it had sent by then is left in the kernel's buffers).
        deadline = time.time() + 10
        while "moved no byte" not in open(tmp_path / "serve.log").read():
            assert time.time() < deadline, "the stalled client was kept"
            time.sleep(0.2)
        assert s.request("GET", "/")[0] == 200
        stalled.close()
    finally:
        log = s.stop()
    assert "moved no byte" in log, log


def test_a_backing_file_changed_between_requests_is_an_error_not_stale_bytes(tmp_path, store):
    s = Server(store, tmp_path / "serve.log")
    try:
        wav = next(t for t in export(store).values() if t["format"] == "wav")
        path = quoted(wav["path"])
        assert s.request("GET", path, {"Range": "bytes=0-99"})[0] == 206  # held open meanwhile
        with open(wav["backing_path"], "r+b") as b:
            b.truncate(os.path.getsize(wav["backing_path"]) - 10)
        status, _, body = s.request("GET", path, {"Range": "bytes=0-99"})
        assert status == 500, (status, body[:80])
    finally:
        s.stop()
