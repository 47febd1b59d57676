//! Ogg Vorbis and Ogg Opus: read the header packets (the comment packet may
//! span pages and share a page with the setup header), find where the
//! audio pages start.

mod duration;
pub(crate) mod pages;

use std::sync::Arc;

use retagfs_store::{ArtLink, BackingPart, PartKind};

use crate::error::{malformed, ProbeError, Result, SynthesisError};
use crate::layout::Layout;
use crate::probe::Probe;
use crate::source::{le_u32, Source, MAX_READ};
use crate::tags::picture::flac_picture_header;
use crate::tags::vorbis_comment;
use crate::Format;
use pages::{AudioPages, Base64, HeaderPage, StreamSerial};

/// An Ogg page header before its lacing values.
const PAGE_HEADER_LEN: u64 = pages::HEADER_LEN as u64;

/// A page header: where its body starts and the lacing values.
struct Page {
    serial: u32,
    bos: bool,
    lacing: Vec<u8>,
    body_at: u64,
}

impl Page {
    fn body_len(&self) -> u64 {
        self.lacing.iter().map(|&l| u64::from(l)).sum()
    }

    fn end(&self) -> u64 {
        self.body_at + self.body_len()
    }
}

fn read_page(src: &Source<'_>, pos: u64) -> Result<Page> {
    let h = src.read(pos, PAGE_HEADER_LEN, "Ogg page header")?;
    if &h[..4] != b"OggS" || h[4] != 0 {
        return malformed(format!("no Ogg page at offset {pos}"));
    }
    let segments = u64::from(h[26]);
    let lacing = src.read(pos + PAGE_HEADER_LEN, segments, "Ogg lacing values")?;
    let page = Page {
        serial: le_u32(&h[14..]),
        bos: h[5] & 2 != 0,
        lacing,
        body_at: pos + PAGE_HEADER_LEN + segments,
    };
    if page.end() > src.size() {
        return Err(ProbeError::Truncated(format!(
            "Ogg page at offset {pos} runs past the end"
        )));
    }
    Ok(page)
}

/// Vorbis or Opus, from the first packet of the first page.
pub fn first_packet_kind(src: &Source<'_>) -> Result<Option<Format>> {
    let page = read_page(src, 0)?;
    let head = src.read_upto(page.body_at, 8)?;
    Ok(if head.starts_with(b"\x01vorbis") {
        Some(Format::Vorbis)
    } else if head.starts_with(b"OpusHead") {
        Some(Format::Opus)
    } else {
        None
    })
}

