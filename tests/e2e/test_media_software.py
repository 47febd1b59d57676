"""End-to-end: what media servers and players see through a mounted view.
Real MPD and minidlna (Debian's packages, private instances on loopback)
index a library made at test time; exiftool, ffprobe and mutagen read the
served files. These do not depend on how the kernel hands requests to the
daemon: they run in one pass of the suite (marker `once`)."""

import json
import os
import socket
import sqlite3
import subprocess
import time

import pytest
from mutagen import File as MutagenFile

from conftest import run
from test_live import export, wait_for

pytestmark = pytest.mark.once

# 16-bit WAVs whose id3 chunks come out of odd and even length as tags vary.
WAV_TITLES = ["W", "Wa", "Wav three", "Wav four!"]


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def make_library(d):
    """Untagged audio of every kind a media server indexes; the store tags it."""
    d.mkdir()
    for i, _ in enumerate(WAV_TITLES):
        channels = "1" if i % 2 else "2"
        sh("sox", "-n", "-r", "44100", "-c", channels, "-b", "16", str(d / ("w%d.wav" % i)),
           "synth", "%.2f" % (1 + i * 0.37), "sine", "440")
    src = str(d / "w0.wav")
    sh("flac", "-s", "-f", "-o", str(d / "f.flac"), src)
    sh("lame", "--quiet", src, str(d / "m.mp3"))
    sh("oggenc", "-Q", "-o", str(d / "v.ogg"), src)
    sh("opusenc", "--quiet", src, str(d / "o.opus"))


def tag(db, track, *pairs):
    run("tag", "--db", str(db), "set", str(track), *pairs)


