-- Schema version 2: structure for synthesizing MP4, Ogg and WAV files.

-- Why a track is served byte-identical even in synthesis mode (fragmented
-- MP4, chained Ogg, RF64 ...), or NULL. Scanner-owned.
ALTER TABLE tracks ADD COLUMN passthrough TEXT;

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

-- Tracks of these formats scanned by version 1 have no parts: serve them
-- unchanged until a scan re-reads their structure.
UPDATE tracks SET passthrough = 'scanned before retagfs synthesized this format: run `retagfs scan` again'
 WHERE format IN ('mp4', 'vorbis', 'opus', 'wav');
