//! Ogg Vorbis and Ogg Opus: read the header packets (the comment packet may
//! span pages and share a page with the setup header), find where the
//! audio pages start.

use std::sync::Arc;

use retagfs_store::{ArtLink, BackingPart, PartKind};

use crate::error::{malformed, ProbeError, Result};
use crate::layout::Layout;
use crate::ogg_pages::{self, AudioPages, Base64, HeaderPage, StreamSerial};
use crate::picture::flac_picture_header;
use crate::probe::Probe;
use crate::source::{le_u32, Source, MAX_READ};
use crate::{vorbis_comment, Format};

const PAGE_HEADER_LEN: u64 = 27;

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
        if !ogg_pages::checksum_ok(&whole) {
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
    probe.tags = comments.tags;
    probe.pictures = comments.pictures;
    probe.audio_offset = audio_offset;
    probe.audio_length = src.size() - audio_offset;
    let serial = serial.unwrap_or_default();
    probe.passthrough = passthrough.or(audio_pages_problem(
        src,
        audio_offset,
        header_pages.len(),
        serial,
    )?);
    probe.parts = header_pages;
    if format == Format::Vorbis {
        probe.parts.extend(pieces.swap_remove(2));
    }
    Ok(probe)
}

/// Why the audio pages cannot be renumbered in flight, if they cannot:
/// every page from the first audio page to the end of the file must be a
/// page of the stream (a page of another stream means a chain or a
/// multiplex, anything else damage or trailing bytes), the first continuing
/// the header pages' sequence, the last ending at the end of the file (a
/// file cut inside a page is an error: truncated). Only page headers are
/// looked at, read a window at a time.
fn audio_pages_problem(
    src: &Source<'_>,
    audio_offset: u64,
    header_pages: usize,
    serial: u32,
) -> Result<Option<String>> {
    const WINDOW: u64 = 256 << 10;
    const LONGEST_HEADER: u64 = PAGE_HEADER_LEN + 255;
    let size = src.size();
    let (mut window, mut window_at) = (Vec::new(), audio_offset);
    let mut pos = audio_offset;
    while pos < size {
        if pos + LONGEST_HEADER.min(size - pos) > window_at + window.len() as u64 {
            window_at = pos;
            window = src.read(pos, WINDOW.min(size - pos), "Ogg audio pages")?;
        }
        let h = &window[(pos - window_at) as usize..];
        // A download cut short: refused like a truncated FLAC, not served
        // as it is (its tags could not follow the store).
        let truncated = || {
            Err(ProbeError::Truncated(format!(
                "the Ogg page at offset {pos} runs past the end of the file"
            )))
        };
        if h.len() < PAGE_HEADER_LEN as usize {
            return truncated();
        }
        if &h[..5] != b"OggS\0" {
            return Ok(Some(format!(
                "no Ogg page at offset {pos} (damage or trailing bytes)"
            )));
        }
        if le_u32(&h[14..]) != serial {
            return Ok(Some(if h[5] & 2 != 0 {
                "chained Ogg stream (several streams in a row)".to_string()
            } else {
                "multiplexed Ogg stream (several logical streams)".to_string()
            }));
        }
        if h[5] & 2 != 0 {
            return Ok(Some(format!("a second logical stream begins at offset {pos}")));
        }
        if pos == audio_offset && le_u32(&h[18..]) as usize != header_pages {
            return Ok(Some(
                "page sequence numbers do not follow the header pages".into(),
            ));
        }
        let segments = h[26] as usize;
        let Some(lacing) = h.get(PAGE_HEADER_LEN as usize..PAGE_HEADER_LEN as usize + segments) else {
            return truncated();
        };
        let len = PAGE_HEADER_LEN + segments as u64 + lacing.iter().map(|&l| u64::from(l)).sum::<u64>();
        if pos + len > size {
            return truncated();
        }
        pos += len;
    }
    Ok(None)
}

/// New header pages carrying the store's comments and pictures (after the
/// original identification page), then the original audio pages renumbered.
pub fn synthesize(
    format: Format,
    parts: &[BackingPart],
    tags: &[(String, String)],
    art: &[ArtLink],
    audio_offset: u64,
    audio_length: u64,
) -> std::result::Result<Layout, String> {
    let pages: Vec<&BackingPart> = parts.iter().filter(|p| p.kind == PartKind::Page).collect();
    let Some(first) = pages.first() else {
        return Err("the store has no header pages for this Ogg track".into());
    };
    let setup: Vec<&BackingPart> = parts.iter().filter(|p| p.kind == PartKind::Packet).collect();
    if (format == Format::Vorbis) == setup.is_empty() {
        return Err("the store's Vorbis setup header does not match the format".into());
    }
    let mut stream = Layout::default();
    let comment_len = push_comment_packet(&mut stream, format, tags, art);
    let mut packet_lens = vec![comment_len];
    if format == Format::Vorbis {
        for piece in &setup {
            stream.push_backing(piece.offset, piece.length);
        }
        packet_lens.push(setup.iter().map(|p| p.length).sum());
    }
    let stream = Arc::new(stream);
    let plans = ogg_pages::paginate(&packet_lens);
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
    layout.push_computed(Arc::new(AudioPages::new(
        audio_offset,
        audio_length,
        new_header_pages.wrapping_sub(pages.len() as u32),
        serial,
    )));
    Ok(layout)
}

/// The comment header packet: Vorbis or Opus magic, the comment list with
/// a METADATA_BLOCK_PICTURE field per picture (base64 of a FLAC picture
/// block whose image streams from the store), and the Vorbis framing bit.
fn push_comment_packet(
    stream: &mut Layout,
    format: Format,
    tags: &[(String, String)],
    art: &[ArtLink],
) -> u64 {
    const PICTURE_FIELD: &[u8] = b"METADATA_BLOCK_PICTURE=";
    let start = stream.len();
    let mut head = match format {
        Format::Vorbis => b"\x03vorbis".to_vec(),
        _ => b"OpusTags".to_vec(),
    };
    let count_at = head.len() + 4 + vorbis_comment::VENDOR.len();
    vorbis_comment::encode(tags, &mut head);
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
