"""Oddly made files as real libraries hold them (tags in unusual places,
rare codecs and layouts, damaged or empty files): each is either served with
audio identical to the original, as ffmpeg decodes both, or refused at scan
time with a reason. Made with real encoders at test time."""

import base64
import hashlib
import json
import os
import struct
import subprocess

from conftest import run


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def syncsafe(n):
    return bytes([(n >> 21) & 127, (n >> 14) & 127, (n >> 7) & 127, n & 127])


def id3v24_title(title, footer=False):
    body = b"TIT2" + syncsafe(len(title) + 2) + b"\0\0" + b"\x03" + title.encode() + b"\0"
    flags = bytes([0x10 if footer else 0])
    tag = b"ID3\x04\x00" + flags + syncsafe(len(body)) + body
    return tag + (b"3DI\x04\x00" + flags + syncsafe(len(body)) if footer else b"")


ID3V1 = b"TAG" + b"v1 title".ljust(30, b"\0") + b"\0" * 94 + b"\xff"
assert len(ID3V1) == 128


def ape_tag():
    items = b"".join(struct.pack("<II", len(v), 0) + k + b"\0" + v
                     for k, v in [(b"Title", b"ape title"), (b"Artist", b"ape artist")])

    def frame(flags):
        return b"APETAGEX" + struct.pack("<IIII", 2000, len(items) + 32, 2, flags) + b"\0" * 8
    return frame(0xA0000000) + items + frame(0x80000000)


ONE_SERIAL_CHAIN = "one-serial-chain.opus"


