-- Schema version 9: what media software reads of a served file: when it
-- last changed (docs/store.md, "Change times") and the encoder that wrote
-- it.

-- The vendor string of a FLAC, Vorbis or Opus file's comments, served in
-- place of retagfs's own (mediainfo shows it as the writing library); ""
-- for a file without comments. NULL until the file is probed again: the
-- next scan probes such tracks of these formats. Owned by the scanner.
ALTER TABLE tracks ADD COLUMN vendor TEXT;

-- Indexers (MPD, beets, minidlna, Jellyfin, Plex) read a file again only
-- when its mtime changed, and compare whole seconds. A served file's mtime
-- is the later of its backing file's mtime and `changed_at`, which every
-- trigger that re-versions a track moves to now, and at least one second
-- past the file's previous time: an edit is seen even when it follows the
-- last one within the same second, and a served file's time never goes
-- back (a backing file touched to an older date included). 0 until a
-- track's first change in the store. Scanner and triggers only.
ALTER TABLE tracks ADD COLUMN changed_at INTEGER NOT NULL DEFAULT 0;

DROP TRIGGER tracks_audio;
CREATE TRIGGER tracks_audio AFTER UPDATE OF format, audio_offset, audio_length, file_size, mtime_ns, ctime_ns ON tracks BEGIN
    UPDATE tracks SET content_version = content_version + 1,
        changed_at = max(CAST(strftime('%s', 'now') AS INTEGER), max(OLD.mtime_ns / 1000000000, changed_at) + 1)
        WHERE id = NEW.id;
    INSERT INTO changes (track_id, kind) VALUES (NEW.id, 'audio');
END;

DROP TRIGGER tags_insert;
CREATE TRIGGER tags_insert AFTER INSERT ON tags
WHEN EXISTS (SELECT 1 FROM tracks WHERE id = NEW.track_id) BEGIN
    UPDATE tracks SET content_version = content_version + 1,
        changed_at = max(CAST(strftime('%s', 'now') AS INTEGER), max(mtime_ns / 1000000000, changed_at) + 1)
        WHERE id = NEW.track_id;
    INSERT INTO changes (track_id, kind) VALUES (NEW.track_id, 'tags');
END;
DROP TRIGGER tags_update;
CREATE TRIGGER tags_update AFTER UPDATE ON tags BEGIN
    UPDATE tracks SET content_version = content_version + 1,
        changed_at = max(CAST(strftime('%s', 'now') AS INTEGER), max(mtime_ns / 1000000000, changed_at) + 1)
        WHERE id IN (OLD.track_id, NEW.track_id);
    INSERT INTO changes (track_id, kind) VALUES (NEW.track_id, 'tags');
END;
DROP TRIGGER tags_delete;
CREATE TRIGGER tags_delete AFTER DELETE ON tags
WHEN EXISTS (SELECT 1 FROM tracks WHERE id = OLD.track_id) BEGIN
    UPDATE tracks SET content_version = content_version + 1,
        changed_at = max(CAST(strftime('%s', 'now') AS INTEGER), max(mtime_ns / 1000000000, changed_at) + 1)
        WHERE id = OLD.track_id;
    INSERT INTO changes (track_id, kind) VALUES (OLD.track_id, 'tags');
END;

DROP TRIGGER track_art_insert;
CREATE TRIGGER track_art_insert AFTER INSERT ON track_art
WHEN EXISTS (SELECT 1 FROM tracks WHERE id = NEW.track_id) BEGIN
    UPDATE tracks SET content_version = content_version + 1,
        changed_at = max(CAST(strftime('%s', 'now') AS INTEGER), max(mtime_ns / 1000000000, changed_at) + 1)
        WHERE id = NEW.track_id;
    INSERT INTO changes (track_id, kind) VALUES (NEW.track_id, 'art');
END;
DROP TRIGGER track_art_update;
CREATE TRIGGER track_art_update AFTER UPDATE ON track_art BEGIN
    UPDATE tracks SET content_version = content_version + 1,
        changed_at = max(CAST(strftime('%s', 'now') AS INTEGER), max(mtime_ns / 1000000000, changed_at) + 1)
        WHERE id IN (OLD.track_id, NEW.track_id);
    INSERT INTO changes (track_id, kind) VALUES (NEW.track_id, 'art');
END;
DROP TRIGGER track_art_delete;
CREATE TRIGGER track_art_delete AFTER DELETE ON track_art
WHEN EXISTS (SELECT 1 FROM tracks WHERE id = OLD.track_id) BEGIN
    UPDATE tracks SET content_version = content_version + 1,
        changed_at = max(CAST(strftime('%s', 'now') AS INTEGER), max(mtime_ns / 1000000000, changed_at) + 1)
        WHERE id = OLD.track_id;
    INSERT INTO changes (track_id, kind) VALUES (OLD.track_id, 'art');
END;

DROP TRIGGER art_update;
CREATE TRIGGER art_update AFTER UPDATE ON art BEGIN
    UPDATE tracks SET content_version = content_version + 1,
        changed_at = max(CAST(strftime('%s', 'now') AS INTEGER), max(mtime_ns / 1000000000, changed_at) + 1)
        WHERE id IN (SELECT track_id FROM track_art WHERE art_sha256 = NEW.sha256);
    INSERT INTO changes (track_id, kind)
        SELECT track_id, 'art' FROM track_art WHERE art_sha256 = NEW.sha256;
END;
