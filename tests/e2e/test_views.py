"""End-to-end: several views in one mount from the configuration file's
[[view]] tables, one filtered by a query, one fanned out over a
multi-valued field. Each view's tree is what its template and query say,
computed here from `export`; a track in several places is one inode with a
link count; a retag moves a track between views live. These run once."""

import os

import pytest

from conftest import run
from test_live import export, wait_for
from under_load import files_under

pytestmark = pytest.mark.once

CONFIG = '''
[[view]]
name = "All"
template = "$format/$title"

[[view]]
name = "Jazz"
template = "$title"
query = "genre:jazz"

[[view]]
name = "By genre"
template = "$genre/$title"
fallback = ["genre=No Genre"]

[[view]]
name = "Genres"
template = "${genre*}/$title"
fallback = ["genre=No Genre"]
'''


@pytest.fixture
def viewed(tmp_path, store, library):
    """The store with a title per track (T<id>) and two genres set, and the
    configuration file."""
    tracks = export(store)
    for t in tracks.values():
        run("tag", "--db", str(store), "set", str(t["id"]), "title=T%d" % t["id"], "genre=")
    run("tag", "--db", str(store), "set", str(tracks[str(library / "tagged.flac")]["id"]), "genre=Jazz")
    run("tag", "--db", str(store), "add", str(tracks[str(library / "tagged.flac")]["id"]), "genre=Soul")
    run("tag", "--db", str(store), "set", str(tracks[str(library / "tagged.mp3")]["id"]), "genre=Rock")
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    return store, config


def expected(tracks):
    """Every view's files, from the export alone, with the cover of each
    folder of a track with a picture (views turn covers on; the fixtures'
    one picture is a PNG, carried by the two FLACs)."""
    out = set()
    for t in tracks.values():
        name = "T%d%s" % (t["id"], os.path.splitext(t["backing_path"])[1])
        genres = [g for g in t["tags"].get("genre", []) if g]
        places = ["All/%s/%s" % (t["format"], name)]
        if any("jazz" in g.lower() for g in genres):
            places.append("Jazz/" + name)
        places.append("By genre/%s/%s" % (", ".join(genres) or "No Genre", name))
        places.extend("Genres/%s/%s" % (g, name) for g in genres or ["No Genre"])
        out.update(places)
        if t["art"]:
            assert [a["mime"] for a in t["art"]] == ["image/png"], t["art"]
            out.update(os.path.join(os.path.dirname(p), "cover.png") for p in places)
    return out


def test_each_view_is_its_template_and_query_and_a_track_is_one_inode(viewed, mount):
    store, config = viewed
    m = mount(store, "--config", str(config))
    assert sorted(os.listdir(m.mnt)) == ["All", "By genre", "Genres", "Jazz"]
    tracks = export(store)
    assert set(files_under(m.mnt)) == expected(tracks)
    jazz = next(t for t in tracks.values() if t["tags"].get("genre") == ["Jazz", "Soul"])
    name = "T%d.flac" % jazz["id"]
    places = [m.mnt / "All" / "flac" / name, m.mnt / "Jazz" / name, m.mnt / "By genre" / "Jazz, Soul" / name,
              m.mnt / "Genres" / "Jazz" / name, m.mnt / "Genres" / "Soul" / name]
    stats = [os.stat(p) for p in places]
    assert len({s.st_ino for s in stats}) == 1, "one file wherever it appears"
    assert all(s.st_nlink == 5 for s in stats), [s.st_nlink for s in stats]
    assert len({p.read_bytes() for p in places}) == 1
    other = os.stat(m.mnt / "All" / "flac" / ("T%d.flac" % min(t["id"] for t in tracks.values()
                                                               if t["format"] == "flac" and t != jazz)))
    assert other.st_nlink == 3


def test_a_retag_moves_a_track_between_views_at_once(viewed, mount, library):
    store, config = viewed
    m = mount(store, "--config", str(config))
    rock = export(store)[str(library / "tagged.mp3")]
    name = "T%d.mp3" % rock["id"]
    assert (m.mnt / "By genre" / "Rock" / name).exists() and not (m.mnt / "Jazz" / name).exists()
    run("tag", "--db", str(store), "set", str(rock["id"]), "genre=Jazz")
    wait_for(lambda: (m.mnt / "Jazz" / name).exists() and (m.mnt / "Genres" / "Jazz" / name).exists())
    assert not (m.mnt / "By genre" / "Rock").exists(), "a folder left empty goes"
    assert not (m.mnt / "Genres" / "Rock").exists()
    assert set(files_under(m.mnt)) == expected(export(store))
    assert os.stat(m.mnt / "Jazz" / name).st_nlink == 4


def test_a_template_given_above_the_file_lays_out_one_view(viewed, mount):
    store, config = viewed
    tracks = export(store)
    one_view = {"T%d%s" % (t["id"], os.path.splitext(t["backing_path"])[1]) for t in tracks.values()}
    m = mount(store, "--config", str(config), "--template", "$title")
    assert set(os.listdir(m.mnt)) == one_view, "the flag's template, not the file's views"
    p = run("query", "--db", str(store), "--config", str(config), "--print", "view", "",
            env={**os.environ, "RETAGFS_TEMPLATE": "$title"})
    assert set(p.stdout.split()) == one_view, "its variable too"
    p = run("query", "--db", str(store), "--config", str(config), "--print", "view", "")
    assert all(line.split("/")[0] in ("All", "Jazz", "By genre", "Genres") for line in p.stdout.splitlines())
