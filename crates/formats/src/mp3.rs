//! MP3: ID3v2 tags in front, ID3v1 / APEv2 / Lyrics3 at the end, MPEG
//! frames (including a Xing/Info/LAME frame) in between. Served: one new
//! ID3v2 tag, then the MPEG frames (no trailing ID3v1 or APEv2).

use retagfs_store::ArtLink;

use crate::error::{malformed, Result};
use crate::layout::Layout;
use crate::mp3_duration;
use crate::probe::Probe;
use crate::source::Source;
use crate::tags::ape;
use crate::tags::id3v1;
use crate::tags::id3v2_read;
use crate::tags::id3v2_write::{self, Id3Version};
use crate::tags::keys::{merge_missing, TagList};
use crate::Format;

/// How far past the tags the first frame may start (encoders and taggers
/// sometimes leave padding there).
const SYNC_SEARCH: u64 = 64 * 1024;

/// Length in bytes of the MPEG audio frame whose header is `h`, if `h` is a
/// valid frame header (free-format frames report length 0).
pub fn frame_header(h: &[u8]) -> Option<usize> {
    parse_frame_header(h).map(|header| header.len)
}

/// What a valid MPEG audio frame header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    /// MPEG-1 (not MPEG-2 or 2.5).
    pub mpeg1: bool,
    /// 1, 2 or 3.
    pub layer: u8,
    pub mono: bool,
    /// Bits per second; 0 for free format.
    pub bitrate: u32,
    pub sample_rate: u32,
    /// The frame's length in bytes; 0 for free format.
    pub len: usize,
}

impl FrameHeader {
    /// The samples (per channel) a frame decodes to.
    pub fn samples(&self) -> u64 {
        match (self.layer, self.mpeg1) {
            (1, _) => 384,
            (3, false) => 576,
            _ => 1152,
        }
    }
}

/// The fields of `h`, if it is a valid frame header.
pub(crate) fn parse_frame_header(h: &[u8]) -> Option<FrameHeader> {
    if h.len() < 4 || h[0] != 0xff || h[1] & 0xe0 != 0xe0 {
        return None;
    }
    let version = (h[1] >> 3) & 3; // 0: 2.5, 2: 2, 3: 1
    let layer = (h[1] >> 1) & 3; // 1: III, 2: II, 3: I
    let bitrate_index = (h[2] >> 4) as usize;
    let rate_index = ((h[2] >> 2) & 3) as usize;
    if version == 1 || layer == 0 || bitrate_index == 15 || rate_index == 3 || h[3] & 3 == 2 {
        return None;
    }
    const RATES: [[u32; 3]; 4] = [
        [11025, 12000, 8000],
        [0; 3],
        [22050, 24000, 16000],
        [44100, 48000, 32000],
    ];
    const V1_L1: [u32; 15] = [
        0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448,
    ];
    const V1_L2: [u32; 15] = [0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384];
    const V1_L3: [u32; 15] = [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320];
    const V2_L1: [u32; 15] = [0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256];
    const V2_L23: [u32; 15] = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160];
    let mpeg1 = version == 3;
    let table = match (mpeg1, layer) {
        (true, 3) => &V1_L1,
        (true, 2) => &V1_L2,
        (true, _) => &V1_L3,
        (false, 3) => &V2_L1,
        (false, _) => &V2_L23,
    };
    let bitrate = table[bitrate_index] * 1000;
    let rate = RATES[version as usize][rate_index];
    let padding = u32::from((h[2] >> 1) & 1);
    let len = match layer {
        3 => (12 * bitrate / rate + padding) * 4,
        1 if !mpeg1 => 72 * bitrate / rate + padding,
        _ => 144 * bitrate / rate + padding,
    };
    Some(FrameHeader {
        mpeg1,
        layer: 4 - layer,
        mono: h[3] >> 6 == 3,
        bitrate,
        sample_rate: rate,
        len: len as usize,
    })
}

/// Consecutive frames that show a sync is MPEG audio, not chance bytes
/// (a picture's, a damaged tag's) that look like a frame header.
const RUN: usize = 3;

/// The longest MPEG audio frame (MPEG-2.5 layer II, 160 kbit/s at 8 kHz).
const MAX_FRAME_LEN: u64 = 2881;

/// The first bytes of the audio range and where in them the first frame
/// a decoder plays starts, if the range holds such frames: a run of
/// [`RUN`] frames of one stream within [`SYNC_SEARCH`] bytes of its start,
/// or fewer that end where the audio ends (a file of one or two frames, or
/// one cut off within its next frame), at least one of them audio (an
/// Xing/Info/VBRI frame is not). Reads at most the search window and a
/// run's length past it.
fn first_decodable_frame(src: &Source<'_>, start: u64, end: u64) -> Result<Option<(Vec<u8>, usize)>> {
    let audio_len = end - start;
    let window = src.read_upto(
        start,
        (SYNC_SEARCH + RUN as u64 * MAX_FRAME_LEN + 4).min(audio_len),
    )?;
    let searched = window.len().min(SYNC_SEARCH as usize);
    let first =
        (0..searched).find(|&i| frame_header(&window[i..]).is_some() && run_from(&window, i, audio_len));
    Ok(first.map(|at| (window, at)))
}

