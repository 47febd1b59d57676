//! `retagfs tag` and `retagfs art`: edits through the store's contract.

use anyhow::Context;
use retagfs_formats::{image_info, keys};
use retagfs_store::{self as store, NewArt};

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

/// Applies `KEY=VALUE` pairs to a track with `set_tag` or `add_tag`, in
/// one transaction.
fn edit_pairs(
    db: &mut store::Store,
    track: &str,
    raw: &[String],
    apply: fn(&store::Transaction<'_>, i64, &str, &[String]) -> store::Result<()>,
) -> anyhow::Result<()> {
    let edits = pairs(raw)?;
    let id = db.resolve_track(track)?.id;
    let tx = db.write()?;
    for (k, values) in &edits {
        apply(&tx, id, k, values)?;
    }
    tx.commit()?;
    Ok(())
}

pub fn tag(a: TagArgs) -> anyhow::Result<()> {
    let mut db = crate::open_existing(&a.db)?;
    match a.action {
        TagAction::Get { track, keys: wanted } => {
            let t = db.resolve_track(&track)?;
            let wanted: Vec<String> = wanted.iter().map(|k| key(k)).collect::<Result<_, _>>()?;
            for (k, v) in db.tags(t.id)? {
                if wanted.is_empty() || wanted.contains(&k) {
                    println!("{k}={v}");
                }
            }
        }
        TagAction::Set { track, pairs: raw } => edit_pairs(&mut db, &track, &raw, store::set_tag)?,
        TagAction::Add { track, pairs: raw } => edit_pairs(&mut db, &track, &raw, store::add_tag)?,
        TagAction::Rm { track, keys: raw } => {
            let id = db.resolve_track(&track)?.id;
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
    let mut db = crate::open_existing(&a.db)?;
    match a.action {
        ArtAction::Set {
            track,
            image,
            picture_type: t,
        } => {
            let t = picture_type(&t)?;
            let data = std::fs::read(&image).with_context(|| format!("reading {}", image.display()))?;
            let (mime, width, height, depth) = image_info(&data).ok_or_else(|| {
                UsageError(format!(
                    "{} is not a JPEG, PNG, GIF, BMP or WebP image",
                    image.display()
                ))
            })?;
            let id = db.resolve_track(&track)?.id;
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
            track,
            picture_type: t,
            all,
        } => {
            let t = if all { None } else { Some(picture_type(&t)?) };
            let id = db.resolve_track(&track)?.id;
            let tx = db.write()?;
            let n = store::remove_art(&tx, id, t)?;
            tx.commit()?;
            eprintln!("removed {n} picture(s)");
        }
    }
    Ok(())
}