pub fn probe(src: &Source<'_>, format: Format) -> Result<Probe> {
    let header_packets = if format == Format::Vorbis { 3 } else { 2 };
    let mut packets: Vec<Vec<u8>> = vec![Vec::new()];
    // Where each header packet's bytes lie in the file, page by page.
    let mut pieces: Vec<Vec<BackingPart>> = vec![Vec::new()];
    let mut header_pages = Vec::new();
    let mut passthrough = None;
    let mut pos = 0u64;
    let mut serial = None;
    let mut total = 0u64;
    // Collect whole packets until the header packets are complete; the
    // audio starts with the page after the one that completes them.
    let audio_offset = loop {
        let page = read_page(src, pos)?;
        match serial {
            None => serial = Some(page.serial),
            Some(s) if s != page.serial => {
                passthrough = Some("multiplexed Ogg stream (several logical streams)".to_string());
                pos = page.end();
                continue;
            }
            Some(_) if page.bos => return malformed("second beginning-of-stream page"),
            Some(_) => {}
        }
        header_pages.push(BackingPart::new(PartKind::Page, pos, page.end() - pos));
        total += page.body_len();
        if total > MAX_READ {
            return malformed("Ogg header packets larger than the read limit");
        }
        let whole = src.read(pos, page.end() - pos, "Ogg header page")?;
        if !pages::checksum_ok(&whole) {
            return malformed(format!("Ogg header page at offset {pos} fails its checksum"));
        }
        let body = &whole[(page.body_at - pos) as usize..];
        let mut at = 0usize;
        let mut complete = false;
        for (i, &l) in page.lacing.iter().enumerate() {
            let current = packets.last_mut().expect("never empty");
            current.extend_from_slice(&body[at..at + l as usize]);
            let piece = pieces.last_mut().expect("never empty");
            match piece.last_mut() {
                Some(p) if p.end() == page.body_at + at as u64 => p.length += u64::from(l),
                _ => piece.push(BackingPart::new(
                    PartKind::Packet,
                    page.body_at + at as u64,
                    u64::from(l),
                )),
            }
            at += l as usize;
            if l == 255 {
                continue;
            }
            if packets.len() == 1 && (pos != 0 || i + 1 != page.lacing.len()) {
                passthrough.get_or_insert("the first page holds more than the identification header".into());
            }
            if packets.len() == header_packets {
                if i + 1 != page.lacing.len() {
                    return malformed("audio data shares a page with the last header packet");
                }
                complete = true;
                break;
            }
            packets.push(Vec::new());
            pieces.push(Vec::new());
        }
        pos = page.end();
        if complete {
            break pos;
        }
    };

    let comment = &packets[1];
    let body = match format {
        Format::Vorbis => comment.strip_prefix(b"\x03vorbis"),
        _ => comment.strip_prefix(b"OpusTags"),
    }
    .ok_or_else(|| ProbeError::Malformed("second header packet is not a comment header".into()))?;
    let comments = vorbis_comment::parse(body)?;
    let mut probe = Probe::new(format);
    probe.vendor = Some(comments.vendor);
    probe.tags = comments.tags;
    probe.pictures = comments.pictures;
    probe.audio_offset = audio_offset;
    probe.audio_length = src.size() - audio_offset;
    let serial = serial.unwrap_or_default();
    let scan = scan_audio_pages(src, audio_offset, header_pages.len(), serial)?;
    probe.passthrough = passthrough.or(scan.problem);
    probe.duration_ms = scan
        .last_granule
        .and_then(|granule| duration::duration_ms(format, &packets[0], granule));
    probe.parts = header_pages;
    if format == Format::Vorbis {
        probe.parts.extend(pieces.swap_remove(2));
    }
    Ok(probe)
}

/// How many bytes of audio pages a scan walks from the first audio page,
/// and how many it checks at the end of the file. The pages between are
/// walked when they are read (damage there is served as it is, see
/// `pages::AudioPages`): a first scan must not read a whole library of
/// Ogg files.
const WALKED_FIRST: u64 = 64 << 10;
const CHECKED_LAST: u64 = 128 << 10;

/// What a scan learns from the audio pages.
#[derive(Debug)]
struct AudioPagesScan {
    /// Why the pages cannot be renumbered in flight, if they cannot.
    problem: Option<String>,
    /// The granule position of the stream's last page (its length in
    /// samples), if the pages read have one.
    last_granule: Option<u64>,
}

/// Most bytes at the end of a short file read again for its last granule
/// position, when a problem stopped the walk before any page had one.
const TAIL_FOR_DURATION: u64 = 64 << 10;

