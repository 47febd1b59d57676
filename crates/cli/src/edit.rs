//! `retagfs tag` and `retagfs art`: edits through the store's contract.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{bail, Context};
use retagfs_formats::sniffed_art;
use retagfs_formats::tags::keys;
use retagfs_fuse::mounted::{self, MountedView};
use retagfs_store::{self as store, TrackRow};

use crate::args::{ArtAction, ArtArgs, TagAction, TagArgs};
use crate::edit_transaction::EditTransaction;
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

/// The store to edit and the tracks `reference` names in it. A file or
/// folder of a mounted view names both (its mount names the store, its
/// inodes the tracks); an id, a library file or a library folder is looked
/// up in `--db`. Folders need `recursive`, and name every track under them.
fn locate(
    db: Option<&Path>,
    reference: &str,
    recursive: bool,
) -> anyhow::Result<(store::Store, Vec<TrackRow>)> {
    let path = &*store::text_to_path(reference);
    // One `stat` decides: a file of a view renamed by a retag right after
    // it would otherwise be found in the view, then not at all.
    let meta = path.metadata();
    let is_folder = meta.as_ref().is_ok_and(|m| m.is_dir());
    if is_folder && !recursive {
        return Err(UsageError(format!(
            "{reference} is a folder: add -r to edit every track under it"
        ))
        .into());
    }
    let view = meta.as_ref().ok().and_then(|m| Some((mounted::view_of(m)?, m)));
    let (db_store, tracks) = match (view, db) {
        (Some((view, meta)), db) => in_view(db, &view, reference, meta)?,
        (None, Some(db)) => {
            let db_store = crate::open_existing(db)?;
            let tracks = if is_folder {
                let full = std::fs::canonicalize(path).with_context(|| format!("resolving {reference}"))?;
                db_store.tracks_under(&retagfs_store::path_to_text(&full))?
            } else {
                vec![db_store.resolve_track(reference)?]
            };
            (db_store, tracks)
        }
        (None, None) => {
            // A path that names nothing (a file of a view moved by a retag
            // since it was listed) or cannot be looked at (a view mounted
            // by another user) is no usage mistake.
            if let (true, Err(e)) = (reference.contains('/'), &meta) {
                bail!("{reference}: {e}");
            }
            return Err(UsageError(format!(
                "give the store with --db: {reference:?} is not in a mounted view \
                 (only a view names its store)"
            ))
            .into());
        }
    };
    if tracks.is_empty() {
        bail!("no track of the store is under {reference}");
    }
    Ok((db_store, tracks))
}

