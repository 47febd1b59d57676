-- retagfs store, the current schema (version 13; docs/store.md is the
-- contract). A new store is made from this file; an older one is brought
-- here by the scripts in migrations/, one per version. A test checks that
-- both ways give the same schema.

-- One row per backing audio file. Scanner-owned: external tools must not
-- write these columns (only read them).
CREATE TABLE tracks (
    id                 INTEGER PRIMARY KEY,
    -- A local file's absolute path, or an object's s3://BUCKET/KEY.
    backing_path       TEXT    NOT NULL UNIQUE CHECK (substr(backing_path, 1, 1) = '/'
                                                      OR substr(backing_path, 1, 5) = 's3://'),
    format             TEXT    NOT NULL CHECK (format IN ('flac', 'mp3', 'mp4', 'vorbis', 'opus', 'wav')),
    audio_offset       INTEGER NOT NULL CHECK (audio_offset >= 0),
    audio_length       INTEGER NOT NULL CHECK (audio_length >= 0),
    file_size          INTEGER NOT NULL CHECK (file_size >= 0),
    mtime_ns           INTEGER NOT NULL,
    ctime_ns           INTEGER NOT NULL,
    -- BLAKE3 over the audio's length, first and last 64 KiB: finds moved files.
    fingerprint        BLOB    CHECK (fingerprint IS NULL OR length(fingerprint) = 32),
    -- Bumped by the triggers below at every change of what the track serves.
    content_version    INTEGER NOT NULL DEFAULT 1 CHECK (content_version >= 1),
    scanned_at         INTEGER NOT NULL,
    -- Why the file is served byte-identical even in synthesis mode, or NULL.
    passthrough        TEXT,
    -- sha256 over the tags and pictures the scanner last read from the file.
    scanned_tags       BLOB    CHECK (scanned_tags IS NULL OR length(scanned_tags) = 32),
    -- The sha256 fingerprint of rows probed before version 5.
    legacy_fingerprint BLOB    CHECK (legacy_fingerprint IS NULL OR length(legacy_fingerprint) = 32),
    -- The vendor string of a FLAC, Vorbis or Opus file's comments ("" for
    -- none; NULL: not probed since version 9, so the next scan probes it).
    vendor             TEXT,
    -- When what the track serves last changed, in seconds (0: not since
    -- the scan). A served file's mtime is the later of this and mtime_ns.
    changed_at         INTEGER NOT NULL DEFAULT 0,
    -- When the track entered the store, in seconds (set on insert, kept
    -- when its file moves).
    added_at           INTEGER NOT NULL DEFAULT 0,
    -- How long it plays, in milliseconds (-1: the file does not say; NULL:
    -- not probed since version 13, so the next scan probes it).
    duration_ms        INTEGER CHECK (duration_ms IS NULL OR duration_ms >= -1),
    CHECK (audio_offset + audio_length <= file_size)
);
CREATE INDEX tracks_fingerprint ON tracks (fingerprint) WHERE fingerprint IS NOT NULL;
CREATE INDEX tracks_legacy_fingerprint ON tracks (legacy_fingerprint) WHERE legacy_fingerprint IS NOT NULL;

-- The version of each remote track's object that the scan read (docs/store.md,
-- "Remote backing files"): reads ask for exactly this version. Scanner-owned.
CREATE TABLE remote_objects (
    track_id INTEGER PRIMARY KEY REFERENCES tracks (id) ON DELETE CASCADE,
    etag     TEXT    NOT NULL CHECK (etag <> '')
);
-- A new version of a track's object re-versions the track, as a rewritten
-- local file does through its stamps (an object overwritten within the
-- same second with as many bytes has the same ones).
CREATE TRIGGER remote_objects_version AFTER UPDATE OF etag ON remote_objects BEGIN
    UPDATE tracks SET content_version = content_version + 1 WHERE id = NEW.track_id;
    INSERT INTO changes (track_id, kind) VALUES (NEW.track_id, 'audio');
END;

-- Tags: multi-valued and ordered. Editable by external tools.
CREATE TABLE tags (
    track_id INTEGER NOT NULL REFERENCES tracks (id) ON DELETE CASCADE,
    key      TEXT    NOT NULL CHECK (key <> '' AND key = lower(key) AND instr(key, '=') = 0
                                     AND key NOT GLOB '*[' || char(1) || '-' || char(31) || ']*'),
    position INTEGER NOT NULL CHECK (position >= 0),
    value    TEXT    NOT NULL,
    PRIMARY KEY (track_id, key, position)
);

