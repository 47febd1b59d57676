//! MP4 / M4A / M4B: walk the atom tree, read the `ilst` items, find `mdat`.

pub(crate) mod samples;
pub(crate) mod synthesis;

use retagfs_store::{BackingPart, PartKind, ScannedPicture};

use crate::duration::millis;
use crate::error::{malformed, ProbeError, Result};
use crate::probe::Probe;
use crate::source::{be_u32, Source};
use crate::tags::genres;
use crate::tags::keys::{self, TagList};
use crate::tags::picture::picture;
use crate::tags::text::lossy;
use crate::Format;

/// One atom: its type, where it starts, its header and total length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Atom {
    pub kind: [u8; 4],
    pub offset: u64,
    pub header: u64,
    pub len: u64,
}

impl Atom {
    fn body(&self) -> (u64, u64) {
        (self.offset + self.header, self.len - self.header)
    }
}

/// Reads the atom header at `pos` of a region ending at `end`.
fn atom_at(b: &[u8], pos: usize, end: u64, base: u64) -> Result<Atom> {
    let h = &b[pos..];
    if h.len() < 8 {
        return malformed(format!("atom header cut off at offset {}", base + pos as u64));
    }
    let size32 = u64::from(be_u32(h));
    let kind = [h[4], h[5], h[6], h[7]];
    let offset = base + pos as u64;
    let (header, len) = match size32 {
        0 => (8, end - offset),
        1 if h.len() >= 16 => (16, u64::from_be_bytes(h[8..16].try_into().unwrap())),
        1 => return malformed("64-bit atom size cut off"),
        n => (8, n),
    };
    if len < header || offset.checked_add(len).is_none_or(|atom_end| atom_end > end) {
        return malformed(format!(
            "atom '{}' at offset {offset} claims {len} bytes, past its parent's end ({end})",
            String::from_utf8_lossy(&kind)
        ));
    }
    Ok(Atom {
        kind,
        offset,
        header,
        len,
    })
}

/// The children of a region of bytes `b` that starts at file offset `base`.
pub(crate) fn children(b: &[u8], base: u64) -> Result<Vec<Atom>> {
    let end = base + b.len() as u64;
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos + 8 <= b.len() {
        let a = atom_at(b, pos, end, base)?;
        pos += a.len as usize;
        out.push(a);
    }
    Ok(out)
}

pub(crate) fn slice<'a>(b: &'a [u8], base: u64, a: &Atom) -> &'a [u8] {
    let (start, len) = a.body();
    &b[(start - base) as usize..(start - base + len) as usize]
}

pub(crate) fn find<'a>(atoms: &'a [Atom], kind: &[u8; 4]) -> Option<&'a Atom> {
    atoms.iter().find(|a| &a.kind == kind)
}

pub fn probe(src: &Source<'_>) -> Result<Probe> {
    let mut top = Vec::new();
    let mut pos = 0u64;
    while pos + 8 <= src.size() {
        let head = src.read(pos, 16.min(src.size() - pos), "atom header")?;
        let a = atom_at(&head, 0, src.size(), pos)?;
        if a.len == 0 {
            return malformed(format!("zero-length atom at offset {pos}"));
        }
        pos += a.len;
        top.push(a);
    }
    let moov = *find(&top, b"moov").ok_or_else(|| ProbeError::Malformed("no moov atom".into()))?;
    let mdats: Vec<&Atom> = top.iter().filter(|a| &a.kind == b"mdat").collect();
    let (first, last) = match (mdats.first(), mdats.last()) {
        (Some(f), Some(l)) => (f, l),
        _ => return malformed("no mdat atom"),
    };

    let (body_at, body_len) = moov.body();
    let moov_bytes = src.read(body_at, body_len, "moov atom")?;
    let moov_children = children(&moov_bytes, body_at)?;
    let audio = audio_mdias(&moov_bytes, body_at, &moov_children)?;
    let audio_tracks = audio.len();
    if audio_tracks == 0 {
        return Err(ProbeError::Unsupported("MP4 file without an audio track".into()));
    }
    samples::check_playable(src, &audio, &top)?;

    let mut probe = Probe::new(Format::Mp4);
    probe.duration_ms =
        find(&moov_children, b"mvhd").and_then(|mvhd| movie_duration_ms(slice(&moov_bytes, body_at, mvhd)));
    let slot = ilst_slot(&moov_bytes, &moov, &moov_children)?;
    if let Some(ilst) = find_ilst(&moov_bytes, body_at, &moov_children)? {
        let mut tags = TagList::new();
        for item in children(ilst.0, ilst.1)? {
            read_item(
                slice(ilst.0, ilst.1, &item),
                item.offset + item.header,
                &item.kind,
                &mut tags,
                &mut probe.pictures,
            )?;
        }
        probe.tags = tags.finish();
    }
    probe.passthrough = if top.iter().any(|a| &a.kind == b"moof") || find(&moov_children, b"mvex").is_some() {
        Some("fragmented MP4 (moof)".into())
    } else if audio_tracks > 1 {
        Some(format!("MP4 file with {audio_tracks} audio tracks"))
    } else if moov.offset > first.offset && moov.offset < last.offset {
        Some("moov atom between mdat atoms".into())
    } else {
        None
    };
    for a in &top {
        let kind = if a.offset == moov.offset {
            PartKind::Moov
        } else {
            PartKind::Atom
        };
        probe.parts.push(BackingPart::new(kind, a.offset, a.len));
    }
    probe.parts.push(slot);
    probe.audio_offset = first.offset;
    probe.audio_length = last.offset + last.len - first.offset;
    Ok(probe)
}

