"""End-to-end: `retagfs undo` reverts the last edit made through retagfs,
of every kind, and an undo is undone by the next; an undo that cannot be
made changes nothing; raw-SQL edits are listed but not undone. Nothing
here mounts: these run once."""

import json
import os
import sqlite3

import pytest

from conftest import run
from test_live import export

pytestmark = pytest.mark.once


def state(db):
    return {p: (t["tags"], t["art"]) for p, t in export(db).items()}


def undo(db, *extra, check=True):
    return run("undo", "--db", str(db), *extra, check=check)


def edits(db):
    return json.loads(undo(db, "--list", "--json").stdout)


@pytest.mark.parametrize("edit", [
    ["tag", "set", "ID", "title=Changed", "genre=A", "genre=B"],
    ["tag", "add", "ID", "genre=Added"],
    ["tag", "rm", "ID", "genre"],
    ["art", "set", "ID", "COVER", "--type", "back"],
    ["art", "rm", "ID", "--all"],
    ["tag", "set", "--query", "album:fixture", "comment=bulk"],
    ["art", "rm", "--query", "format:flac", "--all"],
    ["import", "JSON"],
])
def test_each_kind_of_edit_is_undone_and_the_undo_redone(tmp_path, store, library, edit):
    flac = export(store)[str(library / "tagged.flac")]
    changes = tmp_path / "changes.json"
    changes.write_text(json.dumps([{"id": flac["id"], "tags": {"title": "Imported", "mood": None}}]))
    args = [{"ID": str(flac["id"]), "COVER": str(library / "cover.png"), "JSON": str(changes)}.get(a, a)
            for a in edit]
    before = state(store)
    run(*args[:1], "--db", str(store), *args[1:])
    after = state(store)
    assert after != before, "the edit changed nothing"
    undone = undo(store)
    assert "undid #" in undone.stderr
    assert state(store) == before
    undo(store)
    assert state(store) == after, "a second undo redoes the edit"
    listed = edits(store)["edits"]
    assert [e["undoes"] for e in listed[:2]] == [listed[1]["id"], listed[2]["id"]]


def test_an_undo_that_cannot_be_made_changes_nothing_and_raw_sql_is_listed_not_undone(tmp_path, store, library):
    assert undo(store, check=False).returncode == 1, "nothing to undo yet"
    run("tag", "--db", str(store), "set", "--query", "album:fixture", "comment=before the removal")
    # A track the edit changed leaves the store: the undo is refused whole.
    os.remove(library / "tagged.mp3")
    run("scan", str(library), "--db", str(store), "--prune")
    before = state(store)
    refused = undo(store, check=False)
    assert refused.returncode == 1 and "no longer in the store" in refused.stderr, refused.stderr
    assert "nothing was changed" in refused.stderr
    assert state(store) == before

    conn = sqlite3.connect(store)
    conn.execute("INSERT INTO tags (track_id, key, position, value) "
                 "SELECT id, 'mood', 0, 'raw' FROM tracks LIMIT 2")
    conn.commit()
    conn.close()
    listed = edits(store)
    assert listed["not_undoable"] == {"changes": 2, "tracks": 2}
    text = undo(store, "--list").stdout
    assert "cannot be undone" in text and "comment=before the removal" in text
