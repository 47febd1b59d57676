//! MP4 synthesis: the original top-level atoms, with `moov` rebuilt around
//! a new `udta/meta/ilst` from the store (cover art streamed from the store)
//! and every `stco`/`co64` chunk offset shifted when `moov` precedes `mdat`.

use retagfs_store::{ArtLink, BackingPart, PartKind};

use crate::error::SynthesisError;
use crate::layout::Layout;
use crate::mp4::{children, find, slice, Atom};
use crate::source::{ReadAt, Source};
use crate::tags::keys;
use crate::tags::vorbis_comment::field_name;

/// `hdlr` of an iTunes metadata `meta`: version/flags, pre-defined,
/// handler type `mdir`, reserved (`appl` and zeros), empty name.
const MDIR_HDLR: &[u8] = b"\0\0\0\x21hdlr\0\0\0\0\0\0\0\0mdirappl\0\0\0\0\0\0\0\0\0";

/// Data atom type codes (iTunes "well-known types").
const TYPE_IMPLICIT: u32 = 0;
const TYPE_UTF8: u32 = 1;
const TYPE_JPEG: u32 = 13;
const TYPE_PNG: u32 = 14;
const TYPE_BMP: u32 = 27;
const TYPE_INT: u32 = 21;

/// The store's tags and art as an `ilst` atom, wrapped in a new `meta` (and
/// `udta`) when the file has none.
fn ilst_layout(slot: PartKind, tags: &[(String, String)], art: &[ArtLink]) -> Layout {
    let mut items = Layout::default();
    push_items(&mut items, tags);
    if !art.is_empty() {
        let mut covr = Layout::default();
        for link in art {
            let code = match link.mime.as_str() {
                "image/jpeg" => TYPE_JPEG,
                "image/png" => TYPE_PNG,
                "image/bmp" => TYPE_BMP,
                _ => TYPE_IMPLICIT,
            };
            let mut data = Layout::default();
            data.push_bytes(&data_prefix(code));
            data.push_art(link.art_rowid, link.data_len);
            covr.append(atom(b"data", data));
        }
        items.append(atom(b"covr", covr));
    }
    let ilst = atom(b"ilst", items);
    let meta = || {
        let mut body = Layout::default();
        body.push_bytes(&[0; 4]);
        body.push_bytes(MDIR_HDLR);
        body.append(ilst.clone());
        atom(b"meta", body)
    };
    match slot {
        PartKind::IlstInNewMeta => meta(),
        PartKind::IlstInNewUdta => atom(b"udta", meta()),
        _ => ilst,
    }
}

/// An atom around `body` (a 64-bit size when it needs one).
fn atom(kind: &[u8; 4], body: Layout) -> Layout {
    let mut out = Layout::default();
    let len = body.len() + 8;
    if len > u64::from(u32::MAX) {
        out.push_bytes(&1u32.to_be_bytes());
        out.push_bytes(kind);
        out.push_bytes(&(len + 8).to_be_bytes());
    } else {
        out.push_bytes(&(len as u32).to_be_bytes());
        out.push_bytes(kind);
    }
    out.append(body);
    out
}

/// Type code and locale, the start of a `data` atom's body.
fn data_prefix(code: u32) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[..4].copy_from_slice(&code.to_be_bytes());
    h
}

fn bytes_atom(kind: &[u8; 4], body: &[u8]) -> Layout {
    let mut l = Layout::default();
    l.push_bytes(body);
    atom(kind, l)
}

fn data_atom(code: u32, payload: &[u8]) -> Layout {
    bytes_atom(b"data", &[&data_prefix(code)[..], payload].concat())
}

/// One UTF-8 `data` atom per value.
fn text_data(values: &[&str]) -> Layout {
    let mut out = Layout::default();
    for v in values {
        out.append(data_atom(TYPE_UTF8, v.as_bytes()));
    }
    out
}

fn freeform_item(name: &str, values: &[&str]) -> Layout {
    let mut body = Layout::default();
    body.append(bytes_atom(b"mean", b"\0\0\0\0com.apple.iTunes"));
    body.append(bytes_atom(b"name", &[&[0u8; 4][..], name.as_bytes()].concat()));
    body.append(text_data(values));
    atom(b"----", body)
}

fn int_item(kind: &[u8; 4], code: u32, payload: &[u8]) -> Layout {
    atom(kind, data_atom(code, payload))
}

