//! Whether an MP4's audio can be played at all: its tables name samples,
//! and every chunk of them lies inside the file. A file that fails (cut
//! off before its media data, a `moov` kept without its `mdat`, a track
//! with no samples) holds nothing a player can decode. Checked from the
//! `moov` the probe holds in memory and the headers of `moof` fragments,
//! never from the media data.

use crate::error::{malformed, ProbeError, Result};
use crate::mp4::{children, find, slice, Atom};
use crate::source::{be_u32, Source};

/// Most bytes of `moof` fragments read to find a sample in them.
const MAX_FRAGMENT_HEADERS: u64 = 16 << 20;

/// Checks the sample tables of the audio tracks (`mdia` bodies as bytes
/// and file offset) and, when they hold no sample, the fragments among the
/// `top` atoms: an error says why nothing could be played.
pub(crate) fn check_playable(src: &Source<'_>, audio_mdias: &[(&[u8], u64)], top: &[Atom]) -> Result<()> {
    let mut samples = 0u64;
    for (mdia, base) in audio_mdias {
        samples += check_track(mdia, *base, src.size())?;
    }
    if samples == 0 && fragment_samples(src, top)? == 0 {
        return malformed("the audio track holds no samples: nothing a player can decode");
    }
    Ok(())
}

/// The samples of one track, once its chunks are found inside the file.
fn check_track(mdia: &[u8], base: u64, file_size: u64) -> Result<u64> {
    let Some(stbl) = descend(mdia, base, &[b"minf", b"stbl"])? else {
        return Ok(0);
    };
    let (stbl_b, stbl_base) = stbl;
    let tables = children(stbl_b, stbl_base)?;
    let body = |kind: &[u8; 4]| find(&tables, kind).map(|a| slice(stbl_b, stbl_base, a));
    let sizes = match (body(b"stsz"), body(b"stz2")) {
        (Some(b), _) => SampleSizes::from_stsz(b)?,
        (None, Some(b)) => SampleSizes::from_stz2(b)?,
        (None, None) => return Ok(0),
    };
    if sizes.count == 0 {
        return Ok(0);
    }
    let offsets = match (body(b"stco"), body(b"co64")) {
        (Some(b), _) => table(b, 4, "stco")?,
        (None, Some(b)) => table(b, 8, "co64")?,
        (None, None) => return malformed("the audio track has samples but no chunk offsets (stco)"),
    };
    let per_chunk = match body(b"stsc") {
        Some(b) => table(b, 12, "stsc")?,
        None => return malformed("the audio track has samples but no sample-to-chunk table (stsc)"),
    };
    check_chunks(&sizes, &offsets, &per_chunk, file_size)?;
    Ok(u64::from(sizes.count))
}

/// Every chunk's samples end inside the file.
fn check_chunks(sizes: &SampleSizes, offsets: &[&[u8]], per_chunk: &[&[u8]], file_size: u64) -> Result<()> {
    let mut sample = 0u32;
    let mut run = 0usize;
    for (i, entry) in offsets.iter().enumerate() {
        let chunk = i as u64 + 1;
        while per_chunk
            .get(run + 1)
            .is_some_and(|next| u64::from(be_u32(next)) <= chunk)
        {
            run += 1;
        }
        let in_chunk = per_chunk.get(run).map_or(0, |e| be_u32(&e[4..]));
        let n = in_chunk.min(sizes.count - sample);
        let bytes = sizes.total(sample, n);
        let offset = match entry.len() {
            8 => u64::from_be_bytes((*entry).try_into().unwrap_or_default()),
            _ => u64::from(be_u32(entry)),
        };
        if offset.checked_add(bytes).is_none_or(|end| end > file_size) {
            return malformed(format!(
                "chunk {chunk} of the audio track ({bytes} bytes at offset {offset}) lies outside \
                 the {file_size}-byte file: its media data is missing"
            ));
        }
        sample += n;
        if sample == sizes.count {
            break;
        }
    }
    Ok(())
}

