//! FLAC: probe the metadata blocks, synthesize fresh VORBIS_COMMENT and
//! PICTURE blocks in front of the original audio frames.

use std::borrow::Cow;

use retagfs_store::{ArtLink, ScannedPicture};

use crate::duration::millis;
use crate::error::{malformed, ProbeError, Result, SynthesisError};
use crate::layout::Layout;
use crate::probe::Probe;
use crate::source::{be_u24, Source, MAX_READ};
use crate::tags::id3v2_read;
use crate::tags::picture::{flac_picture_header, flac_picture_len, parse_flac_picture, PictureFields};
use crate::tags::vorbis_comment;
use crate::Format;

pub const STREAMINFO: u8 = 0;
pub const APPLICATION: u8 = 2;
pub const SEEKTABLE: u8 = 3;
const VORBIS_COMMENT: u8 = 4;
pub const CUESHEET: u8 = 5;
const PICTURE: u8 = 6;

/// Largest body a metadata block header can describe (24-bit length).
pub const MAX_BLOCK_LEN: u64 = (1 << 24) - 1;

/// A file is FLAC if `fLaC` starts it, possibly after ID3v2 tags.
pub fn probe(src: &Source<'_>) -> Result<Probe> {
    let start = id3v2_read::skip_tags(src)?;
    if src.read(start, 4, "FLAC marker")? != b"fLaC" {
        return malformed("no fLaC marker");
    }
    let mut pos = start + 4;
    let mut probe = Probe::new(Format::Flac);
    let mut saw_streaminfo = false;
    loop {
        let header = src.read(pos, 4, "FLAC metadata block header")?;
        let (last, block_type) = (header[0] & 0x80 != 0, header[0] & 0x7f);
        let len = u64::from(be_u24(&header[1..]));
        let body_at = pos + 4;
        if block_type == 127 {
            return malformed(format!("invalid metadata block type 127 at offset {pos}"));
        }
        match block_type {
            STREAMINFO | APPLICATION | SEEKTABLE | CUESHEET => {
                let body = src.read(body_at, len, "FLAC metadata block")?;
                if block_type == STREAMINFO {
                    if len != 34 || saw_streaminfo {
                        return malformed("STREAMINFO block is not a single 34-byte block");
                    }
                    saw_streaminfo = true;
                }
                probe.flac_blocks.push((block_type, body));
            }
            VORBIS_COMMENT => {
                let body = src.read(body_at, len, "VORBIS_COMMENT block")?;
                let c = vorbis_comment::parse(&body)?;
                probe.vendor = Some(c.vendor);
                probe.tags.extend(c.tags);
                probe.pictures.extend(c.pictures);
            }
            PICTURE => probe.pictures.push(read_picture(src, body_at, len)?),
            // PADDING and reserved blocks are not kept: the served file has
            // exactly the blocks it needs.
            _ => {
                if body_at + len > src.size() {
                    return Err(ProbeError::Truncated(format!(
                        "metadata block of {len} bytes at offset {pos} runs past the end"
                    )));
                }
            }
        }
        if pos == start + 4 && block_type != STREAMINFO {
            return malformed("the first metadata block is not STREAMINFO");
        }
        pos = body_at + len;
        if last {
            break;
        }
    }
    let sync = src.read_upto(pos, 2)?;
    if sync.len() == 2 && (sync[0] != 0xff || sync[1] & 0xfe != 0xf8) {
        return malformed(format!(
            "no FLAC frame sync where the audio should start (offset {pos})"
        ));
    }
    probe.audio_offset = pos;
    probe.audio_length = src.size() - pos;
    if let Some((_, streaminfo)) = probe.flac_blocks.first() {
        let info = StreamInfo::parse(streaminfo);
        check_audio_end(src, pos, &info)?;
        probe.duration_ms = info.duration_ms();
    }
    Ok(probe)
}