-- Art: content-addressed images, stored once however many tracks use them.
CREATE TABLE art (
    sha256 TEXT    NOT NULL UNIQUE CHECK (length(sha256) = 64 AND sha256 NOT GLOB '*[^0-9a-f]*'),
    mime   TEXT    NOT NULL CHECK (mime <> ''),
    width  INTEGER NOT NULL DEFAULT 0 CHECK (width >= 0),
    height INTEGER NOT NULL DEFAULT 0 CHECK (height >= 0),
    depth  INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0),
    data   BLOB    NOT NULL CHECK (length(data) > 0)
);
-- What a mount reads of each picture, densely (not one page per picture).
CREATE INDEX art_meta ON art (sha256, mime, width, height, depth, length(data));

-- Which pictures a track carries, in order. Editable by external tools.
CREATE TABLE track_art (
    track_id     INTEGER NOT NULL REFERENCES tracks (id) ON DELETE CASCADE,
    position     INTEGER NOT NULL CHECK (position >= 0),
    art_sha256   TEXT    NOT NULL REFERENCES art (sha256),
    picture_type INTEGER NOT NULL CHECK (picture_type BETWEEN 0 AND 20),
    description  TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (track_id, position)
) WITHOUT ROWID;
CREATE INDEX track_art_sha ON track_art (art_sha256);

-- FLAC structural blocks kept verbatim (STREAMINFO=0, APPLICATION=2,
-- SEEKTABLE=3, CUESHEET=5). Scanner-owned.
CREATE TABLE flac_blocks (
    track_id   INTEGER NOT NULL REFERENCES tracks (id) ON DELETE CASCADE,
    position   INTEGER NOT NULL CHECK (position >= 0),
    block_type INTEGER NOT NULL CHECK (block_type IN (0, 2, 3, 5)),
    data       BLOB    NOT NULL CHECK (length(data) < 16777216),
    PRIMARY KEY (track_id, position)
);

-- Byte ranges of the backing file that synthesis reuses or replaces, in
-- file order. The meaning of `kind` depends on the format (docs/store.md).
-- Scanner-owned.
CREATE TABLE backing_parts (
    track_id INTEGER NOT NULL REFERENCES tracks (id) ON DELETE CASCADE,
    position INTEGER NOT NULL CHECK (position >= 0),
    kind     TEXT    NOT NULL CHECK (kind IN ('chunk', 'data', 'page', 'packet', 'atom', 'moov',
                                              'ilst', 'ilst_in_new_meta', 'ilst_in_new_udta')),
    offset   INTEGER NOT NULL CHECK (offset >= 0),
    length   INTEGER NOT NULL CHECK (length >= 0),
    PRIMARY KEY (track_id, position)
) WITHOUT ROWID;

-- Files the scanner could not probe, with the reason. Scanner-owned.
CREATE TABLE scan_failures (
    path      TEXT    PRIMARY KEY,
    reason    TEXT    NOT NULL,
    file_size INTEGER NOT NULL,
    mtime_ns  INTEGER NOT NULL,
    ctime_ns  INTEGER NOT NULL,
    failed_at INTEGER NOT NULL
);

-- What the last scan saw in each folder (docs/store.md, "scanned_dirs").
-- A cache owned by the scanner: deleting rows is always safe.
CREATE TABLE scanned_dirs (
    path       TEXT    PRIMARY KEY CHECK (substr(path, 1, 1) = '/'),
    device     INTEGER NOT NULL,
    inode      INTEGER NOT NULL,
    mtime_ns   INTEGER NOT NULL,
    ctime_ns   INTEGER NOT NULL,
    scanned_ns INTEGER NOT NULL,
    skipped    INTEGER NOT NULL CHECK (skipped >= 0),
    entries    BLOB    NOT NULL
);

-- Append-only change log filled by the triggers below: every edit of a
-- track's tags, art links or scanner data appends (track_id, kind).
CREATE TABLE changes (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    track_id INTEGER NOT NULL,
    kind     TEXT    NOT NULL CHECK (kind IN ('added', 'tags', 'art', 'audio', 'moved', 'removed'))
);

