-- Schema version 3: what the last scan saw in each folder.

-- One row per folder the last scan went through, on a local file system
-- whose folders change their ctime whenever an entry is added, removed or
-- renamed. A re-scan lists a folder again when its device, inode, mtime
-- or ctime differ from the row, or when its ctime was within a clock tick
-- of `scanned_ns` (the start of the scan that wrote the row); otherwise it
-- takes the folder's entries from here (and still stats every file: an
-- edit in place changes no folder). `entries` is the encoding given in
-- docs/store.md. A cache owned by the scanner: deleting rows is always
-- safe (those folders are listed again).
CREATE TABLE scanned_dirs (
    path     TEXT    PRIMARY KEY CHECK (substr(path, 1, 1) = '/'),
    device   INTEGER NOT NULL,
    inode    INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    scanned_ns INTEGER NOT NULL,
    skipped  INTEGER NOT NULL CHECK (skipped >= 0),
    entries  BLOB    NOT NULL
);