fn push_items(items: &mut Layout, tags: &[(String, String)]) {
    let mut order: Vec<&str> = Vec::new();
    for (k, _) in tags {
        if !order.contains(&k.as_str()) {
            order.push(k);
        }
    }
    let values = |k: &str| -> Vec<&str> {
        tags.iter()
            .filter(|(tk, v)| tk == k && !v.is_empty())
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let number = |k: &str| values(k).first().and_then(|v| v.trim().parse::<u16>().ok());
    for key in order {
        let vals = values(key);
        if vals.is_empty() {
            continue;
        }
        let native = keys::mapping(key).and_then(|m| m.mp4);
        let item = match (key, native) {
            ("tracknumber" | "totaltracks" | "discnumber" | "totaldiscs", _) if number(key).is_some() => {
                let (num_key, total_key, kind) = match key {
                    "tracknumber" | "totaltracks" => ("tracknumber", "totaltracks", b"trkn"),
                    _ => ("discnumber", "totaldiscs", b"disk"),
                };
                // One atom holds both; it is written where the number is.
                if key == total_key && number(num_key).is_some() {
                    continue;
                }
                let (n, t) = (number(num_key).unwrap_or(0), number(total_key).unwrap_or(0));
                pair_item(kind, n, t)
            }
            ("bpm", _) if number(key).is_some() => {
                int_item(b"tmpo", TYPE_INT, &number(key).unwrap_or(0).to_be_bytes())
            }
            ("compilation", _) => {
                let on = matches!(vals[0].trim().to_lowercase().as_str(), "1" | "true" | "yes");
                int_item(b"cpil", TYPE_INT, &[u8::from(on)])
            }
            (_, Some(native)) if !native.starts_with("----:") && native.chars().count() == 4 => {
                let kind: Vec<u8> = native.chars().map(|c| c as u32 as u8).collect();
                atom(&[kind[0], kind[1], kind[2], kind[3]], text_data(&vals))
            }
            (_, Some(native)) if native.starts_with("----:") => freeform_item(&native[5..], &vals),
            // Unknown keys, and numbers that are not numbers, pass through
            // as freeform atoms.
            _ => freeform_item(&field_name(key), &vals),
        };
        items.append(item);
    }
}

/// `trkn` (8 bytes) or `disk` (6 bytes): reserved, number, total [, reserved].
fn pair_item(kind: &[u8; 4], n: u16, total: u16) -> Layout {
    let mut payload = vec![0, 0];
    payload.extend_from_slice(&n.to_be_bytes());
    payload.extend_from_slice(&total.to_be_bytes());
    if kind == b"trkn" {
        payload.extend_from_slice(&[0, 0]);
    }
    int_item(kind, TYPE_IMPLICIT, &payload)
}

/// The served size, from the stored parts alone.
pub fn synthesized_len(parts: &[BackingPart], tags: &[(String, String)], art: &[ArtLink]) -> Option<u64> {
    let slot = parts.iter().find(|p| is_slot(p.kind))?;
    let atoms: u64 = parts
        .iter()
        .filter(|p| matches!(p.kind, PartKind::Atom | PartKind::Moov))
        .map(|p| p.length)
        .sum();
    Some(atoms - slot.length + ilst_layout(slot.kind, tags, art).len())
}

fn is_slot(kind: PartKind) -> bool {
    matches!(
        kind,
        PartKind::Ilst | PartKind::IlstInNewMeta | PartKind::IlstInNewUdta
    )
}

/// The served file. Reads the original `moov` from `backing`. `mdat_at`
/// is where the (first) `mdat` starts: chunk offsets move only when it
/// follows `moov`.
pub fn synthesize(
    parts: &[BackingPart],
    tags: &[(String, String)],
    art: &[ArtLink],
    backing: &dyn ReadAt,
    file_size: u64,
    mdat_at: u64,
) -> Result<Layout, SynthesisError> {
    let slot = *parts
        .iter()
        .find(|p| is_slot(p.kind))
        .ok_or("the store has no ilst location for this MP4 track")?;
    let moov = *parts
        .iter()
        .find(|p| p.kind == PartKind::Moov)
        .ok_or("the store has no moov atom for this MP4 track")?;
    if slot.offset < moov.offset || slot.end() > moov.end() {
        return Err("the stored ilst location lies outside moov".into());
    }
    let ilst = ilst_layout(slot.kind, tags, art);
    let delta = ilst.len() as i64 - slot.length as i64;
    let src = Source::new(backing, file_size);
    let mut bytes = src.read(moov.offset, moov.length, "moov atom")?;
    // Both walk the original sizes: chunk offsets first, then the sizes.
    if mdat_at > moov.offset && delta != 0 {
        shift_chunk_offsets(&mut bytes, moov.offset, delta)?;
    }
    grow_ancestors(&mut bytes, moov.offset, slot, delta)?;
    let cut = (slot.offset - moov.offset) as usize;
    let mut layout = Layout::default();
    for p in parts {
        match p.kind {
            PartKind::Atom => layout.push_backing(p.offset, p.length),
            PartKind::Moov => {
                layout.push_bytes(&bytes[..cut]);
                layout.append(ilst.clone());
                layout.push_bytes(&bytes[cut + slot.length as usize..]);
            }
            _ => {}
        }
    }
    Ok(layout)
}

/// Adds `delta` to the size of every atom of `moov` (`b`, at file offset
/// `base`) that encloses the ilst slot: moov, udta, meta (as present).
fn grow_ancestors(b: &mut [u8], base: u64, slot: BackingPart, delta: i64) -> Result<(), SynthesisError> {
    let moov = top_atom(b, base)?;
    let mut chain = vec![moov];
    let moov_kids = children(slice(b, base, &moov), moov.offset + moov.header)?;
    if slot.kind != PartKind::IlstInNewUdta {
        let udta = *find(&moov_kids, b"udta").ok_or("moov has no udta where the store says")?;
        chain.push(udta);
        if slot.kind == PartKind::Ilst {
            let udta_b = slice(b, base, &udta);
            let udta_kids = children(udta_b, udta.offset + udta.header)?;
            let meta = *find(&udta_kids, b"meta").ok_or("udta has no meta where the store says")?;
            chain.push(meta);
        }
    }
    for a in chain {
        let at = (a.offset - base) as usize;
        let new_len = a.len as i64 + delta;
        if a.header == 16 {
            b[at + 8..at + 16].copy_from_slice(&(new_len as u64).to_be_bytes());
        } else {
            let len = u32::try_from(new_len).map_err(|_| "moov grows past 4 GiB")?;
            b[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
    }
    Ok(())
}

fn top_atom(b: &[u8], base: u64) -> Result<Atom, SynthesisError> {
    children(b, base)?
        .first()
        .copied()
        .ok_or_else(|| "empty moov".into())
}

/// Shifts every chunk offset of every track by `delta`.
fn shift_chunk_offsets(b: &mut [u8], base: u64, delta: i64) -> Result<(), SynthesisError> {
    let moov = top_atom(b, base)?;
    let mut tables = Vec::new();
    collect_chunk_tables(b, base, &moov, &mut tables)?;
    for (kind, at, len) in tables {
        let t = &mut b[at..at + len];
        if t.len() < 8 {
            return Err("chunk offset table too short".into());
        }
        let count = u32::from_be_bytes([t[4], t[5], t[6], t[7]]) as usize;
        let width = if &kind == b"co64" { 8 } else { 4 };
        if 8 + count * width > t.len() {
            return Err("chunk offset table longer than its atom".into());
        }
        for e in t[8..8 + count * width].chunks_exact_mut(width) {
            if width == 8 {
                let v = u64::from_be_bytes(e.try_into().unwrap_or_default()) as i64 + delta;
                e.copy_from_slice(&(v as u64).to_be_bytes());
            } else {
                let v = i64::from(u32::from_be_bytes(e.try_into().unwrap_or_default())) + delta;
                let v = u32::try_from(v).map_err(|_| "a chunk offset no longer fits in stco")?;
                e.copy_from_slice(&v.to_be_bytes());
            }
        }
    }
    Ok(())
}

/// (kind, position in `b`, body length) of every stco/co64 under
/// moov/trak/mdia/minf/stbl.
fn collect_chunk_tables(
    b: &[u8],
    base: u64,
    parent: &Atom,
    out: &mut Vec<([u8; 4], usize, usize)>,
) -> crate::error::Result<()> {
    let parent_b = slice(b, base, parent);
    for a in children(parent_b, parent.offset + parent.header)? {
        match &a.kind {
            b"trak" | b"mdia" | b"minf" | b"stbl" => collect_chunk_tables(b, base, &a, out)?,
            b"stco" | b"co64" => out.push((
                a.kind,
                (a.offset + a.header - base) as usize,
                (a.len - a.header) as usize,
            )),
            _ => {}
        }
    }
    Ok(())
}
