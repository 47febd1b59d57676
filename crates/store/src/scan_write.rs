//! What a scan writes: tracks probed, moved, removed or refused, and
//! the folders it saw.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Transaction};
use sha2::{Digest, Sha256};

use crate::art_rows::{art_exists, insert_art_as};
use crate::change_times::EditedTracks;
use crate::error::{Result, StoreError};
use crate::model::{Fingerprint, NewArt, ScannedTrack, Stamps};
use crate::read::text;
use crate::scanned_dirs::ScannedDir;

/// Writes what a probe found. With `existing` the row keeps its id (and so
/// its inode); its tags, art and FLAC blocks are replaced by the file's.
pub fn write_scanned(tx: &Transaction<'_>, t: &ScannedTrack, existing: Option<i64>) -> Result<i64> {
    let read = scanned_tags_sha256(t);
    let id = match existing {
        Some(id) => {
            let last_read: Option<Vec<u8>> = tx
                .prepare_cached("SELECT scanned_tags FROM tracks WHERE id = ?1")?
                .query_row([id], |r| r.get(0))?;
            let mut edited = EditedTracks::new();
            edited.note(tx, id)?;
            update_scanned(tx, id, t, &read)?;
            // The file's own tags as last read: its stamps changed for
            // another reason (chmod, touch, a copy), and the store's tags,
            // edits included, stay. Rows from before version 4 (NULL) stay
            // too: losing edits cannot be undone, missing another tagger's
            // change is mended by its next save.
            if last_read.is_some_and(|h| h != read) {
                for table in ["tags", "track_art"] {
                    tx.execute(&format!("DELETE FROM {table} WHERE track_id = ?1"), [id])?;
                }
                insert_file_tags(tx, id, t, StoreArt::Yes)?;
            }
            edited.settle(tx)?;
            id
        }
        None => insert_track(tx, t, &read, StoreArt::Yes)?,
    };
    forget_failure_of(tx, t)?;
    Ok(id)
}

/// Adds a track for a file new to the store, as [`write_scanned`] does,
/// but holds back the pictures the store does not have yet: `held`
/// stores them when the caller has written the rest of its batch.
pub fn add_scanned(tx: &Transaction<'_>, t: &mut ScannedTrack, held: &mut HeldPictures) -> Result<i64> {
    held.take_from(tx, t)?;
    let id = insert_track(tx, t, &scanned_tags_sha256(t), StoreArt::Held)?;
    forget_failure_of(tx, t)?;
    Ok(id)
}

fn forget_failure_of(tx: &Transaction<'_>, t: &ScannedTrack) -> Result<()> {
    tx.prepare_cached("DELETE FROM scan_failures WHERE path = ?1")?
        .execute([&t.backing_path])?;
    Ok(())
}

/// Whether a track's rows store its pictures, or only link to them (the
/// bytes held by a [`HeldPictures`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum StoreArt {
    Yes,
    Held,
}

/// Pictures of new tracks, held back so that a scan's batch stores them
/// after its rows. Written as they came, each picture's pages would lie
/// between the pages the rows before and after it grew the tables by, and
/// a cold mount reads the tables page by page: for 20,000 tracks with
/// 2,000 covers, 2,350 disk requests, against 770 with the pictures of
/// each batch together (docs/benchmarks.md).
#[derive(Default)]
pub struct HeldPictures {
    pictures: Vec<(String, NewArt)>,
    shas: std::collections::HashSet<[u8; 32]>,
    bytes: usize,
}

impl HeldPictures {
    /// Takes the bytes of the track's pictures out of it: those the store
    /// lacks are kept (once each), the rest freed.
    fn take_from(&mut self, tx: &Transaction<'_>, t: &mut ScannedTrack) -> Result<()> {
        for pic in &mut t.pictures {
            let data = std::mem::take(&mut pic.art.data);
            if self.shas.contains(&pic.sha256) {
                continue;
            }
            let sha = hex::encode(pic.sha256);
            if !art_exists(tx, &sha)? {
                self.shas.insert(pic.sha256);
                self.bytes += data.len();
                self.pictures.push((
                    sha,
                    NewArt {
                        data,
                        ..pic.art.clone()
                    },
                ));
            }
        }
        Ok(())
    }