/// Why the audio pages cannot be renumbered in flight, if they cannot:
/// every page from the first audio page to the end of the file must be a
/// page of the stream (a page of another stream means a chain or a
/// multiplex, anything else damage or trailing bytes), the first continuing
/// the header pages' sequence, the last ending at the end of the file (a
/// file cut inside a page is an error: truncated). Short files are walked
/// whole, longer ones at their start and end. And the stream's last
/// granule position, from the pages walked in a short file, from the
/// bytes checked at the end of a longer one (read even when the start has
/// a problem already: the duration is there).
fn scan_audio_pages(
    src: &Source<'_>,
    audio_offset: u64,
    header_pages: usize,
    serial: u32,
) -> Result<AudioPagesScan> {
    let size = src.size();
    let last_from = size.saturating_sub(CHECKED_LAST);
    if last_from <= audio_offset + WALKED_FIRST {
        let mut walked = walk_pages(src, audio_offset, size, header_pages, serial)?;
        if walked.problem.is_some() && walked.last_granule.is_none() {
            let from = size.saturating_sub(TAIL_FOR_DURATION).max(audio_offset);
            walked.last_granule = duration::last_granule(&read_from(src, from)?, serial);
        }
        return Ok(walked);
    }
    let stop = audio_offset + WALKED_FIRST;
    let walked = walk_pages(src, audio_offset, stop, header_pages, serial)?;
    let tail = read_from(src, last_from)?;
    let problem = match walked.problem {
        Some(problem) => Some(problem),
        None => last_pages_problem(&tail, last_from, serial)?,
    };
    Ok(AudioPagesScan {
        problem,
        last_granule: duration::last_granule(&tail, serial),
    })
}

/// The file's bytes from `from` to its end (the last Ogg pages).
fn read_from(src: &Source<'_>, from: u64) -> Result<Vec<u8>> {
    src.read(from, src.size() - from, "the last Ogg pages")
}

/// The page headers from the first audio page on, until a page starts at
/// or after `stop`, read a window at a time: the first problem found, and
/// the last granule position of the pages before it.
fn walk_pages(
    src: &Source<'_>,
    audio_offset: u64,
    stop: u64,
    header_pages: usize,
    serial: u32,
) -> Result<AudioPagesScan> {
    const WINDOW: u64 = 256 << 10;
    const LONGEST_HEADER: u64 = PAGE_HEADER_LEN + 255;
    let size = src.size();
    let (mut window, mut window_at) = (Vec::new(), audio_offset);
    let mut pos = audio_offset;
    let mut last_granule = None;
    let stopped = |problem, last_granule| {
        Ok(AudioPagesScan {
            problem: Some(problem),
            last_granule,
        })
    };
    while pos < stop {
        if pos + LONGEST_HEADER.min(size - pos) > window_at + window.len() as u64 {
            window_at = pos;
            let wanted = WINDOW.min(stop - pos + LONGEST_HEADER).min(size - pos);
            window = src.read(pos, wanted, "Ogg audio pages")?;
        }
        let h = &window[(pos - window_at) as usize..];
        if h.len() < PAGE_HEADER_LEN as usize {
            return Err(runs_past_the_end(pos));
        }
        if !h.starts_with(b"OggS\0") {
            return stopped(not_a_page(pos), last_granule);
        }
        if let Some(problem) = stream_problem(h, pos, serial) {
            return stopped(problem, last_granule);
        }
        if pos == audio_offset && le_u32(&h[18..]) as usize != header_pages {
            return stopped(
                "page sequence numbers do not follow the header pages".into(),
                last_granule,
            );
        }
        last_granule = duration::granule(h).or(last_granule);
        match pages::declared_page_len(h, 0) {
            Some(len) if pos + len as u64 <= size => pos += len as u64,
            _ => return Err(runs_past_the_end(pos)),
        }
    }
    Ok(AudioPagesScan {
        problem: None,
        last_granule,
    })
}

/// Why the pages in the file's last bytes (`tail`, from offset `from`)
/// cannot be renumbered, if they cannot: the first page start there whose
/// chain of pages ends exactly at the end of the file must begin a chain
/// of pages of this stream alone. The pages before it are not looked at.
fn last_pages_problem(tail: &[u8], from: u64, serial: u32) -> Result<Option<String>> {
    // How the chain from the first page start of this stream ends, when
    // no chain reaches the end: the reason the file is refused or served
    // as it is.
    let mut first_of_stream = None;
    for start in (0..tail.len()).filter(|&c| tail[c..].starts_with(b"OggS\0")) {
        let end = follow_pages(tail, start, from, serial);
        if let ChainEnd::AtEnd(problem) = end {
            return Ok(problem);
        }
        let serial_at = tail.get(start + 14..start + 18);
        if first_of_stream.is_none() && serial_at.is_none_or(|s| *s == serial.to_le_bytes()) {
            first_of_stream = Some(end);
        }
    }
    match first_of_stream {
        Some(ChainEnd::CutShort(at)) => Err(runs_past_the_end(from + at as u64)),
        Some(ChainEnd::NotAPage(at)) => Ok(Some(not_a_page(from + at as u64))),
        _ => Ok(Some(
            "no Ogg page of the stream ends the file (damage or trailing bytes)".into(),
        )),
    }
}

