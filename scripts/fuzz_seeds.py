#!/usr/bin/env python3
"""Seed inputs for the fuzz targets, from the committed fixtures.

Each format target prepends its format's magic bytes to the input (see
crates/fuzzing), so the seeds are the fixtures with that magic removed.
Usage: scripts/fuzz_seeds.py OUTDIR
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE_DIRS = ["tests/fixtures", "tests/fixtures-odd", "tests/fixtures-passthrough"]


def seed(data):
    """(target, input) for a fixture file, or None."""
    if data.startswith(b"fLaC"):
        return "flac", data[4:]
    if data.startswith(b"ID3"):
        return "mp3", data[3:]
    if data.startswith(b"OggS"):
        return "ogg", data[4:]
    if data[:4] in (b"RIFF", b"RF64") and data[8:12] == b"WAVE":
        return "wav", data[4:8] + data[12:]
    if data[4:8] == b"ftyp":
        return "mp4", data
    if data[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xfa"):
        return "mp3", b"\x04\x00\x00\x00\x00\x00\x00" + data  # an empty ID3v2.4 tag first
    return None


def main():
    out = sys.argv[1]
    for d in FIXTURE_DIRS:
        for name in sorted(os.listdir(os.path.join(ROOT, d))):
            with open(os.path.join(ROOT, d, name), "rb") as f:
                s = seed(f.read())
            if s:
                os.makedirs(os.path.join(out, s[0]), exist_ok=True)
                with open(os.path.join(out, s[0], name), "wb") as f:
                    f.write(s[1])
    texts = {
        "template": ["${albumartist|artist}/${album}/[${disc}-][${tracknumber:02} ]${title|filename}",
                     "$artist/$$[$album]/${tracknumber:3} [CD $discnumber/]$title"],
        "import": ['[{"id": 1, "tags": {"title": "New", "genre": ["A", "B"], "comment": null}}]',
                   '[{"backing_path": "/b.mp3", "tags": {"Album Artist": "x"}}, {"id": 3}]'],
        "serve": ["\x00" * 64, "".join(chr(i % 128) for i in range(600))],
    }
    for target, items in texts.items():
        os.makedirs(os.path.join(out, target), exist_ok=True)
        for i, t in enumerate(items):
            with open(os.path.join(out, target, f"seed{i}"), "w") as f:
                f.write(t)


if __name__ == "__main__":
    main()