    /// Bytes of the pictures held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Stores the pictures held, in the order they came.
    pub fn store(&mut self, tx: &Transaction<'_>) -> Result<()> {
        for (sha, art) in self.pictures.drain(..) {
            insert_art_as(tx, &art, &sha)?;
        }
        self.shas.clear();
        self.bytes = 0;
        Ok(())
    }
}

/// Adds a track for a file new to the store. Its own rows go in first,
/// then the track row: their change-log triggers find no track and log
/// nothing (schema version 6), and the track's `added` entry stands for
/// them: logging row by row was a large part of a first scan
/// (docs/benchmarks-log.md, "First scans: the change log").
fn insert_track(
    tx: &Transaction<'_>,
    t: &ScannedTrack,
    scanned_tags: &[u8; 32],
    art: StoreArt,
) -> Result<i64> {
    let last: Option<i64> = tx
        .prepare_cached("SELECT max(id) FROM tracks")?
        .query_row([], |r| r.get(0))?;
    // The id SQLite would give the row. A store whose last id is the
    // largest there is (written by hand) takes no new tracks.
    let id = last.unwrap_or(0).checked_add(1).ok_or(StoreError::IdsUsedUp)?;
    insert_structure(tx, id, t)?;
    insert_file_tags(tx, id, t, art)?;
    let columns = [Value::from(id), Value::from(t.backing_path.clone())];
    tx.prepare_cached(
        "INSERT INTO tracks (id, backing_path, format, audio_offset, audio_length, \
         file_size, mtime_ns, ctime_ns, fingerprint, scanned_at, passthrough, scanned_tags, vendor, \
         duration_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )?
    .execute(params_from_iter(
        columns.into_iter().chain(probed_columns(t, scanned_tags)),
    ))?;
    Ok(id)
}

/// What a probe sets in a track's row: `format` to `scanned_tags`, in the
/// order the statements above and below name them.
fn probed_columns(t: &ScannedTrack, scanned_tags: &[u8; 32]) -> [Value; 12] {
    [
        Value::from(t.format.as_str().to_string()),
        Value::from(t.audio_offset as i64),
        Value::from(t.audio_length as i64),
        Value::from(t.stamps.size as i64),
        Value::from(t.stamps.mtime_ns),
        Value::from(t.stamps.ctime_ns),
        Value::from(t.fingerprint.map(|f| f.to_vec())),
        Value::from(now_secs()),
        Value::from(t.passthrough.clone()),
        Value::from(scanned_tags.to_vec()),
        // "" for a file without comments: NULL is a row to probe again.
        Value::from(t.vendor.clone().unwrap_or_default()),
        // -1 for a file that does not say: NULL is a row to probe again.
        Value::from(t.duration_ms.and_then(|ms| i64::try_from(ms).ok()).unwrap_or(-1)),
    ]
}

/// The tags and pictures read from the file, for a track that has none.
fn insert_file_tags(tx: &Transaction<'_>, id: i64, t: &ScannedTrack, art: StoreArt) -> Result<()> {
    insert_tags_of_tagless(tx, id, &t.tags)?;
    for (position, pic) in t.pictures.iter().enumerate() {
        let sha = hex::encode(pic.sha256);
        if art == StoreArt::Yes {
            insert_art_as(tx, &pic.art, &sha)?;
        }
        tx.prepare_cached(
            "INSERT INTO track_art (track_id, position, art_sha256, picture_type, description) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            id,
            position as i64,
            sha,
            pic.picture_type,
            pic.description
        ])?;
    }
    Ok(())
}

/// `tracks.scanned_tags`: sha256 over the tags and pictures read from the
/// file, in file order: per tag `t`, key, NUL, value, NUL; per picture `p`,
/// its type as one byte, description, NUL, the image's sha256 (32 bytes).
pub fn scanned_tags_sha256(t: &ScannedTrack) -> [u8; 32] {
    let mut h = Sha256::new();
    for (key, value) in &t.tags {
        for part in [b"t", key.as_bytes(), b"\0", value.as_bytes(), b"\0"] {
            h.update(part);
        }
    }
    for p in &t.pictures {
        h.update(b"p");
        h.update([p.picture_type]);
        h.update(p.description.as_bytes());
        h.update(b"\0");
        h.update(p.sha256);
    }
    h.finalize().into()
}