/// What the end-of-audio check and the duration need from STREAMINFO.
struct StreamInfo {
    min_block: u64,
    max_frame_len: u64,
    /// 20 bits; 0 is invalid.
    sample_rate: u64,
    /// Samples per channel, 36 bits; 0 means the encoder did not know.
    total_samples: u64,
}

impl StreamInfo {
    fn parse(body: &[u8]) -> StreamInfo {
        StreamInfo {
            min_block: u64::from(u16::from_be_bytes([body[0], body[1]])),
            max_frame_len: u64::from(be_u24(&body[7..])),
            sample_rate: u64::from(be_u24(&body[10..]) >> 4),
            total_samples: u64::from_be_bytes([
                0,
                0,
                0,
                body[13] & 0x0f,
                body[14],
                body[15],
                body[16],
                body[17],
            ]),
        }
    }

    fn duration_ms(&self) -> Option<u64> {
        match self.total_samples {
            0 => None,
            samples => millis(samples, self.sample_rate),
        }
    }
}

static FRAME_HEADER_CRC: crc::Crc<u8> = crc::Crc::<u8>::new(&crc::CRC_8_SMBUS);
static FRAME_CRC: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_UMTS);

/// Bytes of a PICTURE block read first, for the fields before its image.
const PICTURE_FIELDS_READ: u64 = 1024;

/// Reads the PICTURE block of `len` bytes at `at`: its fields first, then
/// its image straight into the buffer the store takes (a cover is most of
/// the block, and copying it once more showed in the first scan of a
/// library with embedded covers). Blocks whose fields do not fit in the
/// first read, or that
/// do not hold together, are read whole and parsed as before, for the same
/// errors.
fn read_picture(src: &Source<'_>, at: u64, len: u64) -> Result<ScannedPicture> {
    let whole = || parse_flac_picture(&src.read(at, len, "PICTURE block")?);
    if len > MAX_READ || at.saturating_add(len) > src.size() {
        return whole();
    }
    let head = src.read(at, len.min(PICTURE_FIELDS_READ), "PICTURE block")?;
    match PictureFields::parse(&head) {
        Ok(fields) if (fields.data_at as u64).saturating_add(fields.data_len as u64) <= len => {
            let image_at = at + fields.data_at as u64;
            let data = src.read(image_at, fields.data_len as u64, "PICTURE image")?;
            Ok(fields.with_image(data))
        }
        _ => whole(),
    }
}

/// A download cut short ends inside a frame, or at a frame boundary before
/// the last sample STREAMINFO announces; either way decoders report errors
/// that the backing file has too, so such a file is refused at scan time.
/// The last complete frame is found from the end: a frame header whose
/// CRC-8 holds, followed by frame bytes whose CRC-16 holds at the end of
/// the file (or before a trailing ID3v1 tag).
fn check_audio_end(src: &Source<'_>, audio_at: u64, info: &StreamInfo) -> Result<()> {
    let mut end = src.size();
    if end >= audio_at + 128 && src.read(end - 128, 3, "ID3v1 tag")? == b"TAG" {
        end -= 128;
    }
    if end == audio_at {
        return Ok(());
    }
    let span = match info.max_frame_len {
        0 => 1 << 20,
        known => (2 * known).clamp(64 << 10, 4 << 20),
    };
    let from = end.saturating_sub(span).max(audio_at);
    let tail = src.read(from, end - from, "last FLAC frames")?;
    let last_frame = (0..tail.len().saturating_sub(1)).rev().find_map(|at| {
        let header = frame_header(&tail[at..], info.min_block)?;
        (FRAME_CRC.checksum(&tail[at..]) == 0).then_some(header)
    });
    match last_frame {
        None => Err(ProbeError::Truncated(format!(
            "the audio ends inside a FLAC frame (no complete frame ends at offset {end})"
        ))),
        Some((first_sample, samples))
            if info.total_samples != 0 && first_sample + samples < info.total_samples =>
        {
            Err(ProbeError::Truncated(format!(
                "the audio ends at sample {} of the {} STREAMINFO announces",
                first_sample + samples,
                info.total_samples
            )))
        }
        Some(_) => Ok(()),
    }
}

