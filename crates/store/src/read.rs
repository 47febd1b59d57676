//! What the store holds, read: tracks, their tags, pictures and
//! structure, the change log, what the last scan saw.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::RangeInclusive;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension};

use crate::error::{Result, StoreError};
use crate::model::{
    ArtLink, BackingPart, Fingerprint, Format, PartKind, Stamps, SynthesisRows, TrackBundle, TrackRow,
};
use crate::open::{Store, REPROBE};
use crate::path_table::{KnownStamps, PathTable};
use crate::scanned_dirs::{DirStamp, ScannedDir, ScannedDirs};

/// Backing paths to values, hashed fast: a re-scan looks up every file of
/// the library in one (paths come from the user's own disk, not from an
/// adversary choosing hash collisions).
pub type PathMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

impl Store {
    /// The columns [`track_from_row`] reads, as this store has them: a
    /// store mounted as it is, from before version 9, has no change times,
    /// and before version 10 no remote objects.
    fn track_columns(&self) -> &'static str {
        match self.opened_version {
            13.. => TRACK_COLUMNS,
            11 | 12 => TRACK_COLUMNS_V11,
            10 => TRACK_COLUMNS_V10,
            9 => TRACK_COLUMNS_V9,
            _ => TRACK_COLUMNS_BEFORE_V9,
        }
    }

    /// Whether the store holds any track: a look at the first row, where
    /// `track_count` reads every page of the table (a mount of 100,000
    /// tracks from a cold disk made 2,000 scattered reads to count them).
    pub fn has_tracks(&self) -> Result<bool> {
        Ok(self
            .conn
            .query_row("SELECT EXISTS (SELECT 1 FROM tracks)", [], |r| r.get(0))?)
    }

    pub fn track_count(&self) -> Result<u64> {
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM tracks", [], |r| r.get(0))?;
        Ok(n as u64)
    }

    /// The newest change-log sequence number (0 for an empty log).
    pub fn last_change_seq(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("SELECT coalesce(max(seq), 0) FROM changes", [], |r| r.get(0))?)
    }

    /// The oldest change-log entry still kept, if any.
    pub fn first_change_seq(&self) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row("SELECT min(seq) FROM changes", [], |r| r.get(0))?)
    }

    /// The tracks named by change-log entries after `seq`.
    pub fn tracks_changed_since(&self, seq: i64) -> Result<Vec<i64>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT DISTINCT track_id FROM changes WHERE seq > ?1")?;
        let rows = stmt.query_map([seq], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// SQLite's `data_version`: changes when another connection commits.
    pub fn data_version(&self) -> Result<i64> {
        Ok(self.conn.pragma_query_value(None, "data_version", |r| r.get(0))?)
    }

    /// Runs `f` inside one read transaction, so everything it reads comes
    /// from the same committed state.
    pub fn read_snapshot<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        let snapshot = ReadTransaction::begin(&self.conn)?;
        let out = f(self)?;
        snapshot.end()?;
        Ok(out)
    }

    /// The distinct formats of the tracks in the store.
    pub fn formats(&self) -> Result<Vec<Format>> {
        let mut stmt = self.conn.prepare("SELECT DISTINCT format FROM tracks")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows
            .collect::<rusqlite::Result<Vec<_>>>()?
            .iter()
            .filter_map(|f| f.parse().ok())
            .collect())
    }

    /// Every track, ordered by id.
    pub fn tracks(&self) -> Result<Vec<TrackRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM tracks ORDER BY id",
            self.track_columns()
        ))?;
        let rows = stmt.query_map([], track_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub fn track(&self, id: i64) -> Result<Option<TrackRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM tracks WHERE id = ?1",
            self.track_columns()
        ))?;
        Ok(stmt.query_row([id], track_from_row).optional()?)
    }

    /// Resolves a user's track reference: a numeric id or a backing path.
    pub fn resolve_track(&self, reference: &str) -> Result<TrackRow> {
        if let Ok(id) = reference.parse::<i64>() {
            if let Some(t) = self.track(id)? {
                return Ok(t);
            }
        }
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM tracks WHERE backing_path = ?1",
            self.track_columns()
        ))?;
        // A path as the store has it (an export's) needs no resolving
        // (which reads every symlink along it).
        if let Some(t) = stmt.query_row([reference], track_from_row).optional()? {
            return Ok(t);
        }
        let Ok(path) = std::fs::canonicalize(crate::text_to_path(reference)) else {
            return Err(StoreError::NoSuchTrack(reference.to_string()));
        };
        stmt.query_row([crate::path_to_text(&path)], track_from_row)
            .optional()?
            .ok_or_else(|| StoreError::NoSuchTrack(reference.to_string()))
    }

    /// The tracks whose backing files are under folder `dir` (an absolute
    /// path, as the scan stores them), in id order.
    pub fn tracks_under(&self, dir: &str) -> Result<Vec<TrackRow>> {
        let dir = dir.trim_end_matches('/');
        // The paths under `dir/` sort between `dir/` and `dir0` ('0'
        // follows '/'), a range the unique index on the path answers.
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM tracks WHERE backing_path > ?1 AND backing_path < ?2 ORDER BY id",
            self.track_columns()
        ))?;
        let rows = stmt.query_map([format!("{dir}/"), format!("{dir}0")], track_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Stat stamps of every track by backing path, for re-scan skipping.
    pub fn known_stamps(&self) -> Result<KnownStamps> {
        let mut stmt = self.conn.prepare(&format!(
            // A track the migration to version 2 left without structure,
            // to version 9 without its vendor string, or to version 13
            // without its duration, reports impossible stamps, so the next
            // scan probes it again.
            "SELECT backing_path, id, file_size, \
                 CASE WHEN passthrough = '{REPROBE}' \
                      OR (vendor IS NULL AND format IN ('flac', 'vorbis', 'opus')) \
                      OR duration_ms IS NULL \
                 THEN -1 ELSE mtime_ns END, ctime_ns FROM tracks"
        ))?;
        let count = usize::try_from(self.track_count()?).unwrap_or(0);
        // Paths of a music library run about 100 bytes; the buffer grows
        // past that if it must.
        let mut known = PathTable::with_capacity(count, count * 100);
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let stamps = Stamps {
                size: r.get::<_, i64>(2)? as u64,
                mtime_ns: r.get(3)?,
                ctime_ns: r.get(4)?,
            };
            let id = r.get(1)?;
            // A path garbled by a tool matches no file: its track is gone,
            // and found moved if its file is seen.
            known.push(&text_ref(r, 0, id)?, (id, stamps));
        }
        Ok(KnownStamps(known))
    }

    /// What the last scan saw in each folder, by path. Rows that cannot
    /// be read as such are left out (their folders are listed again).
    pub fn scanned_dirs(&self) -> Result<ScannedDirs> {
        let mut stmt = self.conn.prepare(
            "SELECT path, device, inode, mtime_ns, ctime_ns, scanned_ns, skipped, entries FROM scanned_dirs",
        )?;
        let mut out = ScannedDirs::default();
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let row = (|| -> rusqlite::Result<_> {
                let dir = ScannedDir {
                    stamp: DirStamp {
                        device: r.get::<_, i64>(1)? as u64,
                        inode: r.get::<_, i64>(2)? as u64,
                        mtime_ns: r.get(3)?,
                        ctime_ns: r.get(4)?,
                    },
                    scanned_ns: r.get(5)?,
                    skipped_by_name: r.get::<_, i64>(6)?.max(0) as u64,
                    entries: Cow::Borrowed(r.get_ref(7)?.as_blob()?),
                };
                Ok((r.get_ref(0)?.as_str()?, dir))
            })();
            if let Ok((path, dir)) = row {
                out.push(path, &dir);
            }
        }
        Ok(out)
    }

    /// Content fingerprints of the given tracks (those that have one).
    pub fn fingerprints(&self, ids: &[i64]) -> Result<Vec<(i64, Fingerprint)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT coalesce(fingerprint, legacy_fingerprint), fingerprint IS NULL FROM tracks \
             WHERE id = ?1 AND coalesce(fingerprint, legacy_fingerprint) IS NOT NULL",
        )?;
        let mut out = Vec::new();
        for &id in ids {
            let row: Option<(Vec<u8>, bool)> =
                stmt.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
            let Some((bytes, legacy)) = row else { continue };
            let Ok(bytes) = <[u8; 32]>::try_from(bytes) else {
                continue;
            };
            out.push((
                id,
                if legacy {
                    Fingerprint::Sha256(bytes)
                } else {
                    Fingerprint::Blake3(bytes)
                },
            ));
        }
        Ok(out)
    }

    /// Whether any track still has only the sha256 fingerprint of a store
    /// from before version 5.
    pub fn has_legacy_fingerprints(&self) -> Result<bool> {
        Ok(self.conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM tracks WHERE legacy_fingerprint IS NOT NULL)",
            [],
            |r| r.get(0),
        )?)
    }

    /// Stat stamps of every recorded failure, so unchanged broken files are
    /// not probed again.
    pub fn failure_stamps(&self) -> Result<PathMap<Stamps>> {
        let mut stmt = self
            .conn
            .prepare("SELECT path, file_size, mtime_ns, ctime_ns FROM scan_failures")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                Stamps {
                    size: r.get::<_, i64>(1)? as u64,
                    mtime_ns: r.get(2)?,
                    ctime_ns: r.get(3)?,
                },
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Recorded scan failures: (path, reason).
    pub fn failures(&self) -> Result<Vec<(String, String)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT path, reason FROM scan_failures ORDER BY path")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every track with what its served path and size come from, in id
    /// order: one pass over five queries ordered by track id, merged as
    /// they go (no map of every track's tags is ever built). A picture
    /// link whose art row is missing is left out here; serving the track
    /// reports it ([`Store::art_links`]). Call inside
    /// [`Store::read_snapshot`] for one consistent state.
    pub fn for_each_track(&self, mut f: impl FnMut(TrackBundle)) -> Result<()> {
        let mut tracks = self.conn.prepare(&format!(
            "SELECT {} FROM tracks ORDER BY id",
            self.track_columns()
        ))?;
        let mut tags = self
            .conn
            .prepare("SELECT track_id, key, value FROM tags ORDER BY track_id, key, position")?;
        let mut art = match self.conn.prepare(&every_art_link_query(true)) {
            Ok(statement) => statement,
            // A store whose index a tool dropped loads as before version 7.
            Err(_) => self.conn.prepare(&every_art_link_query(false))?,
        };
        let mut blocks = self.conn.prepare(
            "SELECT track_id, block_type, length(data) FROM flac_blocks ORDER BY track_id, position",
        )?;
        let mut parts = self.conn.prepare(
            "SELECT track_id, kind, offset, length FROM backing_parts ORDER BY track_id, position",
        )?;
        let mut tags = ByTrack::new(&mut tags, tag_after_track_id)?;
        let mut art = ByTrack::new(&mut art, |r, _| art_link_from_row(r, 1))?;
        let mut blocks = ByTrack::new(&mut blocks, |r, _| Ok((r.get(1)?, r.get::<_, i64>(2)? as u64)))?;
        let mut parts = ByTrack::new(&mut parts, part_after_track_id)?;
        let mut rows = tracks.query([])?;
        while let Some(r) = rows.next()? {
            let id: i64 = r.get(0)?;
            // Each query is passed over this track's rows whatever fails.
            let bundle = (
                track_from_row(r),
                tags.take(id)?,
                art.take(id)?,
                blocks.take(id)?,
                parts.take(id)?,
            );
            match bundle {
                (Ok(track), Ok(tags), Ok(art), Ok(flac_block_lens), Ok(parts)) => f(TrackBundle {
                    track,
                    tags,
                    art,
                    flac_block_lens,
                    parts,
                }),
                (track, tags, art, blocks, parts) => {
                    let e = track
                        .err()
                        .or(tags.err())
                        .or(art.err())
                        .or(blocks.err())
                        .or(parts.err());
                    if let Some(e) = e {
                        left_out(id, &e);
                    }
                }
            }
        }
        Ok(())
    }

    /// One track as [`Store::for_each_track`] gives it (its links to art
    /// the art table lacks left out); None if it is gone, or left out
    /// because its rows do not decode.
    pub fn track_bundle(&self, id: i64) -> Result<Option<TrackBundle>> {
        let read = || -> Result<Option<TrackBundle>> {
            let Some(track) = self.track(id)? else {
                return Ok(None);
            };
            let art = self
                .conn
                .prepare_cached(&format!(
                    "SELECT {ART_LINK_COLUMNS} FROM track_art l JOIN art a ON a.sha256 = l.art_sha256 \
                     WHERE l.track_id = +?1 ORDER BY l.position"
                ))?
                .query_map([id], |r| art_link_from_row(r, 1))?
                .collect::<rusqlite::Result<_>>()?;
            Ok(Some(TrackBundle {
                track,
                tags: self.tags(id)?,
                art,
                flac_block_lens: self.flac_block_lengths(id)?,
                parts: self.backing_parts(id)?,
            }))
        };
        match read() {
            Err(StoreError::Sql(e)) if does_not_decode(&e) => {
                left_out(id, &e);
                Ok(None)
            }
            other => other,
        }
    }

    /// What synthesizing a track reads besides its row. Call inside
    /// [`Store::read_snapshot`], with the row, for one consistent state.
    pub fn synthesis_rows(&self, track: &TrackRow) -> Result<SynthesisRows> {
        Ok(SynthesisRows {
            tags: self.tags(track.id)?,
            art: self.art_links(track.id)?,
            flac_blocks: match track.format {
                Format::Flac => self.flac_blocks(track.id)?,
                _ => Vec::new(),
            },
            parts: self.backing_parts(track.id)?,
        })
    }

    /// The tracks with ids in `ids` (those that exist), in id order, each
    /// with its [`SynthesisRows`] if `synthesis`, read with one statement
    /// per table for the whole range instead of one per track: what
    /// preparing the files of an album (scanned together, so neighbouring
    /// ids) reads. A track whose rows fail to read (they do not decode, a
    /// link to missing art) gets the error, the others are read all the
    /// same. Call inside [`Store::read_snapshot`].
    pub fn tracks_for_serving(
        &self,
        ids: RangeInclusive<i64>,
        synthesis: bool,
        mut f: impl FnMut(i64, Result<(TrackRow, Option<SynthesisRows>)>),
    ) -> Result<()> {
        let range = [*ids.start(), *ids.end()];
        let mut tracks = self.conn.prepare_cached(&format!(
            "SELECT {} FROM tracks WHERE id BETWEEN +?1 AND +?2 ORDER BY id",
            self.track_columns()
        ))?;
        let mut rows = tracks.query(range)?;
        if !synthesis {
            while let Some(r) = rows.next()? {
                let id: i64 = r.get(0)?;
                f(id, track_from_row(r).map(|t| (t, None)).map_err(StoreError::from));
            }
            return Ok(());
        }
        let mut tags = self.conn.prepare_cached(
            "SELECT track_id, key, value FROM tags WHERE track_id BETWEEN +?1 AND +?2 \
             ORDER BY track_id, key, position",
        )?;
        // A link whose art row is missing reads as the hash it names: an
        // error for its track.
        let mut art = self.conn.prepare_cached(&format!(
            "SELECT {ART_LINK_COLUMNS}, l.art_sha256 FROM track_art l LEFT JOIN art a ON a.sha256 = l.art_sha256 \
             WHERE l.track_id BETWEEN +?1 AND +?2 ORDER BY l.track_id, l.position"
        ))?;
        let mut blocks = self.conn.prepare_cached(
            "SELECT track_id, block_type, data FROM flac_blocks WHERE track_id BETWEEN +?1 AND +?2 \
             ORDER BY track_id, position",
        )?;
        let mut parts = self.conn.prepare_cached(
            "SELECT track_id, kind, offset, length FROM backing_parts WHERE track_id BETWEEN +?1 AND +?2 \
             ORDER BY track_id, position",
        )?;
        let mut tags = ByTrack::with_params(&mut tags, range, tag_after_track_id)?;
        let mut art = ByTrack::with_params(&mut art, range, |r, _| match r.get::<_, Option<i64>>(1)? {
            Some(_) => art_link_from_row(r, 1).map(Ok),
            None => r.get(10).map(Err),
        })?;
        let mut blocks = ByTrack::with_params(&mut blocks, range, |r, _| Ok((r.get(1)?, r.get(2)?)))?;
        let mut parts = ByTrack::with_params(&mut parts, range, part_after_track_id)?;
        while let Some(r) = rows.next()? {
            let id: i64 = r.get(0)?;
            // Each query is passed over this track's rows whatever fails.
            let found = (
                track_from_row(r),
                tags.take(id)?,
                art.take(id)?,
                blocks.take(id)?,
                parts.take(id)?,
            );
            f(id, serving(id, found).map(|(track, rows)| (track, Some(rows))));
        }
        Ok(())
    }

    // A track's rows are selected with `track_id = +?1`: SQLite (built
    // with STAT4) re-prepares `= ?1 ... ORDER BY` the rest of the index,
    // or `max()` over it, at every run (a third of the mount's time opening
    // new files went there); the unary plus keeps the index and drops the
    // re-prepare. The store's contract tests count re-prepares.

    /// Tags of one track: (key, value) ordered by key, then position.
    pub fn tags(&self, track_id: i64) -> Result<Vec<(String, String)>> {
        tags_of(&self.conn, track_id)
    }

    /// Pictures of one track, in order, without their bytes. A link whose
    /// art row is missing (a tool that deleted art with foreign keys off) is
    /// an error, not a picture silently left out.
    pub fn art_links(&self, track_id: i64) -> Result<Vec<ArtLink>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {ART_LINK_COLUMNS}, l.art_sha256 FROM track_art l LEFT JOIN art a ON a.sha256 = l.art_sha256 \
             WHERE l.track_id = +?1 ORDER BY l.position"
        ))?;
        let mut rows = stmt.query([track_id])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            if r.get::<_, Option<i64>>(1)?.is_none() {
                let sha256 = r.get(10)?;
                return Err(StoreError::MissingArt { track_id, sha256 });
            }
            out.push(art_link_from_row(r, 1)?);
        }
        Ok(out)
    }

    /// FLAC structural blocks of one track, in order.
    pub fn flac_blocks(&self, track_id: i64) -> Result<Vec<(u8, Vec<u8>)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT block_type, data FROM flac_blocks WHERE track_id = +?1 ORDER BY position",
        )?;
        let rows = stmt.query_map([track_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The backing parts of a track, in file order.
    pub fn backing_parts(&self, track_id: i64) -> Result<Vec<BackingPart>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT track_id, kind, offset, length FROM backing_parts WHERE track_id = +?1 ORDER BY position",
        )?;
        let rows = stmt.query_map([track_id], |r| part_from_row(r).map(|(_, p)| p))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// (type, body length) of one track's FLAC blocks.
    pub fn flac_block_lengths(&self, track_id: i64) -> Result<Vec<(u8, u64)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT block_type, length(data) FROM flac_blocks WHERE track_id = +?1 ORDER BY position",
        )?;
        let rows = stmt.query_map([track_id], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Reads up to `buf.len()` bytes of an art image starting at `offset`,
    /// straight from the database page cache (the image is never loaded
    /// whole). Returns the number of bytes read.
    pub fn read_art(&self, art_rowid: i64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let blob = self
            .conn
            .blob_open(rusqlite::MAIN_DB, "art", "data", art_rowid, true)?;
        let len = blob.len() as u64;
        if offset >= len {
            return Ok(0);
        }
        let n = buf.len().min((len - offset) as usize);
        blob.read_at_exact(&mut buf[..n], offset as usize)?;
        Ok(n)
    }

    /// The bytes and mime type of an art image.
    pub fn art_data(&self, sha256: &str) -> Result<(String, Vec<u8>)> {
        self.conn
            .query_row("SELECT mime, data FROM art WHERE sha256 = ?1", [sha256], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?
            .ok_or_else(|| StoreError::NoSuchArt(sha256.to_string()))
    }
}

/// Column `i` of a row of track `track_id`, a text value, as a `String`.
/// Tag values (lyrics of tens of kB among them) are most of what a mount
/// reads, and checking them as UTF-8 one byte at a time showed in a
/// mount's time for such a library: checked with SIMD instead. SQLite
/// keeps whatever bytes a tool wrote: a value that is not UTF-8 is read
/// with U+FFFD in place of its bad bytes, and logged, so that the track is
/// served and the rest of the store still loads.
pub(crate) fn text(r: &rusqlite::Row<'_>, i: usize, track_id: i64) -> rusqlite::Result<String> {
    text_ref(r, i, track_id).map(Cow::into_owned)
}

/// [`text`] borrowed from the row when it is UTF-8.
fn text_ref<'r>(r: &'r rusqlite::Row<'_>, i: usize, track_id: i64) -> rusqlite::Result<Cow<'r, str>> {
    let bytes = match r.get_ref(i)? {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => bytes,
        _ => return r.get(i).map(Cow::Owned),
    };
    if let Ok(text) = simdutf8::basic::from_utf8(bytes) {
        return Ok(Cow::Borrowed(text));
    }
    tracing::warn!(
        "track {track_id}: its {} in the store is not UTF-8: read with U+FFFD in place of the bytes that are not",
        r.as_ref().column_name(i).unwrap_or("text")
    );
    Ok(String::from_utf8_lossy(bytes))
}

/// Whether a value read did not decode: a row a tool wrote past the
/// schema's checks (an unknown format or part kind, a number where text
/// belongs), which affects its track alone.
fn does_not_decode(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
    )
}

