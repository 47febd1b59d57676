#!/usr/bin/env python3
"""Regenerates the committed oddly made files: tags and containers as real
taggers and muxers leave them, which synthesis must serve with audio that
decodes exactly like the original. Needs: sox lame ffmpeg."""

import os
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(*cmd):
    subprocess.run(cmd, check=True)


def syncsafe(n):
    return bytes([(n >> 21) & 0x7F, (n >> 14) & 0x7F, (n >> 7) & 0x7F, n & 0x7F])


def v24_tag(frames):
    body = b""
    for fid, text in frames:
        data = b"\x03" + text.encode()
        body += fid + syncsafe(len(data)) + b"\0\0" + data
    return b"ID3\x04\x00\x00" + syncsafe(len(body)) + body


def unsynchronise(d):
    out = bytearray()
    for i, b in enumerate(d):
        out.append(b)
        if b == 0xFF and (i + 1 == len(d) or d[i + 1] >= 0xE0 or d[i + 1] == 0):
            out.append(0)
    return bytes(out)


def atoms(b, o=0, end=None):
    end = len(b) if end is None else end
    out = []
    while o + 8 <= end:
        size, kind = struct.unpack(">I4s", b[o:o + 8])
        out.append((kind, o, size))
        o += size
    return out


def atom(kind, body):
    return struct.pack(">I4s", 8 + len(body), kind) + body


def with_udta(m4a, new_udta):
    """A fast-start file with moov's udta replaced, chunk offsets fixed."""
    top = atoms(m4a)
    _, mo_at, mo_len = next(a for a in top if a[0] == b"moov")
    moov = m4a[mo_at:mo_at + mo_len]
    body = b"".join(moov[o:o + s] for k, o, s in atoms(moov, 8) if k != b"udta") + new_udta
    new = bytearray(atom(b"moov", body))
    delta = len(new) - len(moov)
    i = new.find(b"stco")
    while i >= 0:
        for k in range(struct.unpack(">I", new[i + 8:i + 12])[0]):
            p = i + 12 + 4 * k
            new[p:p + 4] = struct.pack(">I", struct.unpack(">I", new[p:p + 4])[0] + delta)
        i = new.find(b"stco", i + 1)
    return b"".join(bytes(new) if k == b"moov" else m4a[o:o + s] for k, o, s in top)


def main():
    tmp = tempfile.mkdtemp()
    wav = os.path.join(tmp, "tone.wav")
    run("sox", "-n", "-r", "22050", "-c", "1", "-b", "16", wav, "synth", "0.5", "sine", "440", "gain", "-6")
    mp3 = os.path.join(tmp, "plain.mp3")
    run("lame", "--quiet", "-V5", wav, mp3)
    plain = open(mp3, "rb").read()

    def put(name, data):
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)

    # ID3v2.2 (three-letter frame ids).
    frames = b""
    for fid, text in ((b"TT2", "V22 Title"), (b"TP1", "V22 Artist"), (b"TAL", "Odd Album")):
        data = b"\0" + text.encode("latin-1")
        frames += fid + len(data).to_bytes(3, "big") + data
    put("v22.mp3", b"ID3\x02\x00\x00" + syncsafe(len(frames)) + frames + plain)
    # Two ID3v2 tags in a row, then padding before the first frame.
    put("two-tags-padding.mp3",
        v24_tag([(b"TIT2", "Two Tags"), (b"TPE1", "Odd Artist")]) + v24_tag([(b"TALB", "Odd Album")])
        + b"\0" * 700 + plain)
    # ID3v2.3 with the unsynchronisation flag.
    body = b"TIT2" + struct.pack(">I", 9) + b"\0\0" + b"\x00Unsynced" \
        + b"TPE1" + struct.pack(">I", 5) + b"\0\0" + b"\x00\xff\xfe\xff"
    body = unsynchronise(body)
    put("v23-unsync.mp3", b"ID3\x03\x00\x80" + syncsafe(len(body)) + body + plain)
    # ID3v1.1 only.
    v1 = (b"TAG" + b"V1 Title".ljust(30, b"\0") + b"V1 Artist".ljust(30, b"\0")
          + b"V1 Album".ljust(30, b"\0") + b"2001" + b"c".ljust(28, b"\0") + b"\x00\x05\x11")
    put("v1-only.mp3", plain + v1)

    # WAV: an odd-sized chunk, bext, an upper-case "ID3 " chunk and a data
    # chunk whose size says 0xFFFFFFFF (written by a streaming recorder).
    d = open(wav, "rb").read()
    fi = d.find(b"fmt ")
    fmt = d[fi:fi + 8 + struct.unpack("<I", d[fi + 4:fi + 8])[0]]
    di = d.find(b"data")
    pcm = d[di + 8:di + 8 + struct.unpack("<I", d[di + 4:di + 8])[0]]
    tag = v24_tag([(b"TIT2", "Odd WAV")])
    body = (b"WAVE" + fmt + b"junk" + struct.pack("<I", 3) + b"abc\0"
            + b"bext" + struct.pack("<I", 602) + b"\0" * 602
            + b"ID3 " + struct.pack("<I", len(tag)) + tag + b"\0" * (len(tag) & 1)
            + b"data" + struct.pack("<I", 0xFFFFFFFF) + pcm)
    put("odd-chunks.wav", b"RIFF" + struct.pack("<I", len(body)) + body)

    # MP4 (fast start, so growing moov moves the audio) without udta, with
    # an empty udta, and with a meta that has no ilst.
    m4a = os.path.join(tmp, "plain.m4a")
    run("ffmpeg", "-v", "error", "-y", "-i", wav, "-c:a", "aac", "-b:a", "32k", "-map_metadata", "-1",
        "-movflags", "+faststart", m4a)
    m = open(m4a, "rb").read()
    hdlr = b"\0\0\0\x21hdlr" + b"\0" * 8 + b"mdirappl" + b"\0" * 9
    put("no-udta.m4a", with_udta(m, b""))
    put("udta-without-meta.m4a", with_udta(m, atom(b"udta", b"")))
    put("meta-without-ilst.m4a", with_udta(m, atom(b"udta", atom(b"meta", b"\0\0\0\0" + hdlr))))


if __name__ == "__main__":
    main()
