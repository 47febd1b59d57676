"""End-to-end: WebDAV class 1, read-only, on `retagfs serve`'s port.
PROPFIND answers equal the FUSE mount's readdir and stat (names byte for
byte); real clients read through it what the mount serves (davfs2 mounts
it, rclone lists and checks it); every method that writes is refused.
WebDAV does not depend on how the kernel hands FUSE requests over: these
run once."""

import email.utils
import http.client
import os
import subprocess
import urllib.parse
import xml.etree.ElementTree as ET

import pytest

from conftest import run
from test_http import Server, quoted
from test_live import export

pytestmark = pytest.mark.once

DAV = "{DAV:}"
# A title with what URLs and XML both escape, and a non-ASCII letter.
ODD_TITLE = "Ça & <Co> #1 %20 + 'ü'"


@pytest.fixture
def served(tmp_path, store, library, mount):
    flac = export(store)[str(library / "tagged.flac")]
    run("tag", "--db", str(store), "set", str(flac["id"]), "title=" + ODD_TITLE)
    m = mount(store)
    s = Server(store, tmp_path / "serve.log")
    yield s, m
    s.stop()


def dav_request(s, method, path, headers=None, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def url_of(path):
    """The request path of a path of the view, as bytes from its root."""
    return quoted(os.fsdecode(path.lstrip(b"/"))) if path != b"/" else "/"


def propfind(s, path, depth):
    """{path bytes (decoded href, without a closing /): properties} of a PROPFIND."""
    status, h, body = dav_request(s, "PROPFIND", path, {"Depth": depth})
    assert status == 207, (path, status, body[:200])
    assert h["content-type"].startswith("application/xml")
    found = {}
    for response in ET.fromstring(body).iter(DAV + "response"):
        href = urllib.parse.unquote_to_bytes(response.find(DAV + "href").text)
        props = {}
        for propstat in response.iter(DAV + "propstat"):
            if " 200 " in propstat.find(DAV + "status").text:
                for prop in propstat.find(DAV + "prop"):
                    props[prop.tag.replace(DAV, "")] = prop
        found[href.rstrip(b"/") or b"/"] = props
    return found


def same_as_stat(props, st, name):
    """The properties a client reads of a node, against the mount's stat."""
    collection = props["resourcetype"].find(DAV + "collection") is not None
    assert collection == os.path.isdir(st), name
    modified = email.utils.parsedate_to_datetime(props["getlastmodified"].text).timestamp()
    assert props["displayname"].text.encode() == os.path.basename(name), name
    if not collection:
        assert int(props["getcontentlength"].text) == os.stat(st).st_size, name
        assert int(modified) == int(os.stat(st).st_mtime), name


def test_propfind_is_the_mounts_readdir_and_stat(served):
    s, m = served
    mnt = os.fsencode(str(m.mnt))
    folders = 0
    for dirpath, dirnames, filenames in os.walk(mnt):
        rel = dirpath[len(mnt):] or b"/"
        listed = propfind(s, url_of(rel) + ("/" if rel != b"/" else ""), "1")
        # Depth 1: the folder itself and exactly the names readdir gives.
        assert rel in listed
        assert {os.path.basename(p) for p in listed if p != rel} == set(dirnames) | set(filenames), rel
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            child = os.path.join(rel, name)
            same_as_stat(listed[child], path, name)
            # Depth 0: the node alone, with the same properties.
            alone = propfind(s, url_of(child), "0")
            assert list(alone) == [child]
            same_as_stat(alone[child], path, name)
            if name in filenames:
                _, h, _ = dav_request(s, "HEAD", url_of(child))
                assert alone[child]["getetag"].text == h["etag"], name
        folders += 1
    assert folders >= 4
    assert any(ODD_TITLE.encode() in name for _, _, names in os.walk(mnt) for name in names)


def test_only_class_1_read_only_and_a_finite_depth(served):
    s, m = served
    status, h, _ = dav_request(s, "OPTIONS", "/")
    assert status == 200 and h["dav"] == "1"
    assert h["allow"] == "OPTIONS, GET, HEAD, PROPFIND"
    before = sorted(os.walk(str(m.mnt)))
    for method in ["PUT", "DELETE", "MKCOL", "COPY", "MOVE", "PROPPATCH", "LOCK", "UNLOCK", "POST", "PATCH"]:
        status, h, _ = dav_request(s, method, "/Fixture%20Band/", {"Destination": s.url("/x/")}, b"x")
        assert status in (403, 405), method
        assert "PUT" not in h.get("allow", "")
    assert sorted(os.walk(str(m.mnt))) == before
    for depth in ["infinity", None]:
        status, _, body = dav_request(s, "PROPFIND", "/", {"Depth": depth} if depth else {})
        assert status == 403 and b"propfind-finite-depth" in body, depth
    assert dav_request(s, "PROPFIND", "/", {"Depth": "2"})[0] == 400
    assert dav_request(s, "PROPFIND", "/no/such/", {"Depth": "0"})[0] == 404
    assert dav_request(s, "PROPFIND", "/", {"Depth": "0"}, b"<not xml")[0] == 400
    # A body asking for properties by name gets them.
    ask = (b'<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:prop>'
           b'<D:getcontentlength/><D:resourcetype/></D:prop></D:propfind>')
    status, _, body = dav_request(s, "PROPFIND", "/", {"Depth": "1"}, ask)
    assert status == 207 and ET.fromstring(body).find(".//" + DAV + "resourcetype") is not None
    # 64 KiB is the most a PROPFIND body may hold.
    assert dav_request(s, "PROPFIND", "/", {"Depth": "0"}, b" " * 200_000)[0] == 413


def test_davfs2_mounts_it_and_reads_what_the_mount_serves(served, tmp_path):
    s, m = served
    conf = tmp_path / "davfs2.conf"
    # No locks (class 1), no password prompt; buf_size 64 works around
    # davfs2 1.6's directory reads on Linux 6.16 and later.
    conf.write_text("use_locks 0\nask_auth 0\nbuf_size 64\n")
    dav = tmp_path / "davfs"
    dav.mkdir()
    subprocess.run(["mount.davfs", s.url("/"), str(dav), "-o", "ro,conf=%s" % conf],
                   check=True, stdin=subprocess.DEVNULL, timeout=60)
    try:
        read = 0
        for dirpath, dirnames, filenames in os.walk(str(m.mnt)):
            rel = os.path.relpath(dirpath, str(m.mnt))
            listed = set(os.listdir(os.path.join(dav, rel)))
            if rel == ".":
                listed.discard("lost+found")  # davfs2's own, for its cache
            assert listed == set(dirnames + filenames), rel
            for name in filenames:
                fuse = open(os.path.join(dirpath, name), "rb").read()
                assert open(os.path.join(dav, rel, name), "rb").read() == fuse, name
                read += 1
        assert read >= 8
    finally:
        subprocess.run(["umount", str(dav)], check=False, timeout=60)


def test_rclone_lists_it_and_finds_no_difference_from_the_mount(served):
    s, m = served
    env = dict(os.environ)
    env.pop("AWS_CA_BUNDLE", None)  # Debian's rclone refuses to start with it
    remote = ":webdav,url='%s':" % s.url("/")
    listed = subprocess.run(["rclone", "lsf", "-R", "--config", "/dev/null", remote],
                            capture_output=True, text=True, env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    expected = set()
    for dirpath, dirnames, filenames in os.walk(str(m.mnt)):
        rel = os.path.relpath(dirpath, str(m.mnt))
        prefix = "" if rel == "." else rel + "/"
        expected |= {prefix + d + "/" for d in dirnames} | {prefix + f for f in filenames}
    assert set(listed.stdout.splitlines()) == expected
    check = subprocess.run(["rclone", "check", "--download", "--config", "/dev/null", remote, str(m.mnt)],
                           capture_output=True, text=True, env=env, timeout=120)
    assert check.returncode == 0, check.stderr
    assert "0 differences found" in check.stderr