/// How long the movie plays, from the body of its `mvhd`: a duration in
/// units of a timescale (32-bit fields in a version 0 box, a 64-bit
/// duration in version 1). A duration of all ones says it is unknown, and
/// 0 is what fragmented files write, whose fragments say the rest.
fn movie_duration_ms(mvhd: &[u8]) -> Option<u64> {
    let (timescale, duration) = match mvhd.first()? {
        0 => {
            let duration = match be_u32(mvhd.get(16..20)?) {
                u32::MAX => u64::MAX,
                known => u64::from(known),
            };
            (be_u32(mvhd.get(12..16)?), duration)
        }
        1 => (
            be_u32(mvhd.get(20..24)?),
            u64::from_be_bytes(mvhd.get(24..32)?.try_into().ok()?),
        ),
        _ => return None,
    };
    match duration {
        0 | u64::MAX => None,
        known => millis(known, u64::from(timescale)),
    }
}

/// Where the new `ilst` goes: the old `ilst` atom, or an empty range where
/// it (with a new `meta` or `udta` around it) is inserted: after the last
/// whole child of its parent, so that bytes too short to be an atom at the
/// end of the parent stay at its end.
fn ilst_slot(b: &[u8], moov: &Atom, moov_children: &[Atom]) -> Result<BackingPart> {
    let base = moov.offset + moov.header;
    let Some(udta) = find(moov_children, b"udta") else {
        return Ok(BackingPart::new(
            PartKind::IlstInNewUdta,
            children_end(moov_children, base),
            0,
        ));
    };
    let udta_b = slice(b, base, udta);
    let udta_base = udta.offset + udta.header;
    let udta_children = children(udta_b, udta_base)?;
    let Some(meta) = find(&udta_children, b"meta").copied() else {
        return Ok(BackingPart::new(
            PartKind::IlstInNewMeta,
            children_end(&udta_children, udta_base),
            0,
        ));
    };
    let (meta_b, meta_base) = meta_children_region(udta_b, udta_base, &meta);
    let meta_children = children(meta_b, meta_base)?;
    Ok(match find(&meta_children, b"ilst") {
        Some(ilst) => BackingPart::new(PartKind::Ilst, ilst.offset, ilst.len),
        None => BackingPart::new(PartKind::Ilst, children_end(&meta_children, meta_base), 0),
    })
}

/// Where a parent's last whole child ends (its body start if it has none).
fn children_end(children: &[Atom], body_start: u64) -> u64 {
    children.last().map_or(body_start, |a| a.offset + a.len)
}

/// The region holding a `meta` atom's children: ISO `meta` is a full box
/// (4 bytes of version and flags first), QuickTime's is not. A full box
/// starts with zero flags, never with a child size.
pub(crate) fn meta_children_region<'a>(b: &'a [u8], base: u64, meta: &Atom) -> (&'a [u8], u64) {
    let meta_b = slice(b, base, meta);
    let meta_base = meta.offset + meta.header;
    if meta_b.len() >= 8 && &meta_b[4..8] != b"hdlr" {
        (&meta_b[4..], meta_base + 4)
    } else {
        (meta_b, meta_base)
    }
}

