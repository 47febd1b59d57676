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
-- is the later of its backing file's mtime and `changed_at`, which the
-- trigger below moves to now, and at least one second past the file's
-- previous time, whenever a track is re-versioned: an edit is seen even
-- when it follows the last one within the same second, and a served
-- file's time never goes back (for a backing file touched to an older
-- date, the scanner dates the track past the time it served). 0 until a
-- track's first change in the store. Scanner and triggers only.
ALTER TABLE tracks ADD COLUMN changed_at INTEGER NOT NULL DEFAULT 0;

-- Every trigger that re-versions a track bumps its `content_version`:
-- this one dates that version.
CREATE TRIGGER tracks_changed AFTER UPDATE OF content_version ON tracks BEGIN
    UPDATE tracks
       SET changed_at = max(CAST(strftime('%s', 'now') AS INTEGER),
                            max(NEW.mtime_ns / 1000000000, NEW.changed_at) + 1)
     WHERE id = NEW.id;
END;
