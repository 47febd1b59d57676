//! Ogg Vorbis and Ogg Opus: read the header packets (the comment packet may
//! span pages and share a page with the setup header), find where the
//! audio pages start.

use crate::error::{malformed, ProbeError, Result};
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
                return Err(ProbeError::Unsupported(
                    "multiplexed Ogg stream (several logical streams)".into(),
                ))
            }
            Some(_) if page.bos => return malformed("second beginning-of-stream page"),
            Some(_) => {}
        }
        total += page.body_len();
        if total > MAX_READ {
            return malformed("Ogg header packets larger than the read limit");
        }
        let body = src.read(page.body_at, page.body_len(), "Ogg page body")?;
        let mut at = 0usize;
        let mut complete = false;
        for (i, &l) in page.lacing.iter().enumerate() {
            let current = packets.last_mut().expect("never empty");
            current.extend_from_slice(&body[at..at + l as usize]);
            at += l as usize;
            if l == 255 {
                continue;
            }
            if packets.len() == header_packets {
                if i + 1 != page.lacing.len() {
                    return malformed("audio data shares a page with the last header packet");
                }
                complete = true;
                break;
            }
            packets.push(Vec::new());
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
    Ok(probe)
}
