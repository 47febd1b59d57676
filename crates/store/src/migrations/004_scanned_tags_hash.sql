-- Schema version 4: what the scanner last read of each file's own tags.

-- sha256 over the tags and pictures the scanner last read from the file
-- (docs/store.md gives the encoding), NULL for rows scanned before version
-- 4. When a re-scan finds a file's stamps changed, the store's tags and art
-- (and any edits made to them) are kept if the file's own tags still hash
-- the same: a chmod, a touch or a copy that kept the bytes is no rewrite.
-- Owned by the scanner.
ALTER TABLE tracks ADD COLUMN scanned_tags BLOB
    CHECK (scanned_tags IS NULL OR length(scanned_tags) = 32);