/// The rows [`Store::tracks_for_serving`] read for track `id`, or the
/// first error among them.
#[allow(clippy::type_complexity)]
fn serving(
    id: i64,
    found: (
        rusqlite::Result<TrackRow>,
        rusqlite::Result<Vec<(String, String)>>,
        rusqlite::Result<Vec<std::result::Result<ArtLink, String>>>,
        rusqlite::Result<Vec<(u8, Vec<u8>)>>,
        rusqlite::Result<Vec<BackingPart>>,
    ),
) -> Result<(TrackRow, SynthesisRows)> {
    let (track, tags, art, flac_blocks, parts) = found;
    let art = art?
        .into_iter()
        .collect::<std::result::Result<_, _>>()
        .map_err(|sha256| StoreError::MissingArt { track_id: id, sha256 })?;
    Ok((
        track?,
        SynthesisRows {
            tags: tags?,
            art,
            flac_blocks: flac_blocks?,
            parts: parts?,
        },
    ))
}

/// A tag of a row whose first column is its track's id: (key, value).
fn tag_after_track_id(r: &rusqlite::Row<'_>, id: i64) -> rusqlite::Result<(String, String)> {
    Ok((text(r, 1, id)?, text(r, 2, id)?))
}

/// A backing part of a row of `backing_parts` read whole.
fn part_after_track_id(r: &rusqlite::Row<'_>, _: i64) -> rusqlite::Result<BackingPart> {
    part_from_row(r).map(|(_, p)| p)
}

