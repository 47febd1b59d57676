-- Schema version 13: how long each track plays, for playlists' #EXTINF
-- lines (docs/store.md, "tracks"). Milliseconds; -1 when the file does
-- not say; NULL until the file is probed again: the next scan probes every
-- track without one. Owned by the scanner.
ALTER TABLE tracks ADD COLUMN duration_ms INTEGER CHECK (duration_ms IS NULL OR duration_ms >= -1);
