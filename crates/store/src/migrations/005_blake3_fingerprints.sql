-- Schema version 5: content fingerprints are BLAKE3 (docs/store.md).

-- The sha256 fingerprints of rows probed before version 5. A new file is
-- matched against them (its sha256 is computed only while such a track's
-- file is gone) until the track is probed again, which writes its BLAKE3
-- fingerprint and clears this one. Owned by the scanner.
ALTER TABLE tracks ADD COLUMN legacy_fingerprint BLOB
    CHECK (legacy_fingerprint IS NULL OR length(legacy_fingerprint) = 32);
UPDATE tracks SET legacy_fingerprint = fingerprint, fingerprint = NULL WHERE fingerprint IS NOT NULL;
CREATE INDEX tracks_legacy_fingerprint ON tracks (legacy_fingerprint) WHERE legacy_fingerprint IS NOT NULL;