/// A track whose rows do not decode is left out of the view, and said so.
fn left_out(id: i64, e: &rusqlite::Error) {
    tracing::warn!("track {id}: its rows in the store do not decode ({e}): left out of the view");
}

/// A read transaction through cached `BEGIN` and `COMMIT` statements
/// (rusqlite's transactions parse theirs anew each time: 3-4% of resolving
/// a track when a file is opened). Rolled back on drop if not ended.
struct ReadTransaction<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> ReadTransaction<'c> {
    fn begin(conn: &'c Connection) -> Result<Self> {
        conn.prepare_cached("BEGIN")?.execute([])?;
        Ok(ReadTransaction { conn, open: true })
    }

    fn end(mut self) -> Result<()> {
        self.open = false;
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }
}

impl Drop for ReadTransaction<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self
                .conn
                .prepare_cached("ROLLBACK")
                .and_then(|mut s| s.execute([]));
        }
    }
}

/// The rows of a table that holds several rows per track, read in track
/// id order (its first column) beside `tracks`, a track at a time;
/// `decode` reads a row's other columns.
struct ByTrack<'s, T> {
    rows: rusqlite::Rows<'s>,
    decode: fn(&rusqlite::Row<'_>, i64) -> rusqlite::Result<T>,
    next: Option<(i64, rusqlite::Result<T>)>,
}

