-- Schema version 10: backing files in S3-compatible object stores
-- (docs/store.md, "Remote backing files"). A track's `backing_path` may be
-- `s3://BUCKET/KEY`, and `remote_objects` keeps the version of the object
-- the scan read. Local tracks are unchanged.

-- SQLite cannot change a CHECK constraint in place: `tracks` is rebuilt
-- with the same columns, values, ids, indexes and triggers.
CREATE TABLE tracks_v10 (
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
    CHECK (audio_offset + audio_length <= file_size)
);
INSERT INTO tracks_v10 (id, backing_path, format, audio_offset, audio_length, file_size, mtime_ns, ctime_ns, fingerprint, content_version, scanned_at, passthrough, scanned_tags, legacy_fingerprint, vendor, changed_at)
    SELECT id, backing_path, format, audio_offset, audio_length, file_size, mtime_ns, ctime_ns, fingerprint, content_version, scanned_at, passthrough, scanned_tags, legacy_fingerprint, vendor, changed_at FROM tracks ORDER BY id;
-- Dropping the table drops its indexes and triggers; they are made again below.
DROP TABLE tracks;
-- The triggers of other tables name `tracks`, which is missing until the
-- rename: the legacy rename leaves them alone instead of refusing.
PRAGMA legacy_alter_table = ON;
ALTER TABLE tracks_v10 RENAME TO tracks;
PRAGMA legacy_alter_table = OFF;
CREATE INDEX tracks_fingerprint ON tracks (fingerprint) WHERE fingerprint IS NOT NULL;
CREATE INDEX tracks_legacy_fingerprint ON tracks (legacy_fingerprint) WHERE legacy_fingerprint IS NOT NULL;

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
CREATE TRIGGER tracks_changed AFTER UPDATE OF content_version ON tracks BEGIN
    UPDATE tracks
       SET changed_at = max(CAST(strftime('%s', 'now') AS INTEGER),
                            max(NEW.mtime_ns / 1000000000, NEW.changed_at) + 1)
     WHERE id = NEW.id;
END;
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
