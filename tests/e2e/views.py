"""What independent readers (mutagen) see in a served file, per format,
reduced to a few comparable fields: title, artists, album, picture hashes."""

import base64
import hashlib

from mutagen.flac import FLAC, Picture
from mutagen.id3 import ID3
from mutagen.mp4 import MP4
from mutagen.oggopus import OggOpus
from mutagen.oggvorbis import OggVorbis
from mutagen.wave import WAVE


def _sha(data):
    return hashlib.sha256(bytes(data)).hexdigest()


def _vorbis(tags, pictures):
    tags = tags or {}
    return {"title": tags.get("title", [None])[0], "artist": list(tags.get("artist", [])),
            "album": tags.get("album", [None])[0], "art": pictures}


def _id3(tags):
    if tags is None:
        return {"title": None, "artist": [], "album": None, "art": []}
    first = lambda fid: str(tags[fid].text[0]) if fid in tags else None  # noqa: E731
    return {"title": first("TIT2"), "artist": [str(a) for a in tags["TPE1"].text] if "TPE1" in tags else [],
            "album": first("TALB"), "art": [_sha(p.data) for p in tags.getall("APIC")]}


def _ogg_pictures(tags):
    return [_sha(Picture(base64.b64decode(b)).data) for b in (tags or {}).get("metadata_block_picture", [])]


def view(path, fmt):
    if fmt == "flac":
        f = FLAC(path)
        return _vorbis(f.tags, [_sha(p.data) for p in f.pictures])
    if fmt == "mp3":
        return _id3(ID3(path))
    if fmt == "wav":
        return _id3(WAVE(path).tags)
    if fmt in ("vorbis", "opus"):
        f = (OggVorbis if fmt == "vorbis" else OggOpus)(path)
        return _vorbis(f.tags, _ogg_pictures(f.tags))
    if fmt == "mp4":
        t = MP4(path).tags or {}
        first = lambda k: str(t[k][0]) if k in t else None  # noqa: E731
        return {"title": first("\xa9nam"), "artist": [str(a) for a in t.get("\xa9ART", [])],
                "album": first("\xa9alb"), "art": [_sha(c) for c in t.get("covr", [])]}
    raise ValueError(fmt)


def expected(track):
    """The same fields, from an `export` entry."""
    tags = track["tags"]
    return {"title": tags.get("title", [None])[0], "artist": tags.get("artist", []),
            "album": tags.get("album", [None])[0], "art": [a["sha256"] for a in track["art"]]}