/// Whether the frames from `first` on form a decodable run ([`first_decodable_frame`]).
/// `w` holds the audio from its start, `audio_len` bytes in all.
fn run_from(w: &[u8], first: usize, audio_len: u64) -> bool {
    let (mut pos, mut frames, mut audio_frames) = (first, 0, 0);
    loop {
        if pos as u64 + 4 > audio_len {
            // The audio ends here, or within the next frame's header.
            return audio_frames > 0;
        }
        let Some(h) = w.get(pos..pos + 4) else {
            return false;
        };
        let Some(len) = frame_header(h).filter(|_| same_stream(&w[first..], h)) else {
            return false;
        };
        if len == 0 {
            // Free format: the frame length is where the next header is.
            return w[pos + 4..].windows(3).any(|next| next == &h[..3]);
        }
        if (pos + len) as u64 > audio_len {
            // Cut off within this frame: the frames before it play.
            return audio_frames > 0;
        }
        if !w.get(pos..pos + len).is_some_and(is_info_frame) {
            audio_frames += 1;
        }
        frames += 1;
        pos += len;
        if frames >= RUN && audio_frames > 0 {
            return true;
        }
    }
}

/// Whether two frame headers are of one stream: MPEG version, layer and
/// sample rate agree.
fn same_stream(a: &[u8], b: &[u8]) -> bool {
    a[1] & 0xfe == b[1] & 0xfe && a[2] & 0x0c == b[2] & 0x0c
}

/// Whether a frame is an encoder's Xing, Info or VBRI header, which holds
/// no audio (its tag sits after the side information, within 40 bytes).
fn is_info_frame(frame: &[u8]) -> bool {
    // A header that reads as a frame shorter than itself (hostile input)
    // has no room for one.
    (frame.get(4..frame.len().min(44))).is_some_and(|body| {
        body.windows(4)
            .any(|w| w == b"Xing" || w == b"Info" || w == b"VBRI")
    })
}

/// The served file: a fresh ID3v2 tag, then the audio as it is.
pub fn synthesize(
    tags: &[(String, String)],
    art: &[ArtLink],
    version: Id3Version,
    audio_offset: u64,
    audio_length: u64,
) -> Layout {
    let mut layout = Layout::default();
    id3v2_write::push_tag(&mut layout, tags, art, version);
    layout.push_backing(audio_offset, audio_length);
    layout
}

