"""End-to-end: `retagfs query` against a library retagged by the test:
each operator, multi-valued fields and accents, compared with the
store's `export` filtered here by hand; malformed queries are usage
errors that point at the offending character. Nothing here mounts: these
run once."""

import json
import time
import unicodedata

import pytest

from conftest import run
from test_live import export

pytestmark = pytest.mark.once


def fold(text):
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).lower()


def values(track, key):
    return track["tags"].get(key, [])


def contains(key, needle):
    return lambda t: any(needle in fold(v) for v in values(t, key))


@pytest.fixture
def tagged(store, library):
    tracks = export(store)
    flac, mp3 = tracks[str(library / "tagged.flac")], tracks[str(library / "tagged.mp3")]
    ogg = tracks[str(library / "tagged.ogg")]
    run("tag", "--db", str(store), "set", str(flac["id"]), "artist=Beyoncé", "genre=Jazz",
        "date=1959-08-17", "albumartist=")
    run("tag", "--db", str(store), "add", str(flac["id"]), "genre=Soul")
    run("tag", "--db", str(store), "set", str(mp3["id"]), "genre=Jazz Fusion", "date=1972", "bpm=128.5 BPM")
    run("tag", "--db", str(store), "set", str(ogg["id"]), "title=Kind of Blue", "year=1963")
    return store


def query_ids(db, text):
    p = run("query", "--db", str(db), "--json", "--", text)
    return sorted(t["id"] for t in json.loads(p.stdout))


CASES = [
    ("beyonce", lambda t: any("beyonce" in fold(v) for k in ("artist", "albumartist", "album", "title")
                              for v in values(t, k))),
    ("genre:soul", contains("genre", "soul")),
    ("genre:JAZZ", contains("genre", "jazz")),
    ("genre:=Jazz", lambda t: "Jazz" in values(t, "genre")),
    ("genre::^Jazz$", lambda t: "Jazz" in values(t, "genre")),
    ("year:1955..1965", lambda t: any(1955 <= int(v[:4]) <= 1965 for v in values(t, "date") + values(t, "year")
                                      if v[:4].isdigit())),
    ("year:1970..", lambda t: any(int(v[:4]) >= 1970 for v in values(t, "date") if v[:4].isdigit())),
    ("bpm:100..130", lambda t: any(v.startswith("128.5") for v in values(t, "bpm"))),
    ("albumartist:=", lambda t: all(v == "" for v in values(t, "albumartist"))),
    ("-genre:jazz", lambda t: not contains("genre", "jazz")(t)),
    ("format:flac genre:jazz", lambda t: t["format"] == "flac" and contains("genre", "jazz")(t)),
    ('title:"kind of"', contains("title", "kind of")),
    ("genre:soul , title:blue", lambda t: contains("genre", "soul")(t) or contains("title", "blue")(t)),
    ("year:1950..1960 genre:soul -title:zzz", lambda t: contains("genre", "soul")(t)),
    ("added:-1d..", lambda t: True),
    ("added:..-1d", lambda t: False),
    ("added:%d" % time.gmtime().tm_year, lambda t: True),
]


@pytest.mark.parametrize("text,keep", CASES, ids=[c[0] for c in CASES])
def test_a_query_finds_what_the_export_filtered_by_hand_holds(tagged, text, keep):
    expected = sorted(t["id"] for t in export(tagged).values() if keep(t))
    assert query_ids(tagged, text) == expected


def test_paths_print_in_the_view_and_nothing_found_is_said(tagged):
    p = run("query", "--db", str(tagged), "genre:soul", "--template", "$genre/$title")
    assert p.stdout.splitlines() == ["Jazz, Soul/Fixture Song.flac"], p.stdout
    p = run("query", "--db", str(tagged), "nothing-has-this")
    assert p.stdout == "" and "no track matches" in p.stderr


def test_library_paths_and_ids_print_the_same_tracks_without_a_view(tagged):
    tracks = export(tagged).values()
    for text, keep in CASES:
        matching = sorted((t["id"], t["backing_path"]) for t in tracks if keep(t))
        ids = run("query", "--db", str(tagged), "--print", "id", "--", text).stdout.split()
        assert [int(i) for i in ids] == [i for i, _ in matching], text
        paths = run("query", "--db", str(tagged), "--print", "library", "--", text).stdout.splitlines()
        assert paths == [p for _, p in matching], text
    p = run("query", "--db", str(tagged), "--print", "id", "--json", "x", check=False)
    assert p.returncode == 2 and "cannot be used with" in p.stderr, p.stderr


@pytest.mark.parametrize("text,at", [('title:"open', 6), ("artist::(", 8), ("year:abc..1990", 5),
                                     ("year:..", 5), ("added:yesterday", 6), (", adele", 0),
                                     ("genre:", 6)])
def test_a_malformed_query_is_a_usage_error_pointing_at_the_character(tagged, text, at):
    p = run("query", "--db", str(tagged), text, check=False)
    assert p.returncode == 2, p.stderr
    assert "at character %d" % (at + 1) in p.stderr, p.stderr
    assert "\n  " + " " * at + "^" in p.stderr, p.stderr


def test_edits_by_query_reach_every_match_in_one_go_and_a_dry_run_writes_nothing(tagged, library):
    before = export(tagged)
    jazz = sorted(t["id"] for t in before.values() if contains("genre", "jazz")(t))
    assert len(jazz) >= 2
    dry = run("tag", "--db", str(tagged), "set", "--query", "genre:jazz", "mood=Blue", "comment=bulk", "--dry-run")
    n = len(jazz)
    assert "would change the tags of %d of %d track(s)" % (n, n) in dry.stderr, dry.stderr
    assert dry.stdout.count('mood: [] -> ["Blue"]') == n, dry.stdout
    assert export(tagged) == before

    run("tag", "--db", str(tagged), "set", "--query", "genre:jazz", "mood=Blue", "comment=bulk")
    after = export(tagged)
    for path, t in after.items():
        assert (t["tags"].get("mood") == ["Blue"]) == (t["id"] in jazz), path
    run("tag", "--db", str(tagged), "rm", "--query", "mood:blue", "comment")
    assert not any("comment" in t["tags"] and t["tags"]["comment"] == ["bulk"] for t in export(tagged).values())

    cover = library / "cover.png"
    run("art", "--db", str(tagged), "set", "--query", "mood:=Blue", str(cover))
    pictured = {t["id"] for t in export(tagged).values() if any(a["picture_type"] == 3 for a in t["art"])}
    assert set(jazz) <= pictured
    dry = run("art", "--db", str(tagged), "rm", "--query", "mood:=Blue", "--all", "--dry-run")
    assert "would remove" in dry.stderr and "of %d track(s)" % n in dry.stderr, dry.stderr
    assert {t["id"] for t in export(tagged).values() if t["art"]} >= set(jazz)

    nothing = run("tag", "--db", str(tagged), "set", "--query", "genre:polka", "mood=x", check=False)
    assert nothing.returncode == 1 and "no track matches" in nothing.stderr
    bad = run("tag", "--db", str(tagged), "set", "--query", "year:..", "mood=x", check=False)
    assert bad.returncode == 2 and "^" in bad.stderr
