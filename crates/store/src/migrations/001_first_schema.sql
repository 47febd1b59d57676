-- retagfs store, schema version 1. Documented in docs/store.md.

-- One row per backing audio file. Scanner-owned: external tools must not
-- write these columns (only read them).
CREATE TABLE tracks (
    id              INTEGER PRIMARY KEY,
    backing_path    TEXT    NOT NULL UNIQUE CHECK (substr(backing_path, 1, 1) = '/'),
    format          TEXT    NOT NULL CHECK (format IN ('flac', 'mp3', 'mp4', 'vorbis', 'opus', 'wav')),
    audio_offset    INTEGER NOT NULL CHECK (audio_offset >= 0),
    audio_length    INTEGER NOT NULL CHECK (audio_length >= 0),
    file_size       INTEGER NOT NULL CHECK (file_size >= 0),
    mtime_ns        INTEGER NOT NULL,
    ctime_ns        INTEGER NOT NULL,
    fingerprint     BLOB    CHECK (fingerprint IS NULL OR length(fingerprint) = 32),
    content_version INTEGER NOT NULL DEFAULT 1 CHECK (content_version >= 1),
    scanned_at      INTEGER NOT NULL,
    CHECK (audio_offset + audio_length <= file_size)
);
CREATE INDEX tracks_fingerprint ON tracks (fingerprint) WHERE fingerprint IS NOT NULL;

-- Tags: multi-valued and ordered. Editable by external tools.
CREATE TABLE tags (
    track_id INTEGER NOT NULL REFERENCES tracks (id) ON DELETE CASCADE,
    key      TEXT    NOT NULL CHECK (key <> '' AND key = lower(key) AND instr(key, '=') = 0
                                     AND key NOT GLOB '*[' || char(1) || '-' || char(31) || ']*'),
    position INTEGER NOT NULL CHECK (position >= 0),
    value    TEXT    NOT NULL,
    PRIMARY KEY (track_id, key, position)
) WITHOUT ROWID;

-- Art: content-addressed images, stored once however many tracks use them.
CREATE TABLE art (
    sha256 TEXT    NOT NULL UNIQUE CHECK (length(sha256) = 64 AND sha256 NOT GLOB '*[^0-9a-f]*'),
    mime   TEXT    NOT NULL CHECK (mime <> ''),
    width  INTEGER NOT NULL DEFAULT 0 CHECK (width >= 0),
    height INTEGER NOT NULL DEFAULT 0 CHECK (height >= 0),
    depth  INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0),
    data   BLOB    NOT NULL CHECK (length(data) > 0)
);

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

-- Append-only change log filled by the triggers below: every edit of a
-- track's tags, art links or scanner data appends (track_id, kind).
CREATE TABLE changes (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    track_id INTEGER NOT NULL,
    kind     TEXT    NOT NULL CHECK (kind IN ('added', 'tags', 'art', 'audio', 'moved', 'removed'))
);

CREATE TRIGGER tracks_added AFTER INSERT ON tracks BEGIN
    INSERT INTO changes (track_id, kind) VALUES (NEW.id, 'added');
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

CREATE TRIGGER tags_insert AFTER INSERT ON tags BEGIN
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

CREATE TRIGGER track_art_insert AFTER INSERT ON track_art BEGIN
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