/// The first sample and the sample count of the frame whose header starts
/// `bytes`, if a frame header with a valid CRC-8 starts there.
fn frame_header(bytes: &[u8], min_block: u64) -> Option<(u64, u64)> {
    if bytes.len() < 6 || bytes[0] != 0xff || bytes[1] & 0xfe != 0xf8 {
        return None;
    }
    let variable = bytes[1] & 1 == 1;
    let (block_code, rate_code) = (bytes[2] >> 4, bytes[2] & 0x0f);
    if block_code == 0 || rate_code == 15 || bytes[3] & 1 != 0 {
        return None;
    }
    // The frame or sample number, in the UTF-8 style variable-length code.
    let lead = bytes[4];
    let extra = match lead.leading_ones() {
        0 => 0,
        n @ 2..=7 => n as usize - 1,
        _ => return None,
    };
    let mut number = u64::from(lead & (0x7f >> extra));
    for &b in bytes.get(5..5 + extra)? {
        if b & 0xc0 != 0x80 {
            return None;
        }
        number = number << 6 | u64::from(b & 0x3f);
    }
    let mut at = 5 + extra;
    let samples = match block_code {
        1 => 192,
        2..=5 => 576 << (block_code - 2),
        6 => {
            at += 1;
            u64::from(*bytes.get(at - 1)?) + 1
        }
        7 => {
            at += 2;
            u64::from(u16::from_be_bytes([*bytes.get(at - 2)?, *bytes.get(at - 1)?])) + 1
        }
        _ => 256 << (block_code - 8),
    };
    at += match rate_code {
        12 => 1,
        13 | 14 => 2,
        _ => 0,
    };
    let crc = *bytes.get(at)?;
    if FRAME_HEADER_CRC.checksum(&bytes[..at]) != crc {
        return None;
    }
    let first_sample = if variable { number } else { number * min_block };
    Some((first_sample, samples))
}

/// What a FLAC file can carry of a track's tags and pictures.
type Fitting<'a> = (Cow<'a, [(String, String)]>, Vec<&'a ArtLink>);

/// Tags and pictures that fit in FLAC blocks: a comment list over the
/// 24-bit limit loses its longest values, a picture over it is left out.
fn fitting<'a>(vendor: &str, tags: &'a [(String, String)], art: &'a [ArtLink]) -> Fitting<'a> {
    let mut tags = Cow::Borrowed(tags);
    while vorbis_comment::encoded_len(vendor, &tags) > MAX_BLOCK_LEN {
        let longest = (0..tags.len()).max_by_key(|&i| tags[i].1.len()).unwrap_or(0);
        tags.to_mut().remove(longest);
    }
    let art = art
        .iter()
        .filter(|a| flac_picture_len(a) <= MAX_BLOCK_LEN)
        .collect();
    (tags, art)
}

/// Size of the synthesized file, from the lengths of the kept blocks.
pub fn synthesized_len(
    block_lens: &[(u8, u64)],
    vendor: &str,
    tags: &[(String, String)],
    art: &[ArtLink],
    audio_length: u64,
) -> u64 {
    let (tags, art) = fitting(vendor, tags, art);
    let blocks: u64 = block_lens.iter().map(|(_, len)| 4 + len).sum();
    let pictures: u64 = art.iter().map(|a| 4 + flac_picture_len(a)).sum();
    4 + blocks + 4 + vorbis_comment::encoded_len(vendor, &tags) + pictures + audio_length
}