impl<'s, T> ByTrack<'s, T> {
    fn new(
        stmt: &'s mut rusqlite::Statement<'_>,
        decode: fn(&rusqlite::Row<'_>, i64) -> rusqlite::Result<T>,
    ) -> Result<Self> {
        Self::with_params(stmt, [], decode)
    }

    fn with_params(
        stmt: &'s mut rusqlite::Statement<'_>,
        params: impl rusqlite::Params,
        decode: fn(&rusqlite::Row<'_>, i64) -> rusqlite::Result<T>,
    ) -> Result<Self> {
        let mut by_track = ByTrack {
            rows: stmt.query(params)?,
            decode,
            next: None,
        };
        by_track.advance()?;
        Ok(by_track)
    }

    fn advance(&mut self) -> Result<()> {
        self.next = match self.rows.next()? {
            Some(r) => {
                let id = r.get(0)?;
                Some((id, (self.decode)(r, id)))
            }
            None => None,
        };
        Ok(())
    }

    /// The rows of track `id`, or the first of them that did not decode
    /// (the rest are passed over all the same); rows of lower ids (a track
    /// deleted with foreign keys off) are passed over.
    fn take(&mut self, id: i64) -> Result<rusqlite::Result<Vec<T>>> {
        let mut out = Ok(Vec::new());
        while let Some((track_id, _)) = &self.next {
            if *track_id > id {
                break;
            }
            let (track_id, value) = self.next.take().expect("checked above");
            if track_id == id {
                if let Ok(values) = &mut out {
                    match value {
                        Ok(v) => values.push(v),
                        Err(e) => out = Err(e),
                    }
                }
            }
            self.advance()?;
        }
        Ok(out)
    }
}

/// The columns [`track_from_row`] reads that every store version has.
macro_rules! columns_of_every_version {
    () => {
        "id, backing_path, format, audio_offset, audio_length, file_size, mtime_ns, ctime_ns, \
         content_version, passthrough, "
    };
}

/// The ETag of a remote track's object; local tracks (the CASE tests the
/// path first) cost no lookup of `remote_objects` while a mount loads.
macro_rules! remote_etag {
    () => {
        "CASE WHEN backing_path >= 's3://' AND backing_path < 's3:/0' \
         THEN (SELECT etag FROM remote_objects WHERE track_id = tracks.id) END"
    };
}

const TRACK_COLUMNS: &str = concat!(
    columns_of_every_version!(),
    "changed_at, vendor, ",
    remote_etag!(),
    ", added_at, duration_ms"
);
const TRACK_COLUMNS_V11: &str = concat!(
    columns_of_every_version!(),
    "changed_at, vendor, ",
    remote_etag!(),
    ", added_at, NULL"
);
const TRACK_COLUMNS_V10: &str = concat!(
    columns_of_every_version!(),
    "changed_at, vendor, ",
    remote_etag!(),
    ", scanned_at, NULL"
);
const TRACK_COLUMNS_V9: &str = concat!(
    columns_of_every_version!(),
    "changed_at, vendor, NULL, scanned_at, NULL"
);
const TRACK_COLUMNS_BEFORE_V9: &str = concat!(columns_of_every_version!(), "0, NULL, NULL, scanned_at, NULL");

fn track_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TrackRow> {
    let id = r.get(0)?;
    let format = text(r, 2, id)?;
    let format = format
        .parse::<Format>()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, e.into()))?;
    Ok(TrackRow {
        id,
        backing_path: text(r, 1, id)?,
        format,
        audio_offset: r.get::<_, i64>(3)? as u64,
        audio_length: r.get::<_, i64>(4)? as u64,
        stamps: Stamps {
            size: r.get::<_, i64>(5)? as u64,
            mtime_ns: r.get(6)?,
            ctime_ns: r.get(7)?,
        },
        content_version: r.get(8)?,
        passthrough: match r.get_ref(9)? {
            ValueRef::Null => None,
            _ => Some(text(r, 9, id)?),
        },
        changed_at: r.get(10)?,
        vendor: match r.get_ref(11)? {
            ValueRef::Null => None,
            _ => Some(text(r, 11, id)?),
        },
        remote_etag: r.get(12)?,
        added_at: r.get(13)?,
        // -1: the file does not say.
        duration_ms: r.get::<_, Option<i64>>(14)?.and_then(|ms| u64::try_from(ms).ok()),
    })
}

