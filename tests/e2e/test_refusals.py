"""End-to-end: a scan refuses, with a reason, the files no decoder can play
(an MP3 with no run of MPEG frames after its tags, whatever its name; an
MP4 whose audio has no samples or whose chunks lie outside the file), and
serves every file ffmpeg decodes, however small. Made at test time with
real encoders; scan and serving alike (marker `once`)."""

import json
import os
import struct
import subprocess

import pytest

from conftest import run
from test_live import export

pytestmark = pytest.mark.once


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def syncsafe(n):
    return bytes([(n >> 21) & 127, (n >> 14) & 127, (n >> 7) & 127, n & 127])


def id3_tag(body_len_claimed, frames):
    return b"ID3\x04\x00\x00" + syncsafe(body_len_claimed) + frames


def text_frame(fid, text):
    data = b"\x03" + text.encode()
    return fid + syncsafe(len(data)) + b"\0\0" + data


def mp3_frames(path):
    """The MPEG frames of a CBR MP3 (no tags), split by their headers."""
    data = open(path, "rb").read()
    rates = [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]
    frames, pos = [], 0
    while pos + 4 <= len(data):
        h = data[pos:pos + 4]
        assert h[0] == 0xFF and h[1] & 0xE0 == 0xE0, "lame wrote MPEG-1 layer III frames"
        length = 144 * rates[h[2] >> 4] * 1000 // 44100 + ((h[2] >> 1) & 1)
        frames.append(data[pos:pos + length])
        pos += length
    return frames


def decodes(path):
    """PCM ffmpeg decodes from a file (None when it decodes nothing)."""
    p = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "s16le", "-"], capture_output=True)
    return p.stdout if p.returncode == 0 and p.stdout else None


def patched(data, atom, offset, value):
    """`data` with the 32-bit field `offset` bytes into the first `atom` body set."""
    at = data.index(atom) + 4 + offset
    return data[:at] + struct.pack(">I", value) + data[at + 4:]


def make_library(d):
    """(files to refuse, files to serve) written into `d`."""
    d.mkdir()
    src = d.parent / "sources"
    src.mkdir()
    wav = str(src / "s.wav")
    sh("sox", "-n", "-r", "44100", "-c", "2", "-b", "16", wav, "synth", "1", "sine", "440")
    cbr = str(src / "cbr.mp3")
    sh("lame", "--quiet", "-t", "-b", "128", wav, cbr)
    frames = mp3_frames(cbr)
    audio = b"".join(frames)
    tag = id3_tag(len(text_frame(b"TIT2", "T")), text_frame(b"TIT2", "T"))
    # A picture's bytes hold syncs by chance: a tag dump is not audio.
    picture = (b"\xff\xfb\x90\x00" + os.urandom(400)) * 40
    apic = b"APIC" + syncsafe(len(picture) + 14) + b"\0\0" + b"\x00image/jpeg\x00\x03\x00" + picture
    refuse = {
        "truncated.mp3": tag + audio[:300],
        "tag-dump.mp3": id3_tag(len(apic), apic),
        "tag-dump-named.flac": id3_tag(len(apic), apic),
        # A tag whose size runs into the audio, leaving less than a frame.
        "damaged-tag.mp3": id3_tag(len(audio) - 200, audio),
    }
    m4a = str(src / "a.m4a")
    sh("ffmpeg", "-v", "error", "-y", "-i", wav, "-c:a", "aac", "-movflags", "+faststart", m4a)
    mp4 = open(m4a, "rb").read()
    mdat = mp4.index(b"mdat") - 4
    # The moov kept, the media data lost (an empty mdat in its place).
    refuse["no-media-data.m4a"] = mp4[:mdat] + struct.pack(">I", 8) + b"mdat"
    # Sample tables that hold no sample.
    refuse["no-samples.m4a"] = patched(patched(mp4, b"stsz", 8, 0), b"stsz", 4, 0)
    serve = {
        "one-frame.mp3": tag + frames[0],
        "two-frames.mp3": frames[0] + frames[1],
        "two-frames-cut.mp3": tag + frames[0] + frames[1] + frames[2][:150],
    }
    for name, data in {**refuse, **serve}.items():
        (d / name).write_bytes(data)
    for name in refuse:
        assert decodes(d / name) is None, name + " is a file ffmpeg decodes"
    # ffmpeg opens an MP3 once it finds a second frame header: it plays
    # none of a one-frame file, which other decoders (and seeking players)
    # play; the others it decodes.
    for name in serve:
        assert (decodes(d / name) is None) == (name == "one-frame.mp3"), name
    return set(refuse), serve


def test_undecodable_files_are_refused_with_a_reason_and_tiny_ones_served(tmp_path, mount):
    lib = tmp_path / "library"
    refuse, serve = make_library(lib)
    db = tmp_path / "store.db"
    p = run("scan", str(lib), "--db", str(db), "--json")
    failures = {os.path.basename(f["path"]): f["reason"] for f in json.loads(p.stdout)["failures"]}
    assert set(failures) == refuse, failures
    for name in ["truncated.mp3", "tag-dump.mp3", "tag-dump-named.flac", "damaged-tag.mp3"]:
        assert "no MPEG audio frames" in failures[name], failures
    assert "lies outside" in failures["no-media-data.m4a"], failures
    assert "no samples" in failures["no-samples.m4a"], failures
    # Named again by a re-scan while unchanged.
    again = run("scan", str(lib), "--db", str(db), "--json")
    assert {os.path.basename(f["path"]) for f in json.loads(again.stdout)["failures"]} == refuse
    m = mount(db)
    for t in export(db).values():
        name = os.path.basename(t["backing_path"])
        assert name in serve
        served = os.path.join(m.mnt, t["path"])
        assert decodes(served) == decodes(t["backing_path"]), name
        # The audio untouched (the last 300 bytes are audio in each file).
        assert open(served, "rb").read()[-300:] == serve[name][-300:], name