@pytest.fixture
def tagged(tmp_path):
    lib = tmp_path / "library"
    make_library(lib)
    db = tmp_path / "store.db"
    run("scan", str(lib), "--db", str(db))
    tracks = export(db)
    for i, title in enumerate(WAV_TITLES):
        t = tracks[str(lib / ("w%d.wav" % i))]
        tag(db, t["id"], "title=" + title, "artist=First Artist", "artist=Second Artist",
            "albumartist=The Album Artist", "composer=A Composer", "album=Wave Album",
            "tracknumber=%d" % (i + 1), "genre=Ambient", "label=A Label",
            "musicbrainz_albumid=9e5b4f3c-0000-4000-8000-00000000000%d" % i)
    for name in ["f.flac", "m.mp3", "v.ogg", "o.opus"]:
        tag(db, tracks[str(lib / name)]["id"], "title=Other " + name, "artist=Other Artist",
            "album=Other Album", "genre=Rock", "tracknumber=1")
    # A cover: the last ID3 frame, and longer than 127 bytes (exiftool
    # checks what follows such a frame).
    cover = tmp_path / "cover.png"
    sh("ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=s=64x64", "-frames:v", "1", str(cover))
    run("art", "--db", str(db), "set", "-r", str(lib), str(cover))
    return lib, db


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mpd:
    """A private MPD on loopback over a folder: no zeroconf, a null output."""

    def __init__(self, tmp_path, music):
        self.port = free_port()
        d = tmp_path / "mpd"
        d.mkdir()
        conf = d / "mpd.conf"
        conf.write_text(
            'music_directory "%s"\ndb_file "%s"\npid_file "%s"\nlog_file "%s"\n'
            'bind_to_address "127.0.0.1"\nport "%d"\nzeroconf_enabled "no"\n'
            'audio_output {\n  type "null"\n  name "null"\n}\n'
            % (music, d / "db", d / "pid", d / "log", self.port))
        self.proc = subprocess.Popen(["mpd", "--no-daemon", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.proc.poll() is None, self.proc.stderr.read().decode()
                assert time.time() < deadline, "mpd did not listen"
                time.sleep(0.05)

    def update(self):
        """`mpc update --wait`: MPD reads again the files whose mtime moved."""
        subprocess.run(["mpc", "-p", str(self.port), "update", "--wait"],
                       check=True, capture_output=True, timeout=60)

    def songs(self):
        """path -> {tag: [values]} as MPD's `listallinfo` reports them."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            f = s.makefile("rwb")
            f.readline()
            f.write(b"listallinfo\n")
            f.flush()
            songs, current = {}, None
            for line in f:
                line = line.decode().rstrip("\n")
                if line == "OK":
                    break
                key, _, value = line.partition(": ")
                if key == "file":
                    current = songs.setdefault(value, {})
                elif key == "directory":
                    current = None
                elif current is not None:
                    current.setdefault(key, []).append(value)
            return songs

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)


def test_mpd_reads_every_wav_tag_and_sees_a_tag_only_edit_on_update(tmp_path, tagged, mount):
    lib, db = tagged
    m = mount(db)
    mpd = Mpd(tmp_path, m.mnt)
    try:
        mpd.update()
        tracks = export(db)
        songs = mpd.songs()
        for i, title in enumerate(WAV_TITLES):
            t = tracks[str(lib / ("w%d.wav" % i))]
            song = songs[t["path"]]
            assert song["Title"] == [title], song
            assert song["Artist"] == t["tags"]["artist"] == ["First Artist", "Second Artist"], song
            assert song["AlbumArtist"] == t["tags"]["albumartist"], song
            assert song["Composer"] == t["tags"]["composer"], song
            assert song["Album"] == ["Wave Album"] and song["Track"] == [str(i + 1)], song
            assert song["Label"] == ["A Label"], song
        flac = tracks[str(lib / "f.flac")]
        assert songs[flac["path"]]["Genre"] == ["Rock"]
        # A tag the template does not use: the file stays where it is, and
        # only its mtime tells MPD to read it again.
        tag(db, flac["id"], "genre=Retagged Genre")
        path = os.path.join(m.mnt, flac["path"])
        wait_for(lambda: os.path.getsize(path) != 0 and int(os.stat(path).st_mtime) > 0 and
                 MutagenFile(path)["genre"] == ["Retagged Genre"])
        mpd.update()
        assert mpd.songs()[flac["path"]]["Genre"] == ["Retagged Genre"]
    finally:
        mpd.stop()


def minidlna_durations(tmp_path, media, count):
    """path -> duration (s) as a private minidlna indexes `media`, run in a
    network namespace of its own (loopback only: it announces itself by
    multicast otherwise)."""
    d = tmp_path / "minidlna"
    (d / "db").mkdir(parents=True)
    conf = d / "minidlna.conf"
    conf.write_text("media_dir=A,%s\ndb_dir=%s\nlog_dir=%s\nport=%d\nnetwork_interface=lo\n"
                    "inotify=no\n" % (media, d / "db", d, free_port()))
    proc = subprocess.Popen(["unshare", "--net", "sh", "-c",
                             "ip link set lo up && exec minidlnad -d -f %s -P %s" % (conf, d / "pid")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            assert proc.poll() is None, "minidlna exited"
            assert time.time() < deadline, "minidlna did not index the files"
            rows = []
            if (d / "db" / "files.db").exists():
                try:
                    with sqlite3.connect(str(d / "db" / "files.db"), timeout=5) as c:
                        rows = c.execute("SELECT PATH, DURATION FROM DETAILS WHERE PATH LIKE ?",
                                         (str(media) + "/%.wav",)).fetchall()
                except sqlite3.OperationalError:
                    rows = []
            if len(rows) == count:
                break
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    out = {}
    for path, duration in rows:
        h, mnt, s = duration.split(":")
        out[os.path.relpath(path, media)] = int(h) * 3600 + int(mnt) * 60 + float(s)
    return out


def test_minidlna_gives_every_16_bit_wav_its_duration(tmp_path, tagged, mount):
    lib, db = tagged
    m = mount(db)
    tracks = export(db)
    durations = minidlna_durations(tmp_path, m.mnt, len(WAV_TITLES))
    for i in range(len(WAV_TITLES)):
        t = tracks[str(lib / ("w%d.wav" % i))]
        assert abs(durations[t["path"]] - (1 + i * 0.37)) < 0.01, (t["path"], durations)


def exiftool_warnings(paths):
    out = subprocess.run(["exiftool", "-j", "-a", "-Warning", *paths],
                         capture_output=True, text=True).stdout
    return {os.path.basename(r["SourceFile"]): r.get("Warning") for r in json.loads(out)}


def test_exiftool_warns_of_no_served_file_whose_backing_file_it_does_not(tagged, mount):
    lib, db = tagged
    m = mount(db)
    tracks = list(export(db).values())
    backing = exiftool_warnings([t["backing_path"] for t in tracks])
    served = exiftool_warnings([os.path.join(m.mnt, t["path"]) for t in tracks])
    for t in tracks:
        if backing[os.path.basename(t["backing_path"])] is None:
            assert served[os.path.basename(t["path"])] is None, (t["path"], served)


def ffprobe_tags(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags", "-of", "json", path],
                         capture_output=True, text=True, check=True).stdout
    return {k.lower(): v for k, v in json.loads(out)["format"].get("tags", {}).items()}


def test_ffmpeg_reads_every_wav_tag_and_encoders_keep_their_names(tagged, mount):
    lib, db = tagged
    m = mount(db)
    tracks = export(db)
    wav = tracks[str(lib / "w0.wav")]
    got = ffprobe_tags(os.path.join(m.mnt, wav["path"]))
    assert got["album_artist"] == "The Album Artist" and got["composer"] == "A Composer", got
    assert (got["title"], got["album"], got["genre"], got["track"]) == ("W", "Wave Album", "Ambient", "1"), got
    # ffmpeg gives the first value of an ID3v2.4 frame that holds several
    # (it does so for any tagger's files).
    assert got["artist"] == "First Artist", got
    for name in ["f.flac", "v.ogg", "o.opus"]:
        t = tracks[str(lib / name)]
        served = MutagenFile(os.path.join(m.mnt, t["path"]))
        original = MutagenFile(t["backing_path"])
        assert served.tags.vendor == original.tags.vendor, name
        assert "retagfs" not in served.tags.vendor