/// Where a chain of pages, followed from a page start, ends.
enum ChainEnd {
    /// At the end of the bytes; why its pages cannot be renumbered, if
    /// one cannot.
    AtEnd(Option<String>),
    /// At bytes that are not a page.
    NotAPage(usize),
    /// At a page that runs past the end of the bytes.
    CutShort(usize),
}

/// Follows the pages in `tail` (the file's bytes from `from`) from `start`.
fn follow_pages(tail: &[u8], start: usize, from: u64, serial: u32) -> ChainEnd {
    let mut problem = None;
    let mut pos = start;
    while pos < tail.len() {
        let h = &tail[pos..];
        if h.len() < PAGE_HEADER_LEN as usize {
            return ChainEnd::CutShort(pos);
        }
        if !h.starts_with(b"OggS\0") {
            return ChainEnd::NotAPage(pos);
        }
        match pages::declared_page_len(h, 0) {
            Some(len) if len <= h.len() => {
                problem = problem.or_else(|| stream_problem(h, from + pos as u64, serial));
                pos += len;
            }
            _ => return ChainEnd::CutShort(pos),
        }
    }
    ChainEnd::AtEnd(problem)
}

/// Why a page (header bytes `h`, at `pos`) of the audio cannot be
/// renumbered as a page of the stream `serial`, if it cannot.
fn stream_problem(h: &[u8], pos: u64, serial: u32) -> Option<String> {
    let bos = h[5] & 2 != 0;
    if le_u32(&h[14..]) != serial {
        return Some(if bos {
            "chained Ogg stream (several streams in a row)".to_string()
        } else {
            "multiplexed or chained Ogg stream (pages of another stream)".to_string()
        });
    }
    bos.then(|| format!("a second logical stream begins at offset {pos}"))
}

fn not_a_page(pos: u64) -> String {
    format!("no Ogg page at offset {pos} (damage or trailing bytes)")
}

/// A download cut short: refused like a truncated FLAC, not served as it
/// is (its tags could not follow the store).
fn runs_past_the_end(pos: u64) -> ProbeError {
    ProbeError::Truncated(format!(
        "the Ogg page at offset {pos} runs past the end of the file"
    ))
}

