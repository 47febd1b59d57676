//! `retagfs tag` and `retagfs art`: edits through the store's contract.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{bail, Context};
use retagfs_formats::{image_info, keys};
use retagfs_fuse::mounted::{self, ServedFile};
use retagfs_store::{self as store, NewArt, TrackRow};

use crate::args::{ArtAction, ArtArgs, TagAction, TagArgs};
use crate::UsageError;

/// Picture type names (ID3/FLAC numbering).
const PICTURE_TYPES: &[(&str, u8)] = &[
    ("other", 0),
    ("icon", 1),
    ("other-icon", 2),
    ("front", 3),
    ("back", 4),
    ("leaflet", 5),
    ("media", 6),
    ("lead-artist", 7),
    ("artist", 8),
    ("conductor", 9),
    ("band", 10),
    ("composer", 11),
    ("lyricist", 12),
    ("recording-location", 13),
    ("during-recording", 14),
    ("during-performance", 15),
    ("screen-capture", 16),
    ("fish", 17),
    ("illustration", 18),
    ("band-logo", 19),
    ("publisher-logo", 20),
];

fn picture_type(s: &str) -> Result<u8, UsageError> {
    if let Ok(n) = s.parse::<u8>() {
        if n <= 20 {
            return Ok(n);
        }
    }
    PICTURE_TYPES
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(s))
        .map(|(_, n)| *n)
        .ok_or_else(|| {
            UsageError(format!(
                "unknown picture type {s:?}: use front, back, media, artist, other or 0-20"
            ))
        })
}

pub(crate) fn key(raw: &str) -> Result<String, UsageError> {
    keys::canonical_key(raw).ok_or_else(|| UsageError(format!("{raw:?} is not a valid tag key")))
}

/// `KEY=VALUE` pairs grouped by canonical key, values in order.
fn pairs(raw: &[String]) -> Result<Vec<(String, Vec<String>)>, UsageError> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for p in raw {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| UsageError(format!("{p:?}: expected KEY=VALUE")))?;
        let k = key(k)?;
        match out.iter_mut().find(|(ok, _)| *ok == k) {
            Some((_, vals)) => vals.push(v.to_string()),
            None => out.push((k, vec![v.to_string()])),
        }
    }
    Ok(out)
}

/// The store to edit and the track `reference` names in it: a file of a
/// mounted view names both (its mount names the store, its inode the
/// track); an id or a library path is looked up in `--db`.
fn locate(db: Option<&Path>, reference: &str) -> anyhow::Result<(store::Store, TrackRow)> {
    // A reference that is no path at all (a track id) is not a served file.
    let served = mounted::served_file(Path::new(reference)).ok().flatten();
    let Some(served) = served else {
        let Some(db) = db else {
            return Err(UsageError(format!(
                "give the store with --db: {reference:?} is not a file of a mounted view \
                 (only such a file names its store)"
            ))
            .into());
        };
        let db_store = crate::open_existing(db)?;
        let track = db_store.resolve_track(reference)?;
        return Ok((db_store, track));
    };
    let db = store_of_view(db, &served, reference)?;
    let db_store = crate::open_existing(&db)?;
    let track = db_store.track(served.track_id)?.with_context(|| {
        format!(
            "{reference} is track {} of the view at {}, which {} does not hold \
             (was the store replaced since it was mounted?)",
            served.track_id,
            served.mount_point.display(),
            db.display()
        )
    })?;
    Ok((db_store, track))
}

