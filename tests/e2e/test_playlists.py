"""End-to-end: smart playlists. Each `[[playlist]]` of the configuration is
`Playlists/NAME.m3u8`: extended M3U with durations and titles, entries the
raw UTF-8 paths of the tracks its query matches, relative to the playlist,
into the first view, in the order asked for; live as tags change; a real
MPD (Debian's package, a private instance on loopback) lists the views and
loads the playlists with the right tracks. These run once."""

import json
import os
import socket

import pytest

from conftest import run
from test_live import wait_for
from test_media_software import Mpd

pytestmark = pytest.mark.once

CONFIG = '''
[[view]]
name = "Artists"
template = "$albumartist/$album/$title"

[[view]]
name = "Formats"
template = "$format/$title"

[[playlist]]
name = "Fixture Album"
query = "album:fixture"
sort = "title"

[[playlist]]
name = "Lossless, newest first"
query = "format:flac"
sort = "-title"
'''


def exported(db):
    return json.loads(run("export", "--db", str(db), "--template", "$albumartist/$album/$title").stdout)


def expected_playlist(db, query_matches, key, descending=False):
    """The lines of a playlist computed from `export` alone."""
    # By the key, then by path (ascending either way: a stable sort).
    tracks = sorted((t for t in exported(db) if query_matches(t)), key=lambda t: t["path"])
    tracks = sorted(tracks, key=key, reverse=descending)
    lines = ["#EXTM3U"]
    for t in tracks:
        seconds = -1 if t["duration"] is None else int(t["duration"] + 0.5)
        title = (t["tags"].get("title") or [os.path.basename(t["path"])])[0]
        artist = (t["tags"].get("artist") or t["tags"].get("albumartist") or [None])[0]
        lines.append("#EXTINF:%d,%s" % (seconds, f"{artist} - {title}" if artist else title))
        lines.append("../Artists/" + t["path"])
    return lines


def in_fixture_album(t):
    return "fixture" in " ".join(t["tags"].get("album", [])).lower()


def title_of(t):
    return (t["tags"].get("title") or [""])[0].lower()


@pytest.fixture
def configured(tmp_path, store):
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    return store, config


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def test_each_playlist_is_its_query_in_its_order_with_durations(configured, mount):
    store, config = configured
    m = mount(store, "--config", str(config))
    folder = os.path.join(m.mnt, "Playlists")
    assert sorted(os.listdir(folder)) == ["Fixture Album.m3u8", "Lossless, newest first.m3u8"]
    album = read_lines(os.path.join(folder, "Fixture Album.m3u8"))
    assert album == expected_playlist(store, in_fixture_album, title_of), album
    lossless = read_lines(os.path.join(folder, "Lossless, newest first.m3u8"))
    assert lossless == expected_playlist(store, lambda t: t["format"] == "flac", title_of, descending=True)
    # Durations are known for the fixtures' formats.
    assert all(not line.startswith("#EXTINF:-1,") for line in album), album
    # Each entry is the track's file, found from the playlist's folder.
    tracks = {t["path"]: t for t in exported(store)}
    for entry in album[2::2]:
        served = os.path.join(folder, entry)
        assert os.stat(served).st_ino == tracks[entry[len("../Artists/"):]]["id"] + 1, entry
    assert os.stat(os.path.join(folder, "Fixture Album.m3u8")).st_size == len("\n".join(album) + "\n")


def test_entries_go_into_the_first_views_folder_as_the_mount_names_it(tmp_path, store, mount):
    """A view named `.Dotted` is the folder `_Dotted`: its playlists' entries
    name that folder."""
    config = tmp_path / "config.toml"
    config.write_text(CONFIG.replace('name = "Artists"', 'name = ".Dotted"'))
    m = mount(store, "--config", str(config))
    folder = os.path.join(m.mnt, "Playlists")
    album = read_lines(os.path.join(folder, "Fixture Album.m3u8"))
    expected = [line.replace("../Artists/", "../_Dotted/") for line in expected_playlist(store, in_fixture_album, title_of)]
    assert len(expected) > 2 and album == expected, album
    assert all(os.path.isfile(os.path.join(folder, entry)) for entry in album[2::2])


def test_a_retag_moves_a_track_out_of_a_playlist_live(configured, library, mount):
    store, config = configured
    m = mount(store, "--config", str(config))
    playlist = os.path.join(m.mnt, "Playlists", "Fixture Album.m3u8")
    before = read_lines(playlist)
    mp3 = next(t for t in exported(store) if t["backing_path"].endswith("tagged.mp3"))
    run("tag", "--db", str(store), "set", str(mp3["id"]), "album=Elsewhere")
    wait_for(lambda: read_lines(playlist) != before)
    assert read_lines(playlist) == expected_playlist(store, in_fixture_album, title_of)
    assert not any(line.endswith("/Elsewhere/" + mp3["tags"]["title"][0]) for line in read_lines(playlist))


def test_a_playlist_without_a_query_is_refused_with_its_line(tmp_path, store):
    config = tmp_path / "config.toml"
    config.write_text('[[playlist]]\nname = "Nothing"\n\n[[playlist]]\nname = "Odd"\nquery = "x"\nsort = 3\n')
    p = run("mount", str(tmp_path), "--db", str(store), "--config", str(config), check=False)
    assert p.returncode == 2 and "line 1" in p.stderr and "needs a `query`" in p.stderr, p.stderr


def mpd_command(port, *command):
    """The lines MPD answers a command with (ACK fails the test)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        f = s.makefile("rwb")
        f.readline()
        f.write((" ".join(command) + "\n").encode())
        f.flush()
        lines = []
        for line in f:
            line = line.decode().rstrip("\n")
            assert not line.startswith("ACK"), line
            if line == "OK":
                return lines
            lines.append(line)


def test_mpd_lists_the_views_and_loads_the_playlists(tmp_path, configured, mount):
    store, config = configured
    m = mount(store, "--config", str(config))
    mpd = Mpd(tmp_path, m.mnt)
    try:
        mpd.update()
        root = mpd_command(mpd.port, "lsinfo")
        assert {"directory: Artists", "directory: Formats", "directory: Playlists"} <= set(root), root
        listed = mpd_command(mpd.port, "lsinfo", '"Playlists"')
        assert "playlist: Playlists/Fixture Album.m3u8" in listed, listed
        songs = [line[len("file: "):] for line in
                 mpd_command(mpd.port, "listplaylistinfo", '"Playlists/Fixture Album.m3u8"')
                 if line.startswith("file: ")]
        want = [line[len("../"):] for line in expected_playlist(store, in_fixture_album, title_of)[2::2]]
        assert songs == want, songs
        # MPD knows each of them as a song of its database (tags read).
        known = mpd.songs()
        assert all(s in known for s in songs)
        mpd_command(mpd.port, "load", '"Playlists/Fixture Album.m3u8"')
        queued = [line for line in mpd_command(mpd.port, "playlistinfo") if line.startswith("file: ")]
        assert len(queued) == len(want)
    finally:
        mpd.stop()