/// The `mdia` of each audio track, as (body bytes, file offset).
fn audio_mdias<'a>(b: &'a [u8], base: u64, moov: &[Atom]) -> Result<Vec<(&'a [u8], u64)>> {
    let mut out = Vec::new();
    for trak in moov.iter().filter(|a| &a.kind == b"trak") {
        let trak_b = slice(b, base, trak);
        let trak_base = trak.offset + trak.header;
        let Some(mdia) = find(&children(trak_b, trak_base)?, b"mdia").copied() else {
            continue;
        };
        let mdia_b = slice(trak_b, trak_base, &mdia);
        let mdia_base = mdia.offset + mdia.header;
        if let Some(hdlr) = find(&children(mdia_b, mdia_base)?, b"hdlr") {
            let h = slice(mdia_b, mdia_base, hdlr);
            if h.len() >= 12 && &h[8..12] == b"soun" {
                out.push((mdia_b, mdia_base));
            }
        }
    }
    Ok(out)
}

/// moov/udta/meta/ilst as (bytes, file offset of those bytes).
fn find_ilst<'a>(b: &'a [u8], base: u64, moov: &[Atom]) -> Result<Option<(&'a [u8], u64)>> {
    let Some(udta) = find(moov, b"udta") else {
        return Ok(None);
    };
    let udta_b = slice(b, base, udta);
    let udta_base = udta.offset + udta.header;
    let Some(meta) = find(&children(udta_b, udta_base)?, b"meta").copied() else {
        return Ok(None);
    };
    let (meta_b, meta_base) = meta_children_region(udta_b, udta_base, &meta);
    let Some(ilst) = find(&children(meta_b, meta_base)?, b"ilst").copied() else {
        return Ok(None);
    };
    Ok(Some((slice(meta_b, meta_base, &ilst), ilst.offset + ilst.header)))
}

/// Data atoms of an item: (type code, payload).
fn data_atoms(b: &[u8], base: u64) -> Result<Vec<(u32, &[u8])>> {
    Ok(children(b, base)?
        .iter()
        .filter(|a| &a.kind == b"data")
        .filter_map(|a| {
            let d = slice(b, base, a);
            (d.len() >= 8).then(|| (be_u32(d) & 0x00ff_ffff, &d[8..]))
        })
        .collect())
}

fn freeform_name(b: &[u8], base: u64) -> Result<Option<String>> {
    let name = children(b, base)?
        .iter()
        .find(|a| &a.kind == b"name")
        .map(|a| slice(b, base, a))
        .filter(|d| d.len() >= 4)
        .map(|d| String::from_utf8_lossy(&d[4..]).into_owned());
    Ok(name)
}

fn read_item(
    b: &[u8],
    base: u64,
    kind: &[u8; 4],
    tags: &mut TagList,
    pictures: &mut Vec<ScannedPicture>,
) -> Result<()> {
    let name: String = kind.iter().map(|&c| c as char).collect();
    let data = data_atoms(b, base)?;
    let pair = |d: &[u8]| {
        (d.len() >= 6).then(|| (u16::from_be_bytes([d[2], d[3]]), u16::from_be_bytes([d[4], d[5]])))
    };
    match &name[..] {
        "trkn" | "disk" => {
            let (num_key, total_key) = if name == "trkn" {
                ("tracknumber", "totaltracks")
            } else {
                ("discnumber", "totaldiscs")
            };
            if let Some((n, total)) = data.first().and_then(|(_, d)| pair(d)) {
                if n > 0 {
                    tags.push(num_key, &n.to_string());
                }
                if total > 0 {
                    tags.push(total_key, &total.to_string());
                }
            }
        }
        "tmpo" => {
            if let Some((_, d)) = data.first() {
                tags.push("bpm", &be_int(d).to_string());
            }
        }
        "cpil" => {
            if let Some((_, d)) = data.first() {
                tags.push("compilation", if be_int(d) != 0 { "1" } else { "0" });
            }
        }
        "gnre" => {
            if let Some((_, d)) = data.first() {
                let i = be_int(d);
                if let Some(g) = usize::try_from(i - 1).ok().and_then(genres::by_index) {
                    tags.push("genre", g);
                }
            }
        }
        "covr" => {
            for (code, d) in data {
                let mime = match code {
                    13 => "image/jpeg",
                    14 => "image/png",
                    27 => "image/bmp",
                    _ => "",
                };
                pictures.push(picture(d.to_vec(), mime, 3, String::new(), (0, 0, 0)));
            }
        }
        "----" => {
            let Some(fname) = freeform_name(b, base)? else {
                return Ok(());
            };
            let native = format!("----:{fname}");
            let key = keys::TABLE
                .iter()
                .find(|m| m.mp4.is_some_and(|n| n.eq_ignore_ascii_case(&native)))
                .map(|m| m.key.to_string())
                .or_else(|| keys::canonical_key(&fname));
            if let Some(key) = key {
                for (_, d) in data {
                    tags.push(&key, &lossy(d));
                }
            }
        }
        _ => {
            if let Some(key) = keys::key_for_native(&name) {
                for (code, d) in data {
                    let value = match code {
                        2 => utf16_be(d),
                        _ => lossy(d).into_owned(),
                    };
                    tags.push(key, &value);
                }
            }
        }
    }
    Ok(())
}