def make_odd_library(d):
    """Writes the odd files into `d`; returns the names expected to be refused."""
    tmp = d / ".src"
    tmp.mkdir()
    wav, mono, six = str(tmp / "s.wav"), str(tmp / "m.wav"), str(tmp / "six.wav")
    sh("sox", "-n", "-r", "44100", "-c", "2", "-b", "16", wav, "synth", "1.5", "pinknoise", "gain", "-10")
    sh("sox", "-n", "-r", "22050", "-c", "1", "-b", "16", mono, "synth", "1", "sine", "300")
    sh("sox", "-n", "-r", "48000", "-c", "6", "-b", "16", six, "synth", "0.5", "sine", "200")
    cover, big = str(tmp / "c.png"), str(tmp / "big.png")
    sh("ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "color=c=red:s=64x64", "-frames:v", "1", cover)
    sh("ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=s=400x400", "-frames:v", "1", big)
    p = lambda name: str(d / name)  # noqa: E731

    # FLAC
    sh("flac", "-s", "-f", "-T", "TITLE=plain", "-o", p("plain.flac"), wav)
    flac = open(p("plain.flac"), "rb").read()
    open(p("id3v2-before.flac"), "wb").write(id3v24_title("id3 in front of flac") + flac)
    open(p("id3v1-after.flac"), "wb").write(flac + ID3V1)
    sh("flac", "-s", "-f", "--padding=1000000", "-T", "TITLE=huge padding", "-o", p("huge-padding.flac"), wav)
    sh("flac", "-s", "-f", f"--picture=3|image/png|front||{cover}", f"--picture=4|image/png|back||{big}",
       "-o", p("two-pictures.flac"), wav)
    sh("flac", "-s", "-f", "-T", "TITLE=six channels", "-o", p("six-channels.flac"), six)
    sh("flac", "-s", "-f", "--no-seektable", "--no-padding", "-o", p("bare.flac"), mono)
    # MP3
    sh("lame", "--quiet", "-V", "2", "--tt", "vbr", wav, p("vbr-xing.mp3"))
    sh("lame", "--quiet", "-b", "128", "--id3v1-only", "--tt", "v1 only", wav, p("v1-only.mp3"))
    sh("lame", "--quiet", "-b", "64", "-m", "m", "--resample", "22.05", mono, p("mpeg2.mp3"))
    sh("lame", "--quiet", "-b", "128", "-t", wav, str(tmp / "raw.mp3"))
    mp3 = open(tmp / "raw.mp3", "rb").read()
    open(p("no-tags-no-xing.mp3"), "wb").write(mp3)
    open(p("v24-with-footer.mp3"), "wb").write(id3v24_title("footer", footer=True) + mp3)
    open(p("apev2-at-end.mp3"), "wb").write(mp3 + ape_tag())
    lyrics = b"LYRICSBEGININD00003110EAL00005hello"
    open(p("lyrics3-and-v1.mp3"), "wb").write(mp3 + lyrics + b"%06dLYRICS200" % len(lyrics) + ID3V1)
    open(p("junk-after.mp3"), "wb").write(mp3 + os.urandom(3000))
    open(p("half.mp3"), "wb").write(mp3[:len(mp3) // 2])
    open(p("mp3-named.flac"), "wb").write(mp3)
    # MP4
    for name, args in [("moov-at-end.m4a", ["-c:a", "aac"]), ("alac.m4a", ["-c:a", "alac"]),
                       ("fragmented.m4a", ["-c:a", "aac", "-movflags", "+frag_keyframe+empty_moov"]),
                       ("audiobook.m4b", ["-c:a", "aac", "-movflags", "+faststart"])]:
        sh("ffmpeg", "-v", "error", "-y", "-i", wav, *args, "-metadata", "title=" + name, p(name))
    sh("ffmpeg", "-v", "error", "-y", "-i", wav, "-i", cover, "-map", "0:a", "-map", "1", "-c:a", "aac",
       "-c:v", "copy", "-disposition:v", "attached_pic", p("with-cover.m4a"))
    sh("ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=64x64:rate=10", "-i", wav,
       "-shortest", "-c:v", "mpeg4", "-c:a", "aac", "-metadata", "title=video", p("music-video.mp4"))
    # Ogg
    png = open(big, "rb").read()
    block = (struct.pack(">II", 3, 9) + b"image/png" + struct.pack(">I", 0)
             + struct.pack(">IIIII", 400, 400, 24, 0, len(png)) + png)
    sh("oggenc", "-Q", "-t", "picture in comments", "-c",
       "METADATA_BLOCK_PICTURE=" + base64.b64encode(block).decode(), "-o", p("comment-pages.ogg"), wav)
    sh("oggenc", "-Q", "-t", "first", "-o", str(tmp / "a.ogg"), mono)
    sh("oggenc", "-Q", "-t", "second", "-o", str(tmp / "b.ogg"), mono)
    open(p("chained.ogg"), "wb").write(open(tmp / "a.ogg", "rb").read() + open(tmp / "b.ogg", "rb").read())
    # Two links encoded with one serial number, then concatenated: long
    # enough that the second begins where a scan does not look.
    long_wav = str(tmp / "long.wav")
    sh("sox", "-n", "-r", "48000", "-c", "2", "-b", "16", long_wav, "synth", "10", "pinknoise", "gain", "-10")
    for link in ("a", "b"):
        sh("opusenc", "--quiet", "--serial", "4242", "--bitrate", "160", "--title", f"link {link}", long_wav,
           str(tmp / f"{link}.opus"))
    open(p(ONE_SERIAL_CHAIN), "wb").write(open(tmp / "a.opus", "rb").read() + open(tmp / "b.opus", "rb").read())
    sh("opusenc", "--quiet", "--picture", cover, "--title", "opus picture", wav, p("picture.opus"))
    sh("ffmpeg", "-v", "error", "-y", "-i", wav, "-c:a", "libopus", p("ffmpeg.opus"))
    sh("flac", "-s", "-f", "--ogg", "-o", p("ogg-flac.oga"), mono)
    # WAV
    sh("ffmpeg", "-v", "error", "-y", "-i", wav, "-c:a", "pcm_f32le", "-metadata", "title=float", p("float.wav"))
    sh("ffmpeg", "-v", "error", "-y", "-i", wav, "-c:a", "pcm_s24le", "-rf64", "always", p("rf64.wav"))
    sh("ffmpeg", "-v", "error", "-y", "-i", six, "-c:a", "pcm_s16le", p("extensible-six.wav"))
    sh("ffmpeg", "-v", "error", "-y", "-i", wav, "-metadata", "artist=someone", p("list-info.wav"))
    # Not served
    open(p("empty.mp3"), "wb").close()
    sh("sox", wav, p("aiff.aiff"))
    open(p("cut-in-header.m4a"), "wb").write(open(p("moov-at-end.m4a"), "rb").read()[:2000])
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    return {"empty.mp3", "aiff.aiff", "cut-in-header.m4a", "ogg-flac.oga"}


def opusdec_pcm(path):
    out = subprocess.run(["opusdec", "--quiet", str(path), "-"], capture_output=True)
    return hashlib.sha256(out.stdout).hexdigest(), len(out.stdout)


def pcm(path):
    out = subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(path), "-map", "0:a:0",
                          "-c:a", "pcm_f32le", "-f", "f32le", "-"], capture_output=True)
    return hashlib.sha256(out.stdout).hexdigest(), len(out.stdout)


def test_odd_files_are_served_with_identical_audio_or_refused_with_a_reason(tmp_path, mount):
    lib = tmp_path / "odd"
    lib.mkdir()
    refused = make_odd_library(lib)
    db = tmp_path / "odd.db"
    scanned = json.loads(run("scan", str(lib), "--db", str(db), "--json").stdout)
    reasons = {os.path.basename(f["path"]): f["reason"] for f in scanned["failures"]}
    assert set(reasons) == refused, reasons
    assert all(reasons.values()), reasons
    assert reasons["empty.mp3"] == "empty file (0 bytes)"
    assert reasons["aiff.aiff"].startswith("unsupported audio format")

    tracks = json.loads(run("export", "--db", str(db)).stdout)
    # A comment too long for the chain's header pages: its audio pages, the
    # second link's with them, are renumbered.
    chain = next(t for t in tracks if t["backing_path"].endswith(ONE_SERIAL_CHAIN))
    run("tag", "--db", str(db), "set", str(chain["id"]), "comment=" + "x" * 70_000)
    m = mount(db)
    served = set()
    for t in tracks:
        name = os.path.basename(t["backing_path"])
        served.add(name)
        want, got = pcm(t["backing_path"]), pcm(os.path.join(m.mnt, t["path"]))
        assert want[1] > 0, name
        assert got == want, f"{name}: audio differs through the mount"
    # Audiobook and video players go by the extension.
    for name, ext in [("audiobook.m4b", ".m4b"), ("music-video.mp4", ".mp4"), ("alac.m4a", ".m4a")]:
        track = next(t for t in tracks if t["backing_path"].endswith(name))
        assert track["path"].endswith(ext) and os.path.isfile(os.path.join(m.mnt, track["path"])), track
    # ffmpeg and opusdec read both links of the chain.
    served_chain = os.path.join(m.mnt, chain["path"])
    assert opusdec_pcm(served_chain) == opusdec_pcm(chain["backing_path"])
    assert pcm(served_chain)[1] > 15 * 48000 * 2 * 4, "not both 10 s links"
    assert served | refused == set(os.listdir(lib))
    log = m.stop()
    assert "panicked" not in log, log
