-- Schema version 11: when each track entered the store (docs/store.md,
-- "tracks"), which queries find as `added` (`added:-30d..`).

-- Seconds since the epoch; set by the trigger below when a row is
-- inserted, and kept when its file moves. Tracks from before version 11
-- get the time they were last probed, the closest the store knows (or the
-- migration's time for a row with none).
ALTER TABLE tracks ADD COLUMN added_at INTEGER NOT NULL DEFAULT 0;
UPDATE tracks SET added_at = CASE WHEN scanned_at > 0 THEN scanned_at
                                  ELSE CAST(strftime('%s', 'now') AS INTEGER) END;

DROP TRIGGER tracks_added;
CREATE TRIGGER tracks_added AFTER INSERT ON tracks BEGIN
    INSERT INTO changes (track_id, kind) VALUES (NEW.id, 'added');
    UPDATE tracks SET added_at = CAST(strftime('%s', 'now') AS INTEGER)
     WHERE id = NEW.id AND NEW.added_at = 0;
END;