fn be_int(d: &[u8]) -> i64 {
    d.iter().take(8).fold(0i64, |acc, &b| (acc << 8) | i64::from(b))
}

fn utf16_be(d: &[u8]) -> String {
    let units: Vec<u16> = d
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    String::from_utf16_lossy(&units)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn duration_ms(file: &[u8]) -> Option<u64> {
        let file = file.to_vec();
        probe(&Source::new(&file, file.len() as u64)).unwrap().duration_ms
    }

    #[test]
    fn duration_is_the_movie_header_duration_over_its_timescale() {
        // 1 s of audio; ffprobe says 1.000000 s for both.
        let tagged = include_bytes!("../../../../tests/fixtures/tagged.m4a");
        crate::duration::assert_near_ffprobe(duration_ms(tagged), 1.0);
        let faststart = include_bytes!("../../../../tests/fixtures/faststart.m4a");
        crate::duration::assert_near_ffprobe(duration_ms(faststart), 1.0);
    }

    /// An `mvhd` body of `version` with this timescale and duration.
    fn mvhd(version: u8, timescale: u32, duration: u64) -> Vec<u8> {
        let mut body = vec![version, 0, 0, 0];
        let times = if version == 1 { 16 } else { 8 };
        body.resize(4 + times, 0);
        body.extend_from_slice(&timescale.to_be_bytes());
        match version {
            1 => body.extend_from_slice(&duration.to_be_bytes()),
            _ => body.extend_from_slice(&(duration as u32).to_be_bytes()),
        }
        body.resize(body.len() + 80, 0);
        body
    }

    #[test]
    fn both_versions_of_the_movie_header_are_read() {
        assert_eq!(movie_duration_ms(&mvhd(0, 44_100, 441_000)), Some(10_000));
        assert_eq!(
            movie_duration_ms(&mvhd(1, 1000, 7_200_000_000)),
            Some(7_200_000_000)
        );
    }

    #[test]
    fn a_movie_header_without_a_timescale_or_a_duration_gives_no_duration() {
        assert_eq!(movie_duration_ms(&mvhd(0, 0, 441_000)), None);
        assert_eq!(movie_duration_ms(&mvhd(1, 0, 441_000)), None);
        assert_eq!(movie_duration_ms(&mvhd(0, 1000, u64::from(u32::MAX))), None);
        assert_eq!(movie_duration_ms(&mvhd(1, 1000, u64::MAX)), None);
        assert_eq!(movie_duration_ms(&mvhd(0, 1000, 0)), None);
        assert_eq!(movie_duration_ms(&mvhd(2, 1000, 1000)), None);
        assert_eq!(movie_duration_ms(&mvhd(1, 1000, 1000)[..20]), None);

        // The same in a whole file: its mvhd's timescale set to 0.
        let mut file = include_bytes!("../../../../tests/fixtures/tagged.m4a").to_vec();
        let body_at = file.windows(4).position(|w| w == b"mvhd").unwrap() + 4;
        assert_eq!(file[body_at], 0, "a version 0 mvhd");
        file[body_at + 12..body_at + 16].fill(0);
        assert_eq!(duration_ms(&file), None);
    }
}