pub fn probe(src: &Source<'_>) -> Result<Probe> {
    let mut v2 = TagList::new();
    let mut probe = Probe::new(Format::Mp3);
    let start = id3v2_read::read_leading(src, &mut v2, &mut probe.pictures)?;

    // Trailing containers, innermost last: [audio][APE][Lyrics3][TAG+][ID3v1].
    let mut end = src.size();
    let mut v1 = Vec::new();
    if end >= start + id3v1::LEN {
        let tail = src.read(end - id3v1::LEN, id3v1::LEN, "ID3v1 tag")?;
        if id3v1::is_tag(&tail) {
            v1 = id3v1::parse(&tail);
            end -= id3v1::LEN;
            // A tagger that appended a new ID3v1 tag instead of replacing the
            // old one left both. The old one is a stale tag, not audio: served
            // at the end of the audio, it would be read as the tag.
            while end >= start + id3v1::LEN
                && id3v1::is_tag(&src.read(end - id3v1::LEN, id3v1::LEN, "ID3v1 tag")?)
            {
                end -= id3v1::LEN;
            }
            if end >= start + id3v1::ENHANCED_LEN
                && src.read(end - id3v1::ENHANCED_LEN, 4, "enhanced ID3v1 tag")? == b"TAG+"
            {
                end -= id3v1::ENHANCED_LEN;
            }
        }
    }
    let mut ape_tags = Vec::new();
    loop {
        // None of them reaches into the leading tag: bytes there (a tag
        // value that reads "APETAGEX") are not a trailing tag's.
        if let Some(lyrics_start) = ape::lyrics3_before(src, start, end)? {
            end = lyrics_start;
        } else if let Some(tag) = ape::read_before(src, start, end)? {
            end = tag.start;
            ape_tags = tag.tags;
            probe.pictures.extend(tag.pictures);
        } else {
            break;
        }
    }
    if end < start {
        return malformed("trailing tags overlap the leading ID3v2 tag");
    }

    let Some((head, first_frame)) = first_decodable_frame(src, start, end)? else {
        return malformed(format!(
            "no MPEG audio frames within {SYNC_SEARCH} bytes after the tags (offset {start}): \
             nothing a player can decode"
        ));
    };
    // Bytes between the tags and the first frame (padding left by taggers)
    // stay part of the audio range: decoders treat them differently (a
    // LAME header after junk is not recognised), and the served file must
    // decode exactly like the original.

    probe.tags = v2.finish();
    merge_missing(&mut probe.tags, ape_tags);
    merge_missing(&mut probe.tags, v1);
    probe.audio_offset = start;
    probe.audio_length = end - start;
    probe.duration_ms = mp3_duration::duration_ms(&head[first_frame..], end - start - first_frame as u64);
    Ok(probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_shorter_than_its_header_is_no_info_frame() {
        assert!(!is_info_frame(&[0xff]));
        assert!(!is_info_frame(&[0xff, 0xfb, 0x90, 0x00]));
        assert!(is_info_frame(b"\xff\xfb\x90\x00 Xing"));
    }

    fn id3v1_tag(title: &str) -> Vec<u8> {
        let mut tag = b"TAG".to_vec();
        tag.extend_from_slice(title.as_bytes());
        tag.resize(id3v1::LEN as usize, 0);
        tag
    }

    #[test]
    fn a_stale_id3v1_tag_before_the_last_is_not_audio() {
        let mut frame = vec![0u8; 417];
        frame[..4].copy_from_slice(&[0xff, 0xfb, 0x90, 0x00]);
        let audio = frame.repeat(3);
        let file = [audio.clone(), id3v1_tag("Old"), id3v1_tag("New")].concat();
        let p = probe(&Source::new(&file as &dyn crate::ReadAt, file.len() as u64)).unwrap();
        assert_eq!((p.audio_offset, p.audio_length), (0, audio.len() as u64));
        assert!(
            p.tags.contains(&("title".to_string(), "New".to_string())),
            "{:?}",
            p.tags
        );
    }

    /// A 417-byte MPEG-1 layer III frame; an Info frame with `info`.
    fn frame(info: bool) -> Vec<u8> {
        let mut f = vec![0u8; 417];
        f[..4].copy_from_slice(&[0xff, 0xfb, 0x90, 0x00]);
        if info {
            f[36..40].copy_from_slice(b"Info");
        }
        f
    }

    fn probed(file: &[u8]) -> Result<Probe> {
        let file = file.to_vec();
        probe(&Source::new(&file as &dyn crate::ReadAt, file.len() as u64))
    }

    #[test]
    fn one_or_two_frames_play_and_so_does_a_file_cut_off_after_them() {
        let one = [frame(true), frame(false)].concat();
        assert!(probed(&one).is_ok());
        let two = [frame(false), frame(false)].concat();
        assert!(probed(&two).is_ok());
        let cut = [frame(true), frame(false), frame(false)[..100].to_vec()].concat();
        assert!(probed(&cut).is_ok());
    }

    #[test]
    fn bytes_with_no_run_of_frames_are_refused() {
        let info_only = frame(true);
        assert!(probed(&info_only).is_err(), "an Info frame holds no audio");
        let cut_first = frame(false)[..300].to_vec();
        assert!(probed(&cut_first).is_err(), "no complete frame");
        // A chance sync among other bytes (a picture, a damaged tag).
        let mut junk = vec![0x55u8; 20_000];
        junk[5000..5004].copy_from_slice(&[0xff, 0xfb, 0x90, 0x00]);
        junk[9000..9004].copy_from_slice(&[0xff, 0xfb, 0x90, 0x00]);
        let err = probed(&junk).unwrap_err().to_string();
        assert!(err.contains("no MPEG audio frames"), "{err}");
    }

    #[test]
    fn junk_before_a_run_of_frames_is_played_through() {
        let mut junk = vec![0x55u8; 3000];
        junk[100..104].copy_from_slice(&[0xff, 0xfb, 0x90, 0x00]);
        let file = [junk, frame(false).repeat(4)].concat();
        let p = probed(&file).unwrap();
        assert_eq!((p.audio_offset, p.audio_length), (0, file.len() as u64));
    }

    #[test]
    fn frame_lengths() {
        // MPEG-1 layer III, 128 kbps, 44.1 kHz, no padding: 417 bytes.
        assert_eq!(frame_header(&[0xff, 0xfb, 0x90, 0x00]), Some(417));
        // MPEG-2 layer III, 64 kbps, 22.05 kHz: 208 bytes.
        assert_eq!(frame_header(&[0xff, 0xf3, 0x80, 0x00]), Some(208));
        assert_eq!(frame_header(&[0xff, 0xfb, 0xf0, 0x00]), None);
        assert_eq!(frame_header(b"ID3\x04"), None);
    }
}