/// New header pages carrying the store's comments and pictures (after the
/// original identification page), then the original audio pages. The
/// header takes as many pages as the original one where the packets fit
/// (the comment padded if need be), so that the audio pages are served
/// as they are; only a header that needs more pages has the audio pages
/// renumbered.
pub fn synthesize(
    format: Format,
    parts: &[BackingPart],
    vendor: &str,
    tags: &[(String, String)],
    art: &[ArtLink],
    audio_offset: u64,
    audio_length: u64,
) -> std::result::Result<Layout, SynthesisError> {
    let pages: Vec<&BackingPart> = parts.iter().filter(|p| p.kind == PartKind::Page).collect();
    let Some(first) = pages.first() else {
        return Err("the store has no header pages for this Ogg track".into());
    };
    let setup: Vec<&BackingPart> = parts.iter().filter(|p| p.kind == PartKind::Packet).collect();
    if (format == Format::Vorbis) == setup.is_empty() {
        return Err("the store's Vorbis setup header does not match the format".into());
    }
    let mut stream = Layout::default();
    let mut comment_len = push_comment_packet(&mut stream, format, vendor, tags, art);
    let setup_len: u64 = setup.iter().map(|p| p.length).sum();
    let original_pages = pages.len() - 1;
    let padding = padding_to_fill(
        original_pages,
        comment_len,
        (format == Format::Vorbis).then_some(setup_len),
    );
    stream.push_bytes(&vec![0; padding as usize]);
    comment_len += padding;
    let mut packet_lens = vec![comment_len];
    if format == Format::Vorbis {
        for piece in &setup {
            stream.push_backing(piece.offset, piece.length);
        }
        packet_lens.push(setup_len);
    }
    stream.shrink_to_fit();
    let stream = Arc::new(stream);
    let plans =
        pages::paginate_into(&packet_lens, original_pages).unwrap_or_else(|| pages::paginate(&packet_lens));
    let new_header_pages = 1 + plans.len() as u32;
    let serial = Arc::new(StreamSerial::new(first.offset));
    let mut layout = Layout::default();
    layout.push_backing(first.offset, first.length);
    for (i, plan) in plans.into_iter().enumerate() {
        layout.push_computed(Arc::new(HeaderPage::new(
            plan,
            1 + i as u32,
            stream.clone(),
            serial.clone(),
        )));
    }
    match new_header_pages.wrapping_sub(pages.len() as u32) {
        0 => layout.push_backing(audio_offset, audio_length),
        seq_delta => layout.push_computed(Arc::new(AudioPages::new(
            audio_offset,
            audio_length,
            seq_delta,
            serial,
        ))),
    }
    Ok(layout)
}

/// Most zero bytes a comment packet is padded with to fill the original
/// number of header pages (one lacing value, 255 bytes, per page short).
const MAX_PADDING: u64 = 64 << 10;

/// How many zero bytes after the comments (which Vorbis and Opus readers
/// skip) give the header packets a lacing value for each of `pages`
/// pages, when they have fewer and the padding is small.
fn padding_to_fill(pages: usize, comment_len: u64, setup_len: Option<u64>) -> u64 {
    let lacing = pages::lacing_count(comment_len) + setup_len.map_or(0, pages::lacing_count);
    let padding = (pages as u64).saturating_sub(lacing) * 255;
    if padding <= MAX_PADDING {
        padding
    } else {
        0
    }
}