/// `fLaC`, the kept structural blocks, a fresh VORBIS_COMMENT, PICTURE
/// blocks whose image bytes stream from the store, then the audio frames.
pub fn synthesize(
    blocks: &[(u8, Vec<u8>)],
    vendor: &str,
    tags: &[(String, String)],
    art: &[ArtLink],
    audio_offset: u64,
    audio_length: u64,
) -> std::result::Result<Layout, SynthesisError> {
    if blocks.first().map(|b| b.0) != Some(STREAMINFO) {
        return Err("the store has no STREAMINFO block for this FLAC track".into());
    }
    if let Some((t, b)) = blocks.iter().find(|(_, b)| b.len() as u64 > MAX_BLOCK_LEN) {
        return Err(SynthesisError::Rows(format!(
            "stored FLAC block of type {t} is too long ({} bytes)",
            b.len()
        )));
    }
    let (tags, art) = fitting(vendor, tags, art);
    let mut layout = Layout::default();
    layout.push_bytes(b"fLaC");
    for (block_type, body) in blocks {
        layout.push_bytes(&block_header(*block_type, false, body.len() as u64));
        layout.push_bytes(body);
    }
    let mut comment = Vec::with_capacity(vorbis_comment::encoded_len(vendor, &tags) as usize);
    vorbis_comment::encode(vendor, &tags, &mut comment);
    layout.push_bytes(&block_header(
        VORBIS_COMMENT,
        art.is_empty(),
        comment.len() as u64,
    ));
    layout.push_bytes(&comment);
    for (i, link) in art.iter().enumerate() {
        let last = i + 1 == art.len();
        layout.push_bytes(&block_header(PICTURE, last, flac_picture_len(link)));
        layout.push_bytes(&flac_picture_header(link));
        layout.push_art(link.art_rowid, link.data_len);
    }
    layout.push_backing(audio_offset, audio_length);
    Ok(layout)
}

