"""End-to-end: album covers as files. With `--covers` (and by default with
views in the configuration file) each folder of tracks holds `cover.jpg`
or `cover.png`: the front cover most of its tracks carry, byte for byte
the store's picture; it follows art edits live, goes with the folder's
last track, and is served over HTTP as an image."""

import hashlib
import json
import os
import subprocess

import pytest

from conftest import FIXTURES, run
from test_http import Server
from test_live import export, wait_for


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def jpeg(tmp_path, name, colour):
    """A small real JPEG (ffmpeg), different for each colour."""
    path = tmp_path / name
    subprocess.run(["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", f"color=c={colour}:s=32x32",
                    "-frames:v", "1", str(path)], check=True)
    return path


def expected_covers(db, mnt, template):
    """{folder in the mount: (sha256, extension)} computed from `export`
    with the mount's template: per folder, the front cover (else first
    picture) most of its tracks carry, JPEG or PNG; the first track's in
    the folder's order on a tie."""
    exported = json.loads(run("export", "--db", str(db), "--template", template).stdout)
    by_folder = {}
    for t in sorted(exported, key=lambda t: os.path.basename(t["path"])):
        art = next((a for a in t["art"] if a["picture_type"] == 3), t["art"][0] if t["art"] else None)
        arts = by_folder.setdefault(os.path.dirname(t["path"]), [])
        if art and art["mime"] in ("image/jpeg", "image/png"):
            arts.append((art["sha256"], "png" if art["mime"] == "image/png" else "jpg"))
    covers = {}
    for folder, arts in by_folder.items():
        if arts:
            best = max(arts, key=lambda a: (arts.count(a), -arts.index(a)))
            covers[os.path.join(mnt, folder)] = best
    return covers


def served_covers(mnt):
    found = {}
    for d, _, files in os.walk(mnt):
        for name in files:
            if name.startswith("cover."):
                found[d] = (sha256_of(os.path.join(d, name)), name.split(".", 1)[1])
    return found


ONE_ALBUM = "$album/$title"


def test_each_folder_holds_the_cover_most_of_its_tracks_carry(tmp_path, store, library, mount):
    tracks = export(store)
    red, blue = jpeg(tmp_path, "red.jpg", "red"), jpeg(tmp_path, "blue.jpg", "blue")
    # Beside the two FLACs' PNG in the album: three red, one blue.
    others = [tracks[str(library / n)]["id"] for n in ("tagged.mp3", "tagged.m4a", "tagged.ogg", "tagged.opus")]
    for track in others[:3]:
        run("art", "--db", str(store), "set", str(track), str(red))
    run("art", "--db", str(store), "set", str(others[3]), str(blue))
    m = mount(store, "--covers", "--template", ONE_ALBUM)
    covers = served_covers(m.mnt)
    assert covers == expected_covers(store, m.mnt, ONE_ALBUM), covers
    album = os.path.join(m.mnt, "Fixture Album")
    assert covers[album] == (sha256_of(red), "jpg")
    # A cover is a file like any other: stat, read in pieces, no write.
    cover = os.path.join(album, "cover.jpg")
    assert os.stat(cover).st_size == os.path.getsize(red)
    with open(cover, "rb") as f:
        f.seek(100)
        assert f.read(50) == red.read_bytes()[100:150]
    try:
        open(cover, "wb")
        raise AssertionError("a cover opened for writing")
    except OSError:
        pass
    # Live: blue on the red tracks too.
    for track in others[:3]:
        run("art", "--db", str(store), "set", str(track), str(blue))
    wait_for(lambda: os.path.exists(cover) and sha256_of(cover) == sha256_of(blue))
    # Their pictures gone: the FLAC's PNG is the album's cover.
    for track in others:
        run("art", "--db", str(store), "rm", str(track), "--all")
    wait_for(lambda: served_covers(m.mnt) == expected_covers(store, m.mnt, ONE_ALBUM))
    assert not os.path.exists(cover) and os.path.exists(os.path.join(album, "cover.png"))


def test_covers_follow_the_views_of_a_configuration_and_can_be_renamed_or_off(tmp_path, store, mount):
    config = tmp_path / "config.toml"
    config.write_text('[[view]]\nname = "Artists"\ntemplate = "$albumartist/$album/$title"\n'
                      '[[view]]\nname = "Albums"\ntemplate = "$album/$title"\n')
    m = mount(store, "--config", str(config), name="views")
    covers = served_covers(m.mnt)
    assert set(covers) == {os.path.join(m.mnt, "Artists", "Fixture Band", "Fixture Album"),
                           os.path.join(m.mnt, "Albums", "Fixture Album")}, covers
    png = sha256_of(os.path.join(FIXTURES, "cover.png"))
    assert {sha for sha, _ in covers.values()} == {png}
    off = mount(store, "--config", str(config), "--covers", "false", name="off")
    assert served_covers(off.mnt) == {}
    named = mount(store, "--covers", "--cover-name", "folder", name="named")
    assert os.path.exists(os.path.join(named.mnt, "Fixture Band", "Fixture Album", "folder.png"))
    # Without views or --covers: none, as before.
    plain = mount(store, name="plain")
    assert served_covers(plain.mnt) == {}


@pytest.mark.once
def test_a_cover_is_served_over_http_as_an_image(tmp_path, store):
    server = Server(store, tmp_path / "serve.log", "--covers")
    try:
        status, headers, body = server.request("GET", "/Fixture%20Band/Fixture%20Album/cover.png")
        assert status == 200 and headers["content-type"] == "image/png", (status, headers)
        with open(os.path.join(FIXTURES, "cover.png"), "rb") as f:
            assert body == f.read()
        status, headers, _ = server.request("GET", "/Fixture%20Band/Fixture%20Album/cover.png",
                                            {"If-None-Match": headers["etag"]})
        assert status == 304
    finally:
        server.stop()
