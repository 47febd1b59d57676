-- Schema version 7: what a mount reads of each picture, in an index of its
-- own (docs/store.md, "art and track_art").

-- A picture's row sits on a page of its own, between the pages of its
-- bytes, so a mount that read the row of every picture (for its type,
-- size and dimensions) read one scattered page per picture: from a cold
-- disk, 3,400 requests for a store of 20,000 tracks with 2,000 covers.
-- This index holds all it reads, densely, and SQLite keeps it as rows
-- change, whoever writes them.
CREATE INDEX art_meta ON art (sha256, mime, width, height, depth, length(data));