fn block_header(block_type: u8, last: bool, len: u64) -> [u8; 4] {
    let l = (len as u32).to_be_bytes();
    [block_type | if last { 0x80 } else { 0 }, l[1], l[2], l[3]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn link(rowid: i64, len: u64, desc: String) -> ArtLink {
        ArtLink {
            art_rowid: rowid,
            sha256: String::new(),
            mime: "image/png".into(),
            width: 1,
            height: 1,
            depth: 24,
            data_len: len,
            picture_type: 3,
            description: desc,
        }
    }

    proptest! {
        #[test]
        fn size_without_layout_equals_layout_size(
            tags in proptest::collection::vec(("[a-z_ ]{1,12}", ".{0,40}"), 0..12),
            art in proptest::collection::vec((1u64..5000, ".{0,10}"), 0..3),
            seektable in proptest::option::of(0usize..200),
            audio in 0u64..100_000,
        ) {
            let mut blocks = vec![(STREAMINFO, vec![0u8; 34])];
            if let Some(n) = seektable {
                blocks.push((SEEKTABLE, vec![0u8; n * 18]));
            }
            let lens: Vec<(u8, u64)> = blocks.iter().map(|(t, b)| (*t, b.len() as u64)).collect();
            let art: Vec<ArtLink> = art.into_iter().enumerate().map(|(i, (n, d))| link(i as i64 + 1, n, d)).collect();
            let layout = synthesize(&blocks, "v", &tags, &art, 4096, audio).unwrap();
            prop_assert_eq!(layout.len(), synthesized_len(&lens, "v", &tags, &art, audio));
            prop_assert_eq!(layout.len(), layout.segments().iter().map(|s| s.len()).sum::<u64>());
            // The audio is the last segment, exactly the backing range.
            if audio > 0 {
                prop_assert_eq!(*layout.segments().last().unwrap(), crate::Segment::Backing { offset: 4096, len: audio });
            }
        }
    }

    /// A PICTURE body: a PNG declared, `desc`, and `data` (or a length
    /// `claimed` for it).
    fn picture_body(desc: &str, data: &[u8], claimed: Option<u32>) -> Vec<u8> {
        let mut b = Vec::new();
        for field in [&3u32.to_be_bytes()[..], &9u32.to_be_bytes(), b"image/png"] {
            b.extend_from_slice(field);
        }
        b.extend_from_slice(&(desc.len() as u32).to_be_bytes());
        b.extend_from_slice(desc.as_bytes());
        for v in [1u32, 1, 24, 0, claimed.unwrap_or(data.len() as u32)] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.extend_from_slice(data);
        b
    }

    /// The fixture FLAC with these PICTURE blocks after its STREAMINFO.
    fn with_pictures(bodies: &[&[u8]]) -> Vec<u8> {
        let flac = include_bytes!("../../../tests/fixtures/untagged.flac");
        let mut out = b"fLaC".to_vec();
        out.push(flac[4] & 0x7f);
        out.extend_from_slice(&flac[5..42]);
        for (i, body) in bodies.iter().enumerate() {
            let last = flac[4] & 0x80 != 0 && i == bodies.len() - 1;
            out.extend_from_slice(&block_header(PICTURE, last, body.len() as u64));
            out.extend_from_slice(body);
        }
        out.extend_from_slice(&flac[42..]);
        out
    }

    #[test]
    fn pictures_read_in_two_reads_are_those_parsed_from_the_whole_block() {
        let image: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        let long = "d".repeat(PICTURE_FIELDS_READ as usize * 2);
        let bodies = [
            picture_body("cover", &image, None),
            picture_body(&long, &image[..10], None),
            picture_body("", &[], None),
        ];
        let file = with_pictures(&bodies.each_ref().map(|b| &b[..]));
        let probed = probe(&Source::new(&file, file.len() as u64)).unwrap();
        let parsed: Vec<ScannedPicture> = bodies.iter().map(|b| parse_flac_picture(b).unwrap()).collect();
        assert_eq!(probed.pictures, parsed);
        assert_eq!(probed.pictures[0].art.data, image);

        // An image claimed longer than its block: refused as before.
        let bad = picture_body("cover", &image, Some(60_000));
        let file = with_pictures(&[&bad]);
        let err = probe(&Source::new(&file, file.len() as u64)).unwrap_err();
        assert_eq!(err.to_string(), parse_flac_picture(&bad).unwrap_err().to_string());
    }

    fn probed(file: &[u8]) -> Probe {
        let file = file.to_vec();
        probe(&Source::new(&file, file.len() as u64)).unwrap()
    }

    #[test]
    fn duration_is_total_samples_over_the_sample_rate() {
        let tagged = include_bytes!("../../../tests/fixtures/tagged.flac");
        let untagged = include_bytes!("../../../tests/fixtures/untagged.flac");
        // 22 050 samples at 22.05 kHz; ffprobe says 1.000000 s for both.
        assert_eq!(probed(tagged).duration_ms, Some(1000));
        crate::duration::assert_near_ffprobe(probed(untagged).duration_ms, 1.0);
    }

    #[test]
    fn a_streaminfo_without_a_sample_rate_or_a_sample_count_gives_no_duration() {
        // STREAMINFO's body starts at offset 8: its sample rate is the 20
        // bits from offset 18, its sample count the 36 bits from the low
        // nibble of offset 21.
        let mut no_rate = include_bytes!("../../../tests/fixtures/untagged.flac").to_vec();
        no_rate[18] = 0;
        no_rate[19] = 0;
        no_rate[20] &= 0x0f;
        assert_eq!(probed(&no_rate).duration_ms, None);
        let mut no_count = include_bytes!("../../../tests/fixtures/untagged.flac").to_vec();
        no_count[21] &= 0xf0;
        no_count[22..26].fill(0);
        assert_eq!(probed(&no_count).duration_ms, None);
    }

    #[test]
    fn missing_streaminfo_is_an_error() {
        assert!(synthesize(&[], "v", &[], &[], 0, 10).is_err());
        assert!(synthesize(&[(SEEKTABLE, vec![])], "v", &[], &[], 0, 10).is_err());
    }
}