/// The comment header packet: Vorbis or Opus magic, the comment list with
/// a METADATA_BLOCK_PICTURE field per picture (base64 of a FLAC picture
/// block whose image streams from the store), and the Vorbis framing bit.
fn push_comment_packet(
    stream: &mut Layout,
    format: Format,
    vendor: &str,
    tags: &[(String, String)],
    art: &[ArtLink],
) -> u64 {
    const PICTURE_FIELD: &[u8] = b"METADATA_BLOCK_PICTURE=";
    let start = stream.len();
    let mut head = match format {
        Format::Vorbis => b"\x03vorbis".to_vec(),
        _ => b"OpusTags".to_vec(),
    };
    let count_at = head.len() + 4 + vendor.len();
    vorbis_comment::encode(vendor, tags, &mut head);
    let count = (tags.len() + art.len()) as u32;
    head[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
    stream.push_bytes(&head);
    for link in art {
        let mut block = Layout::default();
        block.push_bytes(&flac_picture_header(link));
        block.push_art(link.art_rowid, link.data_len);
        let encoded = Base64::encoded_len(block.len());
        stream.push_bytes(&((PICTURE_FIELD.len() as u64 + encoded) as u32).to_le_bytes());
        stream.push_bytes(PICTURE_FIELD);
        stream.push_computed(Arc::new(Base64 { inner: block }));
    }
    if format == Format::Vorbis {
        stream.push_bytes(&[1]);
    }
    stream.len() - start
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Segment;

    #[test]
    fn a_layout_counts_the_comment_text_its_header_pages_hold() {
        let parts = [BackingPart::new(PartKind::Page, 0, 47)];
        let heap = |tags: &[(String, String)]| {
            let mut layout = synthesize(
                Format::Opus,
                &parts,
                vorbis_comment::VENDOR,
                tags,
                &[],
                47,
                10_000,
            )
            .unwrap();
            layout.shrink_to_fit();
            layout.heap_bytes()
        };
        let lyrics = [("lyrics".to_string(), "la ".repeat(40_000))];
        let (short, long) = (heap(&[]), heap(&lyrics));
        assert!(short < 2_000, "{short}");
        // The text is held once, whatever pages it spans.
        assert!((120_000..125_000).contains(&(long - short)), "{short} {long}");
    }

    /// An Opus file's header pages: the identification page and
    /// `comment_pages` pages of 300 bytes after it; its audio starts after.
    fn opus_header(comment_pages: u64) -> (Vec<BackingPart>, u64) {
        let mut parts = vec![BackingPart::new(PartKind::Page, 0, 47)];
        parts.extend((0..comment_pages).map(|i| BackingPart::new(PartKind::Page, 47 + 300 * i, 300)));
        (parts, 47 + 300 * comment_pages)
    }

    #[test]
    fn a_header_that_fits_the_original_pages_leaves_the_audio_pages_as_they_are() {
        let short = [("title".to_string(), "Song".to_string())];
        let long = [("lyrics".to_string(), "la ".repeat(40_000))];
        // (header pages, audio pages as they are, length served)
        let served = |pages: u64, tags: &[(String, String)]| {
            let (parts, audio_at) = opus_header(pages);
            let layout = synthesize(
                Format::Opus,
                &parts,
                vorbis_comment::VENDOR,
                tags,
                &[],
                audio_at,
                10_000,
            )
            .unwrap();
            let as_is = Segment::Backing {
                offset: audio_at,
                len: 10_000,
            };
            let segments = layout.segments();
            (segments.len() - 2, segments.last() == Some(&as_is), layout.len())
        };
        let (header_pages, as_is, one_page_len) = served(1, &short);
        assert_eq!((header_pages, as_is), (1, true));
        // 120 kB of comments need two pages where the original had one:
        // the audio pages are renumbered.
        let (header_pages, as_is, _) = served(1, &long);
        assert_eq!((header_pages, as_is), (2, false));
        // Five pages (a picture the store no longer holds): the comment is
        // padded to a lacing value per page, 255 bytes each.
        let (header_pages, as_is, len) = served(5, &short);
        assert_eq!((header_pages, as_is), (5, true));
        assert_eq!(len - one_page_len, 4 * (255 + 27 + 1));
    }

    const SERIAL: u32 = 0x1234_5678;
    /// Audio pages of this test stream follow three header pages.
    const HEADER_PAGES: usize = 3;

    /// A page of `body_len` bytes of `fill` (its checksum is not looked at).
    fn page(serial: u32, seq: u32, flags: u8, body_len: usize, fill: u8) -> Vec<u8> {
        let mut lacing = vec![255u8; body_len / 255];
        lacing.push((body_len % 255) as u8);
        let mut p = b"OggS\0".to_vec();
        p.push(flags);
        p.extend_from_slice(&[0; 8]);
        p.extend_from_slice(&serial.to_le_bytes());
        p.extend_from_slice(&seq.to_le_bytes());
        p.extend_from_slice(&[0; 4]);
        p.push(lacing.len() as u8);
        p.extend_from_slice(&lacing);
        p.resize(p.len() + body_len, fill);
        p
    }

    /// `count` audio pages of about 4 KiB from sequence number `first_seq`.
    fn audio(serial: u32, first_seq: u32, count: u32) -> Vec<u8> {
        (0..count)
            .flat_map(|i| page(serial, first_seq + i, 0, 4000 + i as usize % 7, i as u8))
            .collect()
    }

    /// The problem found in `audio_bytes` as the audio of a file whose
    /// header pages take its first 100 bytes.
    fn problem(audio_bytes: &[u8]) -> Result<Option<String>> {
        let file = [vec![0u8; 100], audio_bytes.to_vec()].concat();
        let src = Source::new(&file, file.len() as u64);
        scan_audio_pages(&src, 100, HEADER_PAGES, SERIAL).map(|scan| scan.problem)
    }

    #[test]
    fn short_and_long_streams_of_whole_pages_can_be_renumbered() {
        for count in [1, 10, 100, 400] {
            assert_eq!(problem(&audio(SERIAL, 3, count)).unwrap(), None, "{count} pages");
        }
    }

    #[test]
    fn a_long_stream_cut_short_is_refused() {
        let whole = audio(SERIAL, 3, 100);
        // Inside a page's body, inside its header, inside its lacing values.
        for cut in [1000, whole.len() - 4010, whole.len() - 4030] {
            let err = problem(&whole[..whole.len() - cut]).unwrap_err();
            assert!(matches!(err, ProbeError::Truncated(_)), "cut {cut}: {err}");
        }
    }

    #[test]
    fn the_end_of_a_long_stream_decides_how_it_is_served() {
        let whole = audio(SERIAL, 3, 100);
        let with = |more: &[u8]| problem(&[&whole[..], more].concat()).unwrap();
        let id3v1 = [b"TAG".to_vec(), vec![b' '; 125]].concat();
        assert!(with(&id3v1).unwrap().contains("trailing bytes"));
        // Another file appended (a chain), with its own serial number or
        // with this one.
        let chained = [page(7, 0, 2, 30, 1), audio(7, 1, 50)].concat();
        assert!(with(&chained).unwrap().contains("chained Ogg stream"));
        let second = [page(SERIAL, 0, 2, 30, 1), audio(SERIAL, 1, 3)].concat();
        assert!(with(&second).unwrap().contains("second logical stream"));
        // Audio bytes that look like a page start are not one.
        let mut lookalike = whole.clone();
        let at = lookalike.len() - 2000;
        lookalike[at..at + 5].copy_from_slice(b"OggS\0");
        assert_eq!(problem(&lookalike).unwrap(), None);
    }

    #[test]
    fn the_start_of_a_long_stream_must_follow_the_header_pages() {
        let problem = problem(&audio(SERIAL, 5, 100)).unwrap();
        assert!(problem.unwrap().contains("sequence numbers"));
    }

    /// `page` with this granule position and a checksum that holds.
    fn with_granule(mut page: Vec<u8>, granule: u64) -> Vec<u8> {
        page[6..14].copy_from_slice(&granule.to_le_bytes());
        page[22..26].fill(0);
        let crc = pages::crc(&page);
        page[22..26].copy_from_slice(&crc.to_le_bytes());
        page
    }

    /// [`audio`] pages whose granule positions count 1000 samples a page.
    fn timed_audio(first_seq: u32, count: u32) -> Vec<u8> {
        let pages = (0..count).map(|i| page(SERIAL, first_seq + i, 0, 4000 + i as usize % 7, i as u8));
        pages
            .zip(1..)
            .flat_map(|(page, n)| with_granule(page, n * 1000))
            .collect()
    }

    /// The last granule position found in `audio_bytes` as the audio of a
    /// file whose header pages take its first 100 bytes.
    fn last_granule(audio_bytes: &[u8]) -> Option<u64> {
        let file = [vec![0u8; 100], audio_bytes.to_vec()].concat();
        let src = Source::new(&file, file.len() as u64);
        scan_audio_pages(&src, 100, HEADER_PAGES, SERIAL)
            .unwrap()
            .last_granule
    }

    #[test]
    fn the_last_granule_position_is_that_of_the_last_page() {
        let id3v1 = [b"TAG".to_vec(), vec![b' '; 125]].concat();
        // Short streams walked whole, long ones read at their end.
        for count in [1, 10, 100] {
            let whole = timed_audio(3, count);
            assert_eq!(
                last_granule(&whole),
                Some(u64::from(count) * 1000),
                "{count} pages"
            );
            let trailing = [whole, id3v1.clone()].concat();
            assert_eq!(
                last_granule(&trailing),
                Some(u64::from(count) * 1000),
                "{count} + ID3v1"
            );
            // A walk stopped on its first page: the end is read for it.
            let misnumbered = timed_audio(5, count);
            assert_eq!(
                last_granule(&misnumbered),
                Some(u64::from(count) * 1000),
                "{count}, misnumbered"
            );
        }
    }

    #[test]
    fn a_page_start_in_the_last_page_s_body_is_not_its_granule_position() {
        let mut last = page(SERIAL, 103, 0, 4000, 9);
        let at = last.len() - 100;
        last[at..at + 5].copy_from_slice(b"OggS\0");
        last[at + 6..at + 14].copy_from_slice(&7u64.to_le_bytes());
        last[at + 14..at + 18].copy_from_slice(&SERIAL.to_le_bytes());
        last[at + 26] = 0;
        let stream = [timed_audio(3, 100), with_granule(last, 123_456)].concat();
        assert_eq!(last_granule(&stream), Some(123_456));
    }

    /// The fixture's probe, after `edit` changed its identification header
    /// packet (the first page's checksum made to hold again).
    fn probed_with_ident(file: &[u8], format: Format, edit: impl FnOnce(&mut [u8])) -> Probe {
        let mut file = file.to_vec();
        let first_page_len = pages::declared_page_len(&file, 0).unwrap();
        let ident_at = PAGE_HEADER_LEN as usize + file[26] as usize;
        edit(&mut file[ident_at..first_page_len]);
        let page = with_granule(file[..first_page_len].to_vec(), 0);
        file[..first_page_len].copy_from_slice(&page);
        probe(&Source::new(&file, file.len() as u64), format).unwrap()
    }

    const VORBIS: &[u8] = include_bytes!("../../../../tests/fixtures/tagged.ogg");
    const OPUS: &[u8] = include_bytes!("../../../../tests/fixtures/tagged.opus");

    #[test]
    fn duration_is_the_last_granule_position_over_the_sample_rate() {
        // 1 s at 22.05 kHz; ffprobe says 1.000000 s.
        let vorbis = probed_with_ident(VORBIS, Format::Vorbis, |_| {});
        assert_eq!(vorbis.duration_ms, Some(1000));
        crate::duration::assert_near_ffprobe(vorbis.duration_ms, 1.0);
        // ffprobe says 1.006500 s: it counts the 312 samples of pre-skip
        // (6.5 ms) that decoders drop.
        let opus = probed_with_ident(OPUS, Format::Opus, |_| {});
        assert_eq!(opus.duration_ms, Some(1000));
        crate::duration::assert_near_ffprobe(opus.duration_ms, 1.0065);
    }

    #[test]
    fn a_zero_sample_rate_or_a_pre_skip_past_the_end_gives_no_duration() {
        let no_rate = probed_with_ident(VORBIS, Format::Vorbis, |ident| ident[12..16].fill(0));
        assert_eq!(no_rate.duration_ms, None);
        let long_pre_skip = probed_with_ident(OPUS, Format::Opus, |ident| ident[10..12].fill(0xff));
        assert_eq!(long_pre_skip.duration_ms, None);
    }

    /// The cost of not reading whole files at scan time: damage between
    /// the first and last pages is found when it is read, not by the scan.
    #[test]
    fn the_middle_of_a_long_stream_is_not_read() {
        let mut damaged = audio(SERIAL, 3, 100);
        let middle = damaged.len() / 2;
        damaged[middle..middle + 8192].fill(0);
        assert_eq!(problem(&damaged).unwrap(), None);
        let short = audio(SERIAL, 3, 30);
        let mut damaged = short.clone();
        damaged[60_000..60_000 + 8192].fill(0);
        assert!(problem(&damaged).unwrap().unwrap().contains("no Ogg page"));
    }
}