/// Writes what the scanner learned about an existing track's file (not
/// its tags or art): its columns, FLAC blocks and backing parts.
fn update_scanned(tx: &Transaction<'_>, id: i64, t: &ScannedTrack, scanned_tags: &[u8; 32]) -> Result<()> {
    tx.prepare_cached(
        "UPDATE tracks SET format = ?2, audio_offset = ?3, audio_length = ?4, \
         file_size = ?5, mtime_ns = ?6, ctime_ns = ?7, fingerprint = ?8, legacy_fingerprint = NULL, \
         scanned_at = ?9, passthrough = ?10, scanned_tags = ?11, vendor = ?12, duration_ms = ?13 \
         WHERE id = ?1",
    )?
    .execute(params_from_iter(
        std::iter::once(Value::from(id)).chain(probed_columns(t, scanned_tags)),
    ))?;
    for table in ["flac_blocks", "backing_parts"] {
        tx.execute(&format!("DELETE FROM {table} WHERE track_id = ?1"), [id])?;
    }
    insert_structure(tx, id, t)
}

/// The FLAC blocks and backing parts of a scanned file.
fn insert_structure(tx: &Transaction<'_>, id: i64, t: &ScannedTrack) -> Result<()> {
    for (position, (block_type, data)) in t.flac_blocks.iter().enumerate() {
        tx.prepare_cached(
            "INSERT INTO flac_blocks (track_id, position, block_type, data) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![id, position as i64, block_type, data])?;
    }
    for (position, part) in t.parts.iter().enumerate() {
        tx.prepare_cached(
            "INSERT INTO backing_parts (track_id, position, kind, offset, length) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            id,
            position as i64,
            part.kind.as_str(),
            part.offset as i64,
            part.length as i64
        ])?;
    }
    Ok(())
}

/// Inserts the tags of a track that has none, in the given order. The
/// positions are counted here: with a subquery on the bound key (as in
/// [`insert_tags`]) SQLite re-prepares the statement at every row.
///
/// The rows go in key order, up to [`TAG_ROWS_PER_INSERT`] per statement.
/// Before schema version 8, `tags` kept whole rows in its key's b-tree
/// (WITHOUT ROWID), and each statement found its first row's place from
/// the root, reading the whole of every row it compared with, long ones
/// (embedded lyrics) from their overflow pages; a statement per few rows
/// reads those fewer times.
fn insert_tags_of_tagless(tx: &Transaction<'_>, id: i64, tags: &[(String, String)]) -> Result<()> {
    let mut positions: HashMap<&str, i64> = HashMap::new();
    let mut rows: Vec<(&str, i64, &str)> = tags
        .iter()
        .map(|(key, value)| {
            let position = positions.entry(key.as_str()).or_insert(0);
            *position += 1;
            (key.as_str(), *position - 1, value.as_str())
        })
        .collect();
    rows.sort_unstable();
    for chunk in rows.chunks(TAG_ROWS_PER_INSERT) {
        let mut stmt = tx.prepare_cached(&INSERT_TAG_ROWS[chunk.len() - 1])?;
        let mut args: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(1 + 3 * chunk.len());
        args.push(&id);
        for (key, position, value) in chunk {
            args.extend([key as &dyn rusqlite::ToSql, position, value]);
        }
        stmt.execute(args.as_slice())?;
    }
    Ok(())
}

/// Tag rows one INSERT takes: one statement (and bound parameters: three a
/// row) cached for each count up to this.
pub(crate) const TAG_ROWS_PER_INSERT: usize = 32;

/// At index n - 1, the INSERT of n tag rows of the track bound as `?1`:
/// made once, not at each track's insert.
static INSERT_TAG_ROWS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    let row = |i: usize| format!("(?1, ?{}, ?{}, ?{})", 3 * i + 2, 3 * i + 3, 3 * i + 4);
    (1..=TAG_ROWS_PER_INSERT)
        .map(|rows| {
            let values: Vec<String> = (0..rows).map(row).collect();
            format!(
                "INSERT INTO tags (track_id, key, position, value) VALUES {}",
                values.join(", ")
            )
        })
        .collect()
});