CREATE TRIGGER tracks_added AFTER INSERT ON tracks BEGIN
    INSERT INTO changes (track_id, kind) VALUES (NEW.id, 'added');
    UPDATE tracks SET added_at = CAST(strftime('%s', 'now') AS INTEGER)
     WHERE id = NEW.id AND NEW.added_at = 0;
END;
CREATE TRIGGER tracks_audio AFTER UPDATE OF format, audio_offset, audio_length, file_size, mtime_ns, ctime_ns ON tracks BEGIN
    UPDATE tracks SET content_version = content_version + 1 WHERE id = NEW.id;
    INSERT INTO changes (track_id, kind) VALUES (NEW.id, 'audio');
END;
CREATE TRIGGER tracks_moved AFTER UPDATE OF backing_path ON tracks BEGIN
    INSERT INTO changes (track_id, kind) VALUES (NEW.id, 'moved');
END;
CREATE TRIGGER tracks_removed AFTER DELETE ON tracks BEGIN
    INSERT INTO changes (track_id, kind) VALUES (OLD.id, 'removed');
END;
-- Dates each new version: now, or a second past the served file's
-- previous time (docs/store.md, "Change times").
CREATE TRIGGER tracks_changed AFTER UPDATE OF content_version ON tracks BEGIN
    UPDATE tracks
       SET changed_at = max(CAST(strftime('%s', 'now') AS INTEGER),
                            max(NEW.mtime_ns / 1000000000, NEW.changed_at) + 1)
     WHERE id = NEW.id;
END;

-- The scanner writes a new track's tags and picture links before the track
-- row, in the same transaction: these triggers then find no track, and
-- its `added` entry stands for everything it was created with.
CREATE TRIGGER tags_insert AFTER INSERT ON tags
WHEN EXISTS (SELECT 1 FROM tracks WHERE id = NEW.track_id) BEGIN
    UPDATE tracks SET content_version = content_version + 1 WHERE id = NEW.track_id;
    INSERT INTO changes (track_id, kind) VALUES (NEW.track_id, 'tags');
END;
CREATE TRIGGER tags_update AFTER UPDATE ON tags BEGIN
    UPDATE tracks SET content_version = content_version + 1 WHERE id IN (OLD.track_id, NEW.track_id);
    INSERT INTO changes (track_id, kind) VALUES (NEW.track_id, 'tags');
END;
CREATE TRIGGER tags_delete AFTER DELETE ON tags
WHEN EXISTS (SELECT 1 FROM tracks WHERE id = OLD.track_id) BEGIN
    UPDATE tracks SET content_version = content_version + 1 WHERE id = OLD.track_id;
    INSERT INTO changes (track_id, kind) VALUES (OLD.track_id, 'tags');
END;

CREATE TRIGGER track_art_insert AFTER INSERT ON track_art
WHEN EXISTS (SELECT 1 FROM tracks WHERE id = NEW.track_id) BEGIN
    UPDATE tracks SET content_version = content_version + 1 WHERE id = NEW.track_id;
    INSERT INTO changes (track_id, kind) VALUES (NEW.track_id, 'art');
END;
CREATE TRIGGER track_art_update AFTER UPDATE ON track_art BEGIN
    UPDATE tracks SET content_version = content_version + 1 WHERE id IN (OLD.track_id, NEW.track_id);
    INSERT INTO changes (track_id, kind) VALUES (NEW.track_id, 'art');
END;
CREATE TRIGGER track_art_delete AFTER DELETE ON track_art
WHEN EXISTS (SELECT 1 FROM tracks WHERE id = OLD.track_id) BEGIN
    UPDATE tracks SET content_version = content_version + 1 WHERE id = OLD.track_id;
    INSERT INTO changes (track_id, kind) VALUES (OLD.track_id, 'art');
END;

-- Art rows are immutable by content address; replacing the bytes of a
-- sha256 still re-versions every track that shows it.
CREATE TRIGGER art_update AFTER UPDATE ON art BEGIN
    UPDATE tracks SET content_version = content_version + 1
        WHERE id IN (SELECT track_id FROM track_art WHERE art_sha256 = NEW.sha256);
    INSERT INTO changes (track_id, kind)
        SELECT track_id, 'art' FROM track_art WHERE art_sha256 = NEW.sha256;
END;

-- The journal of edits made through retagfs (docs/store.md, "The edit
-- journal"): what `retagfs undo` puts back. Written by retagfs only.
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