fn part_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, BackingPart)> {
    let kind: String = r.get(1)?;
    let kind = PartKind::parse(&kind).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            1,
            rusqlite::types::Type::Text,
            format!("unknown part kind {kind:?}").into(),
        )
    })?;
    let offset: i64 = r.get(2)?;
    let length: i64 = r.get(3)?;
    Ok((r.get(0)?, BackingPart::new(kind, offset as u64, length as u64)))
}

const ART_LINK_COLUMNS: &str = "l.track_id, a.rowid, a.sha256, a.mime, a.width, a.height, \
     a.depth, length(a.data), l.picture_type, l.description";

/// Every track's picture links, for [`Store::for_each_track`]: with
/// `indexed`, read from the `art_meta` index alone, never the art rows,
/// which lie one to a page between the pictures' bytes (migrations/007_art_meta_index.sql).
/// Unasked, SQLite would look the rows up through the table's unique index
/// on `sha256`.
fn every_art_link_query(indexed: bool) -> String {
    let index = if indexed { "INDEXED BY art_meta" } else { "" };
    format!(
        "SELECT {ART_LINK_COLUMNS} FROM track_art l JOIN art a {index} \
         ON a.sha256 = l.art_sha256 ORDER BY l.track_id, l.position"
    )
}

/// An [`ArtLink`] from the [`ART_LINK_COLUMNS`] after the first (the
/// track id, column `base - 1`).
fn art_link_from_row(r: &rusqlite::Row<'_>, base: usize) -> rusqlite::Result<ArtLink> {
    let track_id = r.get(base - 1)?;
    Ok(ArtLink {
        art_rowid: r.get(base)?,
        sha256: text(r, base + 1, track_id)?,
        mime: text(r, base + 2, track_id)?,
        width: r.get(base + 3)?,
        height: r.get(base + 4)?,
        depth: r.get(base + 5)?,
        data_len: r.get::<_, i64>(base + 6)? as u64,
        picture_type: r.get(base + 7)?,
        description: text(r, base + 8, track_id)?,
    })
}

/// A track's tags as `conn` sees them (inside a transaction: with its
/// uncommitted edits), ordered by key, then position.
pub fn tags_of(conn: &Connection, track_id: i64) -> Result<Vec<(String, String)>> {
    let mut stmt =
        conn.prepare_cached("SELECT key, value FROM tags WHERE track_id = +?1 ORDER BY key, position")?;
    let rows = stmt.query_map([track_id], |r| Ok((text(r, 0, track_id)?, text(r, 1, track_id)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_reads_picture_links_from_the_index_alone() {
        let dir = tempfile::tempdir().unwrap();
        let db = Store::open(&dir.path().join("s.db")).unwrap();
        let plan: Vec<String> = db
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", every_art_link_query(true)))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(
            plan.iter().any(|step| step.contains("COVERING INDEX art_meta")),
            "{plan:?}"
        );
    }
}
