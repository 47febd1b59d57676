-- Schema version 8: `tags` and `flac_blocks` are rowid tables (docs/store.md,
-- "Versioning"). Same columns, constraints, keys and triggers as before.

-- A WITHOUT ROWID table keeps whole rows in the b-tree of its key,
-- interior pages included, and SQLite reads the whole of every row it
-- compares a key with. A row longer than about 1 kB (lyrics, a long
-- comment, a seek table) spans overflow pages, read again at every
-- comparison: in a library where a third of the Ogg tracks carried 76 kB
-- of lyrics, finding one track's tags took 62-75 us against 5 us. A rowid
-- table keeps the key in an index of its own, and a long row is read only
-- when its own values are.

CREATE TABLE tags_v8 (
    track_id INTEGER NOT NULL REFERENCES tracks (id) ON DELETE CASCADE,
    key      TEXT    NOT NULL CHECK (key <> '' AND key = lower(key) AND instr(key, '=') = 0
                                     AND key NOT GLOB '*[' || char(1) || '-' || char(31) || ']*'),
    position INTEGER NOT NULL CHECK (position >= 0),
    value    TEXT    NOT NULL,
    PRIMARY KEY (track_id, key, position)
);
-- Rows of tracks that no longer exist (written with foreign keys off) are
-- invisible to retagfs and are left behind.
INSERT INTO tags_v8 (track_id, key, position, value)
    SELECT track_id, key, position, value FROM tags
    WHERE track_id IN (SELECT id FROM tracks)
    ORDER BY track_id, key, position;
-- Dropping the table drops its triggers; they are made again below.
DROP TABLE tags;
ALTER TABLE tags_v8 RENAME TO tags;

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

CREATE TABLE flac_blocks_v8 (
    track_id   INTEGER NOT NULL REFERENCES tracks (id) ON DELETE CASCADE,
    position   INTEGER NOT NULL CHECK (position >= 0),
    block_type INTEGER NOT NULL CHECK (block_type IN (0, 2, 3, 5)),
    data       BLOB    NOT NULL CHECK (length(data) < 16777216),
    PRIMARY KEY (track_id, position)
);
INSERT INTO flac_blocks_v8 (track_id, position, block_type, data)
    SELECT track_id, position, block_type, data FROM flac_blocks
    WHERE track_id IN (SELECT id FROM tracks)
    ORDER BY track_id, position;
DROP TABLE flac_blocks;
ALTER TABLE flac_blocks_v8 RENAME TO flac_blocks;