/// The body of the atom at `path` below a region, as (bytes, offset).
fn descend<'a>(b: &'a [u8], base: u64, path: &[&[u8; 4]]) -> Result<Option<(&'a [u8], u64)>> {
    let (mut b, mut base) = (b, base);
    for kind in path {
        let Some(atom) = find(&children(b, base)?, kind).copied() else {
            return Ok(None);
        };
        b = slice(b, base, &atom);
        base = atom.offset + atom.header;
    }
    Ok(Some((b, base)))
}

/// The entries of a full box that holds a count then `width`-byte entries.
fn table<'a>(body: &'a [u8], width: usize, what: &str) -> Result<Vec<&'a [u8]>> {
    let count = body.get(4..8).map(be_u32).ok_or_else(|| cut_off(what))? as usize;
    let entries = body.get(8..).ok_or_else(|| cut_off(what))?;
    if entries.len() / width < count {
        return Err(cut_off(what));
    }
    Ok(entries.chunks_exact(width).take(count).collect())
}

fn cut_off(what: &str) -> ProbeError {
    ProbeError::Malformed(format!("the {what} table is cut off"))
}

/// Sample sizes, from `stsz` (one size for all, or one each) or `stz2`.
struct SampleSizes<'a> {
    count: u32,
    /// The size of every sample, or 0 when `table` has them.
    constant: u32,
    table: &'a [u8],
    /// Bits per entry of `table`.
    bits: usize,
}

impl<'a> SampleSizes<'a> {
    fn from_stsz(body: &'a [u8]) -> Result<Self> {
        let head = body.get(..12).ok_or_else(|| cut_off("stsz"))?;
        let (constant, count) = (be_u32(&head[4..]), be_u32(&head[8..]));
        let table = &body[12..];
        if constant == 0 && (table.len() / 4) < count as usize {
            return Err(cut_off("stsz"));
        }
        Ok(SampleSizes {
            count,
            constant,
            table,
            bits: 32,
        })
    }

    fn from_stz2(body: &'a [u8]) -> Result<Self> {
        let head = body.get(..12).ok_or_else(|| cut_off("stz2"))?;
        let bits = usize::from(head[7]);
        let count = be_u32(&head[8..]);
        let table = &body[12..];
        if !matches!(bits, 4 | 8 | 16) || (table.len() * 8 / bits) < count as usize {
            return Err(cut_off("stz2"));
        }
        Ok(SampleSizes {
            count,
            constant: 0,
            table,
            bits,
        })
    }

    /// The bytes of `n` samples from `first` on.
    fn total(&self, first: u32, n: u32) -> u64 {
        if self.constant != 0 {
            return u64::from(self.constant) * u64::from(n);
        }
        (first..first + n).map(|i| self.size(i as usize)).sum()
    }

    fn size(&self, i: usize) -> u64 {
        let t = self.table;
        match self.bits {
            32 => u64::from(be_u32(&t[i * 4..])),
            16 => u64::from(u16::from_be_bytes([t[i * 2], t[i * 2 + 1]])),
            8 => u64::from(t[i]),
            _ if i & 1 == 0 => u64::from(t[i / 2] >> 4),
            _ => u64::from(t[i / 2] & 0x0f),
        }
    }
}

/// Samples the `trun` boxes of the `moof` fragments name (read until one
/// is found, within [`MAX_FRAGMENT_HEADERS`]).
fn fragment_samples(src: &Source<'_>, top: &[Atom]) -> Result<u64> {
    let mut read = 0u64;
    for moof in top.iter().filter(|a| &a.kind == b"moof") {
        read += moof.len;
        if read > MAX_FRAGMENT_HEADERS {
            break;
        }
        let (at, len) = (moof.offset + moof.header, moof.len - moof.header);
        let body = src.read(at, len, "moof atom")?;
        for traf in children(&body, at)?.iter().filter(|a| &a.kind == b"traf") {
            let traf_b = slice(&body, at, traf);
            let traf_base = traf.offset + traf.header;
            for trun in children(traf_b, traf_base)?.iter().filter(|a| &a.kind == b"trun") {
                let samples = slice(traf_b, traf_base, trun).get(4..8).map_or(0, be_u32);
                if samples > 0 {
                    return Ok(u64::from(samples));
                }
            }
        }
    }
    Ok(0)
}