/// The store of `view` and the tracks its file or folder `reference`
/// (whose `stat` is `meta`) serves.
fn in_view(
    db: Option<&Path>,
    view: &MountedView,
    reference: &str,
    meta: &std::fs::Metadata,
) -> anyhow::Result<(store::Store, Vec<TrackRow>)> {
    let db = store_of_view(db, view, reference)?;
    let db_store = crate::open_existing(&db)?;
    let ids = mounted::served_tracks(&store::text_to_path(reference), meta)
        .with_context(|| format!("listing {reference}"))?;
    let tracks = ids
        .into_iter()
        .map(|id| {
            db_store.track(id)?.with_context(|| {
                format!(
                    "{reference} holds track {id} of the view at {}, which {} does not hold \
                     (was the store replaced since it was mounted?)",
                    view.mount_point.display(),
                    db.display()
                )
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((db_store, tracks))
}

/// The store of `view`: the one its mount names, which `--db`, if given,
/// must be.
fn store_of_view(
    db: Option<&Path>,
    view: &MountedView,
    reference: &str,
) -> anyhow::Result<std::path::PathBuf> {
    match (db, &view.store) {
        (Some(given), Some(named)) if !same_file(given, named) => bail!(
            "{reference} is in the view of {}, not of {}: give that store, or no --db",
            named.display(),
            given.display()
        ),
        (Some(given), _) => Ok(given.to_path_buf()),
        (None, Some(named)) => Ok(named.clone()),
        (None, None) => Err(UsageError(format!(
            "the view at {} does not name its store (mounted by an older retagfs, or the \
             store's path holds `,` or `\\`): give it with --db",
            view.mount_point.display()
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

/// Applies `KEY=VALUE` pairs to tracks with `set_tag` or `add_tag`.
fn edit_pairs(
    tx: &store::Transaction<'_>,
    ids: &[i64],
    raw: &[String],
    apply: fn(&store::Transaction<'_>, i64, &str, &[String]) -> store::Result<()>,
) -> anyhow::Result<()> {
    let edits = pairs(raw)?;
    for &id in ids {
        for (k, values) in &edits {
            apply(tx, id, k, values)?;
        }
    }
    Ok(())
}

/// Removes keys (`comment`) or single values (`genre=Jazz`) from tracks.
fn remove_values(tx: &store::Transaction<'_>, ids: &[i64], raw: &[String]) -> anyhow::Result<()> {
    let removals = raw
        .iter()
        .map(|item| match item.split_once('=') {
            Some((k, v)) => Ok((key(k)?, Some(v))),
            None => Ok((key(item)?, None)),
        })
        .collect::<Result<Vec<_>, UsageError>>()?;
    for &id in ids {
        let current = store::tags_of(tx, id)?;
        for (k, only) in &removals {
            let keep: Vec<String> = match only {
                Some(v) => current
                    .iter()
                    .filter(|(ck, cv)| ck == k && cv != v)
                    .map(|(_, cv)| cv.clone())
                    .collect(),
                None => Vec::new(),
            };
            store::set_tag(tx, id, k, &keep)?;
        }
    }
    Ok(())
}

/// What an edit changes, for a dry run to show.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Edits {
    Tags,
    Pictures,
}

/// Runs `edit` on `ids` in one transaction, dated and journaled
/// ([`EditTransaction`]); with `dry_run`, rolls it back (after
/// printing what it changed in the tags of each track, for tag edits).
fn in_one_transaction(
    db: &mut store::Store,
    ids: &[i64],
    dry_run: bool,
    edits: Edits,
    edit: impl FnOnce(&store::Transaction<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let tx = db.write()?;
    let before = if dry_run && edits == Edits::Tags {
        ids.iter()
            .map(|&id| store::tags_of(&tx, id))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    let mut edited = EditTransaction::begin(&tx)?;
    for &id in ids {
        edited.note(&tx, id)?;
    }
    edit(&tx)?;
    if dry_run {
        if edits == Edits::Tags {
            crate::dry_run::print_tag_changes(&tx, ids, &before)?;
        }
        return Ok(()); // dropped: rolled back
    }
    edited.finish(&tx)?;
    tx.commit()?;
    Ok(())
}

/// With `-r`, says how many tracks an edit reached.
fn report(recursive: bool, what: &str, tracks: usize) {
    if recursive {
        eprintln!("{what} {tracks} track(s)");
    }
}

pub fn tag(a: TagArgs) -> anyhow::Result<()> {
    let (TagAction::Get { track, .. }
    | TagAction::Set { track, .. }
    | TagAction::Add { track, .. }
    | TagAction::Rm { track, .. }) = &a.action;
    if matches!(a.action, TagAction::Get { .. }) {
        if a.query.is_some() {
            return Err(UsageError(
                "`get` prints the tags of one track: use `retagfs query --json` for many".into(),
            )
            .into());
        }
        if Path::new(track).is_dir() {
            return Err(
                UsageError(format!("{track} is a folder: `get` prints the tags of one track")).into(),
            );
        }
    }
    let (mut db, ids) = targets(a.db.as_deref(), Some(track), a.recursive, a.query.as_deref())?;
    // With --query, the TRACK position holds the first pair.
    let with_first = |rest: Vec<String>| -> Vec<String> {
        match &a.query {
            Some(_) => std::iter::once(track.clone()).chain(rest).collect(),
            None => rest,
        }
    };
    match a.action {
        TagAction::Get { keys: ref wanted, .. } => {
            let wanted: Vec<String> = wanted.iter().map(|k| key(k)).collect::<Result<_, _>>()?;
            for (k, v) in db.tags(ids[0])? {
                if wanted.is_empty() || wanted.contains(&k) {
                    println!("{k}={v}");
                }
            }
            return Ok(());
        }
        TagAction::Set { ref pairs, .. } => {
            let raw = with_first(pairs.clone());
            in_one_transaction(&mut db, &ids, a.dry_run, Edits::Tags, |tx| {
                edit_pairs(tx, &ids, &raw, store::set_tag)
            })?
        }
        TagAction::Add { ref pairs, .. } => {
            let raw = with_first(pairs.clone());
            in_one_transaction(&mut db, &ids, a.dry_run, Edits::Tags, |tx| {
                edit_pairs(tx, &ids, &raw, store::add_tag)
            })?
        }
        TagAction::Rm { ref keys, .. } => {
            let raw = with_first(keys.clone());
            in_one_transaction(&mut db, &ids, a.dry_run, Edits::Tags, |tx| {
                remove_values(tx, &ids, &raw)
            })?
        }
    }
    if !a.dry_run {
        report(a.recursive || a.query.is_some(), "edited", ids.len());
    }
    Ok(())
}

/// The store and the tracks an edit is for: those matching `query`, or
/// those `reference` names ([`locate`]).
fn targets(
    db: Option<&Path>,
    reference: Option<&String>,
    recursive: bool,
    query: Option<&str>,
) -> anyhow::Result<(store::Store, Vec<i64>)> {
    let Some(text) = query else {
        let reference = reference.expect("clap asks for TRACK without --query");
        let (db, tracks) = locate(db, reference, recursive)?;
        return Ok((db, tracks.iter().map(|t| t.id).collect()));
    };
    let query = crate::query::parse(text)?;
    let db = db.ok_or_else(|| UsageError("--query needs the store: give it with --db".into()))?;
    let store = crate::open_existing(db)?;
    let ids = query.matching_ids(&store)?;
    if ids.is_empty() {
        bail!("no track matches {text:?}: nothing to edit");
    }
    Ok((store, ids))
}

pub fn art(a: ArtArgs) -> anyhow::Result<()> {
    let (ArtAction::Set { track, .. }
    | ArtAction::Rm {
        track: Some(track), ..
    }) = &a.action
    else {
        let (mut db, ids) = targets(a.db.as_deref(), None, a.recursive, a.query.as_deref())?;
        return remove_art(&mut db, &ids, &a.action, a.dry_run);
    };
    let reference = a.query.is_none().then_some(track);
    let (mut db, ids) = targets(a.db.as_deref(), reference, a.recursive, a.query.as_deref())?;
    let reached = a.recursive || a.query.is_some();
    match &a.action {
        ArtAction::Set {
            image,
            picture_type: t,
            ..
        } => {
            // With --query, the TRACK position holds the image.
            let image = match (&a.query, image) {
                (Some(_), _) => Path::new(track).to_path_buf(),
                (None, Some(image)) => image.clone(),
                (None, None) => return Err(UsageError("give the image file after TRACK".into()).into()),
            };
            let t = picture_type(t)?;
            let data = std::fs::read(&image).with_context(|| format!("reading {}", image.display()))?;
            let art = sniffed_art(data).map_err(|_| {
                UsageError(format!(
                    "{} is not a JPEG, PNG, GIF, BMP or WebP image",
                    image.display()
                ))
            })?;
            let mut sha = String::new();
            in_one_transaction(&mut db, &ids, a.dry_run, Edits::Pictures, |tx| {
                sha = store::insert_art(tx, &art)?;
                for &id in &ids {
                    store::link_art(tx, id, &sha, t)?;
                }
                Ok(())
            })?;
            if a.dry_run {
                eprintln!(
                    "dry run: would set the picture of {} track(s); nothing was written",
                    ids.len()
                );
            } else {
                println!("{sha}");
                report(reached, "set the picture of", ids.len());
            }
            Ok(())
        }
        ArtAction::Rm { .. } => remove_art(&mut db, &ids, &a.action, a.dry_run),
    }
}

fn remove_art(db: &mut store::Store, ids: &[i64], action: &ArtAction, dry_run: bool) -> anyhow::Result<()> {
    let ArtAction::Rm {
        picture_type: t, all, ..
    } = action
    else {
        unreachable!("only `art rm` removes pictures");
    };
    let t = if *all { None } else { Some(picture_type(t)?) };
    let mut removed = 0;
    in_one_transaction(db, ids, dry_run, Edits::Pictures, |tx| {
        for &id in ids {
            removed += store::remove_art(tx, id, t)?;
        }
        Ok(())
    })?;
    let would = if dry_run {
        "dry run: would remove"
    } else {
        "removed"
    };
    eprintln!("{would} {removed} picture(s) of {} track(s)", ids.len());
    Ok(())
}
