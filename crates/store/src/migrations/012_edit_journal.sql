-- Schema version 12: the journal of edits made through retagfs
-- (docs/store.md, "The edit journal"): what each edit transaction of
-- `tag`, `art` and `import` changed tracks from, so that `retagfs undo`
-- can put it back. Written by retagfs only; other tools may read it.

CREATE TABLE edits (
    id        INTEGER PRIMARY KEY,
    -- When the edit was committed, in seconds since the epoch.
    at        INTEGER NOT NULL,
    -- The command that made it, as typed (`tag set --query genre:bop genre=Jazz`).
    command   TEXT    NOT NULL,
    tracks    INTEGER NOT NULL DEFAULT 0 CHECK (tracks >= 0),
    -- The edit this one reverted (`retagfs undo`), or NULL.
    undoes    INTEGER,
    -- The change-log entries it wrote: `changes.seq` from first to last.
    first_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL DEFAULT 0
);

-- The tracks each edit touched, and their tags and pictures before it.
CREATE TABLE edit_tracks (
    edit_id  INTEGER NOT NULL REFERENCES edits (id) ON DELETE CASCADE,
    track_id INTEGER NOT NULL,
    PRIMARY KEY (edit_id, track_id)
) WITHOUT ROWID;
CREATE TABLE edit_tags (
    edit_id  INTEGER NOT NULL REFERENCES edits (id) ON DELETE CASCADE,
    track_id INTEGER NOT NULL,
    key      TEXT    NOT NULL,
    position INTEGER NOT NULL,
    value    TEXT    NOT NULL
);
CREATE INDEX edit_tags_of ON edit_tags (edit_id, track_id);
CREATE TABLE edit_art (
    edit_id      INTEGER NOT NULL REFERENCES edits (id) ON DELETE CASCADE,
    track_id     INTEGER NOT NULL,
    position     INTEGER NOT NULL,
    art_sha256   TEXT    NOT NULL,
    picture_type INTEGER NOT NULL,
    description  TEXT    NOT NULL
);
CREATE INDEX edit_art_of ON edit_art (edit_id, track_id);
-- Pictures the journal holds are kept in `art` while it holds them.
CREATE INDEX edit_art_sha ON edit_art (art_sha256);