/// Appends values in the given order, each after the key's existing values.
pub(crate) fn insert_tags(tx: &Transaction<'_>, id: i64, tags: &[(String, String)]) -> Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO tags (track_id, key, position, value) VALUES (?1, ?2, \
         coalesce((SELECT max(position) + 1 FROM tags WHERE track_id = +?1 AND key = +?2), 0), ?3)",
    )?;
    for (key, value) in tags {
        stmt.execute(params![id, key, value])?;
    }
    Ok(())
}

/// Points a track at a new backing path (its file moved), updating what
/// the scanner knows of the file (its tags there may differ, and with them
/// where the audio starts) but keeping the track's id, tags and art.
pub fn move_track(tx: &Transaction<'_>, id: i64, t: &ScannedTrack) -> Result<()> {
    tx.prepare_cached("UPDATE tracks SET backing_path = ?2 WHERE id = ?1")?
        .execute(params![id, t.backing_path])?;
    update_scanned(tx, id, t, &scanned_tags_sha256(t))
}

/// (id, backing path) of the tracks with this content fingerprint.
pub fn tracks_with_fingerprint(
    tx: &Transaction<'_>,
    fingerprint: &Fingerprint,
) -> Result<Vec<(i64, String)>> {
    let (sql, bytes) = match fingerprint {
        Fingerprint::Blake3(f) => ("SELECT id, backing_path FROM tracks WHERE fingerprint = ?1", f),
        Fingerprint::Sha256(f) => (
            "SELECT id, backing_path FROM tracks WHERE legacy_fingerprint = ?1",
            f,
        ),
    };
    let mut stmt = tx.prepare_cached(sql)?;
    let rows = stmt.query_map([&bytes[..]], |r| {
        let id = r.get(0)?;
        Ok((id, text(r, 1, id)?))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Records a file the scanner could not probe.
pub fn record_failure(tx: &Transaction<'_>, path: &str, stamps: Stamps, reason: &str) -> Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO scan_failures (path, reason, file_size, mtime_ns, ctime_ns, failed_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        path,
        reason,
        stamps.size as i64,
        stamps.mtime_ns,
        stamps.ctime_ns,
        now_secs()
    ])?;
    Ok(())
}

/// Removes a track (its tags, art links and blocks go with it).
pub fn remove_track(tx: &Transaction<'_>, id: i64) -> Result<()> {
    tx.prepare_cached("DELETE FROM tracks WHERE id = ?1")?
        .execute([id])?;
    Ok(())
}

/// Forgets a recorded failure (its file is gone).
pub fn remove_failure(tx: &Transaction<'_>, path: &str) -> Result<()> {
    tx.prepare_cached("DELETE FROM scan_failures WHERE path = ?1")?
        .execute([path])?;
    Ok(())
}

/// Drops all but the newest `keep` change-log entries.
pub fn trim_change_log(tx: &Transaction<'_>, keep: i64) -> Result<()> {
    tx.execute(
        "DELETE FROM changes WHERE seq <= (SELECT max(seq) FROM changes) - ?1",
        [keep],
    )?;
    Ok(())
}

/// Records what a scan saw in the folder at `path`.
pub fn save_scanned_dir(tx: &Transaction, path: &str, dir: &ScannedDir<'_>) -> Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO scanned_dirs \
         (path, device, inode, mtime_ns, ctime_ns, scanned_ns, skipped, entries) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        path,
        dir.stamp.device as i64,
        dir.stamp.inode as i64,
        dir.stamp.mtime_ns,
        dir.stamp.ctime_ns,
        dir.scanned_ns,
        dir.skipped_by_name as i64,
        &dir.entries[..]
    ])?;
    Ok(())
}

/// Forgets the folder at `path`: the next scan lists it again.
pub fn forget_scanned_dir(tx: &Transaction, path: &str) -> Result<()> {
    tx.prepare_cached("DELETE FROM scanned_dirs WHERE path = ?1")?
        .execute([path])?;
    Ok(())
}

/// Forgets the folder at `root` and every folder below it: the next scan
/// lists them again.
pub fn forget_scanned_dirs_under(tx: &Transaction, root: &str) -> Result<()> {
    let root = root.trim_end_matches('/');
    // Paths below `root` sort between `root/` and `root0` ('0' follows '/').
    tx.prepare_cached(
        "DELETE FROM scanned_dirs WHERE path = ?1 OR (path >= ?1 || '/' AND path < ?1 || '0')",
    )?
    .execute([root])?;
    Ok(())
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