/// The store of the view serving `reference`: the one its mount names,
/// which `--db`, if given, must be.
fn store_of_view(
    db: Option<&Path>,
    served: &ServedFile,
    reference: &str,
) -> anyhow::Result<std::path::PathBuf> {
    match (db, &served.store) {
        (Some(given), Some(named)) if !same_file(given, named) => bail!(
            "{reference} is a file of the view of {}, not of {}: give that store, or no --db",
            named.display(),
            given.display()
        ),
        (Some(given), _) => Ok(given.to_path_buf()),
        (None, Some(named)) => Ok(named.clone()),
        (None, None) => Err(UsageError(format!(
            "the view at {} does not name its store (mounted by an older retagfs, or the \
             store's path holds `,` or `\\`): give it with --db",
            served.mount_point.display()
        ))
        .into()),
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Applies `KEY=VALUE` pairs to a track with `set_tag` or `add_tag`, in
/// one transaction.
fn edit_pairs(
    db: &mut store::Store,
    id: i64,
    raw: &[String],
    apply: fn(&store::Transaction<'_>, i64, &str, &[String]) -> store::Result<()>,
) -> anyhow::Result<()> {
    let edits = pairs(raw)?;
    let tx = db.write()?;
    for (k, values) in &edits {
        apply(&tx, id, k, values)?;
    }
    tx.commit()?;
    Ok(())
}

pub fn tag(a: TagArgs) -> anyhow::Result<()> {
    let (TagAction::Get { track, .. }
    | TagAction::Set { track, .. }
    | TagAction::Add { track, .. }
    | TagAction::Rm { track, .. }) = &a.action;
    let (mut db, t) = locate(a.db.as_deref(), track)?;
    match a.action {
        TagAction::Get { keys: wanted, .. } => {
            let wanted: Vec<String> = wanted.iter().map(|k| key(k)).collect::<Result<_, _>>()?;
            for (k, v) in db.tags(t.id)? {
                if wanted.is_empty() || wanted.contains(&k) {
                    println!("{k}={v}");
                }
            }
        }
        TagAction::Set { pairs: raw, .. } => edit_pairs(&mut db, t.id, &raw, store::set_tag)?,
        TagAction::Add { pairs: raw, .. } => edit_pairs(&mut db, t.id, &raw, store::add_tag)?,
        TagAction::Rm { keys: raw, .. } => {
            let id = t.id;
            let current = db.tags(id)?;
            let tx = db.write()?;
            for item in &raw {
                let (k, only) = match item.split_once('=') {
                    Some((k, v)) => (key(k)?, Some(v)),
                    None => (key(item)?, None),
                };
                let keep: Vec<String> = match only {
                    Some(v) => current
                        .iter()
                        .filter(|(ck, cv)| *ck == k && cv != v)
                        .map(|(_, cv)| cv.clone())
                        .collect(),
                    None => Vec::new(),
                };
                store::set_tag(&tx, id, &k, &keep)?;
            }
            tx.commit()?;
        }
    }
    Ok(())
}

pub fn art(a: ArtArgs) -> anyhow::Result<()> {
    let (ArtAction::Set { track, .. } | ArtAction::Rm { track, .. }) = &a.action;
    let (mut db, t) = locate(a.db.as_deref(), track)?;
    let id = t.id;
    match a.action {
        ArtAction::Set {
            image,
            picture_type: t,
            ..
        } => {
            let t = picture_type(&t)?;
            let data = std::fs::read(&image).with_context(|| format!("reading {}", image.display()))?;
            let (mime, width, height, depth) = image_info(&data).ok_or_else(|| {
                UsageError(format!(
                    "{} is not a JPEG, PNG, GIF, BMP or WebP image",
                    image.display()
                ))
            })?;
            let tx = db.write()?;
            let sha = store::set_art(
                &tx,
                id,
                &NewArt {
                    mime,
                    width,
                    height,
                    depth,
                    data,
                },
                t,
            )?;
            tx.commit()?;
            println!("{sha}");
        }
        ArtAction::Rm {
            picture_type: t, all, ..
        } => {
            let t = if all { None } else { Some(picture_type(&t)?) };
            let tx = db.write()?;
            let n = store::remove_art(&tx, id, t)?;
            tx.commit()?;
            eprintln!("removed {n} picture(s)");
        }
    }
    Ok(())
}
