//! Ogg pages computed at read time: fresh header pages around packets that
//! stream from the store, and the original audio pages with their sequence
//! numbers shifted and checksums recomputed. Nothing is built at open time,
//! and a read far into a long file does not read all that comes before.

use parking_lot::Mutex;
use std::io;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use base64::Engine;

use crate::layout::{span_union, Computed, Layout, SegmentSource};

pub const HEADER_LEN: usize = 27;
/// Largest page: header, 255 lacing values, 255 segments of 255 bytes.
const MAX_PAGE_LEN: usize = HEADER_LEN + 255 + 255 * 255;
/// Offset of the page sequence number and the checksum in a page header.
const SEQ_AT: usize = 18;
const CRC_AT: usize = 22;
const SERIAL_AT: usize = 14;

/// The generator polynomial of the Ogg checksum, without its x^32 term.
const OGG_POLY: u32 = 0x04c1_1db7;

/// The Ogg checksum: CRC-32, polynomial 0x04c11db7, no reflection, zero
/// initial value and no final xor. Every audio byte served goes through
/// it, hence the 16-way sliced tables.
static OGG_CRC: crc::Crc<u32, crc::Table<16>> = crc::Crc::<u32, crc::Table<16>>::new(&crc::Algorithm {
    width: 32,
    poly: OGG_POLY,
    init: 0,
    refin: false,
    refout: false,
    xorout: 0,
    check: 0x89a1_897f,
    residue: 0,
});

pub fn crc(data: &[u8]) -> u32 {
    OGG_CRC.checksum(data)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Length of the page whose header (and lacing) starts `window[at..]`, if
/// it is a page header; the page may run past the window.
pub fn declared_page_len(window: &[u8], at: usize) -> Option<usize> {
    let h = window.get(at..at + HEADER_LEN)?;
    if &h[..5] != b"OggS\0" {
        return None;
    }
    let segments = h[26] as usize;
    let lacing = window.get(at + HEADER_LEN..at + HEADER_LEN + segments)?;
    Some(HEADER_LEN + segments + lacing.iter().map(|&l| l as usize).sum::<usize>())
}

pub fn checksum_ok(page: &[u8]) -> bool {
    let stored = u32::from_le_bytes([page[CRC_AT], page[CRC_AT + 1], page[CRC_AT + 2], page[CRC_AT + 3]]);
    let mut copy = page.to_vec();
    copy[CRC_AT..CRC_AT + 4].fill(0);
    crc(&copy) == stored
}

/// Base64 of the bytes of an inner layout (a FLAC picture block whose image
/// streams from the store), as carried by METADATA_BLOCK_PICTURE.
pub struct Base64 {
    pub inner: Layout,
}

impl Base64 {
    pub fn encoded_len(n: u64) -> u64 {
        n.div_ceil(3) * 4
    }
}

impl Computed for Base64 {
    fn len(&self) -> u64 {
        Base64::encoded_len(self.inner.len())
    }

    fn read(&self, pos: u64, out: &mut [u8], src: &dyn SegmentSource) -> io::Result<()> {
        // Whole 3-byte groups of input cover the 4-byte groups of output.
        let first_group = pos / 4;
        let last_group = (pos + out.len() as u64).div_ceil(4);
        let mut raw = vec![0u8; ((last_group - first_group) * 3) as usize];
        let n = self.inner.read_at(first_group * 3, &mut raw, src)?;
        raw.truncate(n);
        let encoded = base64::engine::general_purpose::STANDARD.encode(&raw);
        let skip = (pos - first_group * 4) as usize;
        out.copy_from_slice(&encoded.as_bytes()[skip..skip + out.len()]);
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.inner.heap_bytes()
    }

    fn backing_span(&self, pos: u64, len: u64) -> Option<Range<u64>> {
        let first_group = pos / 4;
        let last_group = (pos + len).div_ceil(4);
        self.inner
            .backing_span(first_group * 3, (last_group - first_group) * 3)
    }
}

/// Splits `packets` (lengths, in order) into as few pages as they fit
/// in, at most 255 lacing values each; returns for each page its lacing
/// values, where its body starts in the packet stream, whether it
/// continues a packet, and whether a packet ends on it.
pub fn paginate(packets: &[u64]) -> Vec<PagePlan> {
    let lacing = lacing_values(packets);
    let counts = lacing.chunks(255).map(<[u8]>::len);
    plans(&lacing, counts)
}

/// Splits `packets` into exactly `pages` pages, if their lacing values
/// are at least one and at most 255 per page: the first pages full, one
/// lacing value on each of the last ones where there are few.
pub fn paginate_into(packets: &[u64], pages: usize) -> Option<Vec<PagePlan>> {
    let lacing = lacing_values(packets);
    if lacing.len() < pages || lacing.len() > pages * 255 {
        return None;
    }
    let mut left = lacing.len();
    let counts = (0..pages).map(|i| {
        let n = (left - (pages - 1 - i)).min(255);
        left -= n;
        n
    });
    Some(plans(&lacing, counts))
}

/// How many lacing values a packet of `len` bytes takes: one per 255
/// bytes and one that ends it (0 after a multiple of 255).
pub fn lacing_count(len: u64) -> u64 {
    len / 255 + 1
}

fn lacing_values(packets: &[u64]) -> Vec<u8> {
    let mut lacing = Vec::new();
    for &len in packets {
        lacing.resize(lacing.len() + (len / 255) as usize, 255);
        lacing.push((len % 255) as u8);
    }
    lacing
}

/// Pages of `counts` lacing values each, in order.
fn plans(lacing: &[u8], counts: impl Iterator<Item = usize>) -> Vec<PagePlan> {
    let mut pages: Vec<PagePlan> = Vec::new();
    let (mut at, mut body_start) = (0, 0);
    for n in counts {
        let values = &lacing[at..at + n];
        let continued = at > 0 && lacing[at - 1] == 255;
        let plan = PagePlan {
            lacing: values.to_vec(),
            body_start,
            continued,
            packet_ends: values.iter().any(|&l| l < 255),
        };
        body_start += plan.body_len();
        pages.push(plan);
        at += n;
    }
    debug_assert_eq!(at, lacing.len());
    pages
}

#[derive(Debug, Clone)]
pub struct PagePlan {
    pub lacing: Vec<u8>,
    pub body_start: u64,
    pub continued: bool,
    pub packet_ends: bool,
}

impl PagePlan {
    pub fn body_len(&self) -> u64 {
        self.lacing.iter().map(|&l| u64::from(l)).sum()
    }

    pub fn len(&self) -> u64 {
        (HEADER_LEN + self.lacing.len()) as u64 + self.body_len()
    }
}

/// The stream's serial number, read from the original first page the first
/// time a page needs it (the store does not keep it).
pub struct StreamSerial {
    first_page: u64,
    value: OnceLock<[u8; 4]>,
}

impl StreamSerial {
    /// The serial of the stream whose first page starts at `first_page`.
    pub fn new(first_page: u64) -> StreamSerial {
        StreamSerial {
            first_page,
            value: OnceLock::new(),
        }
    }

    fn get(&self, src: &dyn SegmentSource) -> io::Result<[u8; 4]> {
        if let Some(v) = self.value.get() {
            return Ok(*v);
        }
        let mut serial = [0u8; 4];
        src.read_backing(self.first_page + SERIAL_AT as u64, &mut serial)?;
        Ok(*self.value.get_or_init(|| serial))
    }

    fn span(&self) -> Range<u64> {
        let at = self.first_page + SERIAL_AT as u64;
        at..at + 4
    }
}

/// One fresh header page: its body is a range of the packet stream.
pub struct HeaderPage {
    plan: PagePlan,
    seq: u32,
    stream: Arc<Layout>,
    serial: Arc<StreamSerial>,
    /// The page's checksum once the whole page was built: a later read of
    /// part of the page builds only that part (a comment page with cover
    /// art is up to 64 KiB of base64 to encode and checksum).
    checksum: OnceLock<[u8; 4]>,
}

impl HeaderPage {
    pub fn new(plan: PagePlan, seq: u32, stream: Arc<Layout>, serial: Arc<StreamSerial>) -> HeaderPage {
        HeaderPage {
            plan,
            seq,
            stream,
            serial,
            checksum: OnceLock::new(),
        }
    }

    /// The page header (with a zero checksum) and its lacing values.
    fn head(&self, src: &dyn SegmentSource) -> io::Result<Vec<u8>> {
        let mut head = Vec::with_capacity(HEADER_LEN + self.plan.lacing.len());
        head.extend_from_slice(b"OggS\0");
        head.push(u8::from(self.plan.continued));
        // Header pages carry granule position 0 where a packet ends on
        // them, and -1 (no packet ends) otherwise.
        let granule: i64 = if self.plan.packet_ends { 0 } else { -1 };
        head.extend_from_slice(&granule.to_le_bytes());
        head.extend_from_slice(&self.serial.get(src)?);
        head.extend_from_slice(&self.seq.to_le_bytes());
        head.extend_from_slice(&[0; 4]);
        head.push(self.plan.lacing.len() as u8);
        head.extend_from_slice(&self.plan.lacing);
        Ok(head)
    }

    /// The whole page, its checksum computed (and kept).
    fn bytes(&self, src: &dyn SegmentSource) -> io::Result<Vec<u8>> {
        let mut page = self.head(src)?;
        let body_at = page.len();
        page.resize(body_at + self.plan.body_len() as usize, 0);
        self.stream
            .read_at(self.plan.body_start, &mut page[body_at..], src)?;
        let sum = crc(&page).to_le_bytes();
        page[CRC_AT..CRC_AT + 4].copy_from_slice(&sum);
        let _ = self.checksum.set(sum);
        Ok(page)
    }

    /// `out.len()` bytes of the page from `pos`, once its checksum is known:
    /// the header from memory, the body straight from the packet stream.
    fn read_part(&self, pos: usize, out: &mut [u8], sum: [u8; 4], src: &dyn SegmentSource) -> io::Result<()> {
        let mut head = self.head(src)?;
        head[CRC_AT..CRC_AT + 4].copy_from_slice(&sum);
        let from_head = head.len().saturating_sub(pos).min(out.len());
        if from_head > 0 {
            out[..from_head].copy_from_slice(&head[pos..pos + from_head]);
        }
        if from_head == out.len() {
            return Ok(());
        }
        let body_pos = (pos.max(head.len()) - head.len()) as u64;
        self.stream
            .read_at(self.plan.body_start + body_pos, &mut out[from_head..], src)
            .map(|_| ())
    }
}

impl Computed for HeaderPage {
    fn len(&self) -> u64 {
        self.plan.len()
    }

    fn read(&self, pos: u64, out: &mut [u8], src: &dyn SegmentSource) -> io::Result<()> {
        if let Some(&sum) = self.checksum.get() {
            return self.read_part(pos as usize, out, sum, src);
        }
        let page = self.bytes(src)?;
        out.copy_from_slice(&page[pos as usize..pos as usize + out.len()]);
        Ok(())
    }

    /// The packet stream is shared by the header pages: the first counts it.
    fn heap_bytes(&self) -> usize {
        let stream = if self.seq == 1 {
            self.stream.heap_bytes()
        } else {
            0
        };
        self.plan.lacing.capacity() + stream
    }

    /// Any read of the page builds all of it.
    fn backing_span(&self, _pos: u64, _len: u64) -> Option<Range<u64>> {
        let body = self
            .stream
            .backing_span(self.plan.body_start, self.plan.body_len());
        span_union(Some(self.serial.span()), body)
    }
}

/// The original audio pages, from `offset` to the end of the file, with
/// `seq_delta` added to each sequence number and the checksum recomputed.
/// Bytes that are no page of the stream (damage the scan did not look at)
/// are served as they are, up to the next checked page (`damage_end`).
/// A second stream that reuses the serial number (files encoded with one
/// fixed serial and concatenated, which the scan cannot see in the middle
/// of a long file) is renumbered with the rest: a read far into it, which
/// finds its page by checksum, cannot know where it began, and decoders
/// start each stream at its first page whatever its number.
///
/// Page boundaries are found by walking the page chain forward from a
/// known page start (the first audio page, or one an earlier read walked
/// to): searching for a capture pattern near a read can be fooled by audio
/// bytes that look like a page of this stream. Only a read more than
/// `SEARCH_BEYOND` past any known start searches, and checks what it finds.
pub struct AudioPages {
    pub offset: u64,
    pub len: u64,
    pub seq_delta: u32,
    pub serial: Arc<StreamSerial>,
    starts: Mutex<KnownStarts>,
}

/// Page starts reads have reached.
struct KnownStarts {
    /// Where the last read's last page starts: a sequential read walks on
    /// from there.
    last: u64,
    /// Ascending, about one per `KNOWN_STRIDE` bytes: a read far from the
    /// last one walks from the nearest, not from the first audio page.
    kept: Vec<u64>,
    /// Damaged ranges found (bytes that are no page, up to the next page),
    /// the latest `DAMAGE_KEPT`: each read in one would search it again.
    damage: Vec<Range<u64>>,
}

const DAMAGE_KEPT: usize = 16;

/// How far apart the page starts in `KnownStarts::kept` are.
const KNOWN_STRIDE: u64 = 64 * 1024;
/// Most backing bytes read at once while walking page headers.
const WALK_CHUNK: usize = 256 * 1024;
/// How far a read may be from the nearest known page start before its page
/// is looked for near it rather than walked to: a player seeking into a
/// long cold file (an audiobook) must not wait for everything before it
/// to come from disk or a network share first.
const SEARCH_BEYOND: u64 = 2 << 20;

impl AudioPages {
    pub fn new(offset: u64, len: u64, seq_delta: u32, serial: Arc<StreamSerial>) -> AudioPages {
        AudioPages {
            offset,
            len,
            seq_delta,
            serial,
            starts: Mutex::new(KnownStarts {
                last: offset,
                kept: vec![offset],
                damage: Vec::new(),
            }),
        }
    }

    fn end(&self) -> u64 {
        self.offset + self.len
    }

    fn starts(&self) -> parking_lot::MutexGuard<'_, KnownStarts> {
        self.starts.lock()
    }
    /// The page containing `at` found near it, far from any known page
    /// start: the last checked page (`checked_page_len`) before `at` that
    /// reaches `at`. Audio bytes pass that only if made to: a file built to
    /// look like pages inside pages can be served differently from two
    /// sides, which walking never is; short files are always walked.
    fn checked_page_near(
        &self,
        at: u64,
        serial: &[u8; 4],
        src: &dyn SegmentSource,
    ) -> io::Result<Option<u64>> {
        let from = at.saturating_sub(MAX_PAGE_LEN as u64).max(self.offset);
        let to = (at + (MAX_PAGE_LEN + HEADER_LEN) as u64).min(self.end());
        let mut window = vec![0u8; (to - from) as usize];
        src.read_backing(from, &mut window)?;
        let stream_ends = (self.end() - from) as usize;
        for c in (0..=(at - from) as usize).rev() {
            let Some(len) = checked_page_len(&window, c, serial, stream_ends) else {
                continue;
            };
            if from + (c + len) as u64 > at {
                return Ok(Some(from + c as u64));
            }
        }
        Ok(None)
    }

    /// Where damage that starts at `from` (bytes that are no page of this
    /// stream) ends: at the first checked page (`checked_page_len`) after
    /// it, or at the end of the stream. Decoders resynchronise on the next
    /// page the same way; the damaged bytes are served as they are.
    fn damage_end(&self, from: u64, serial: &[u8; 4], src: &dyn SegmentSource) -> io::Result<u64> {
        if let Some(end) = self.starts().damage_end(from) {
            return Ok(end);
        }
        let mut at = from + 1;
        let end = loop {
            if at >= self.end() {
                break self.end();
            }
            let to = (at + (WALK_CHUNK + MAX_PAGE_LEN + HEADER_LEN) as u64).min(self.end());
            let mut window = vec![0u8; (to - at) as usize];
            src.read_backing(at, &mut window)?;
            let stream_ends = (self.end() - at) as usize;
            let candidates = 0..WALK_CHUNK.min(window.len());
            let found = candidates
                .into_iter()
                .find(|&c| checked_page_len(&window, c, serial, stream_ends).is_some());
            if let Some(c) = found {
                break at + c as u64;
            }
            at += WALK_CHUNK as u64;
        };
        self.starts().keep_damage(from, end);
        Ok(end)
    }

    /// Where the page that contains backing offset `at` starts: the page
    /// headers walked from the nearest known page start, a chunk of backing
    /// bytes at a time (a small read per header cost more than the bytes
    /// between).
    fn page_containing(&self, at: u64, src: &dyn SegmentSource) -> io::Result<u64> {
        let serial = self.serial.get(src)?;
        let mut start = self.starts().nearest_before(at);
        if at - start > SEARCH_BEYOND {
            if let Some(page) = self.checked_page_near(at, &serial, src)? {
                return Ok(page);
            }
        }
        let first_want = |start: u64| {
            ((at - start) as usize + HEADER_LEN + 255)
                .min(WALK_CHUNK)
                .min((self.end() - start) as usize)
        };
        let mut want = first_want(start);
        WALK.with_borrow_mut(|buf| loop {
            if start >= self.end() {
                return Err(invalid(format!("no Ogg page reaches offset {at}")));
            }
            if buf.len() < want {
                buf.resize(want, 0);
            }
            // One page start kept per chunk walked.
            self.starts().keep(start);
            let chunk = &mut buf[..want];
            src.read_backing(start, chunk)?;
            let mut p = 0;
            loop {
                let page = start + p as u64;
                match unit_at(chunk, p, &serial, self.end() - page) {
                    Unit::Page(len) if at < page + len as u64 => return Ok(page),
                    Unit::Page(len) => p += len,
                    Unit::Damage => {
                        let end = self.damage_end(page, &serial, src)?;
                        if at < end {
                            return Ok(page);
                        }
                        start = end;
                        want = first_want(start);
                        break;
                    }
                    // The first unit needs more than was read: read more;
                    // a later one: the next chunk starts there.
                    Unit::NeedMore(n) if p == 0 => {
                        want = n.min((self.end() - start) as usize);
                        break;
                    }
                    Unit::NeedMore(_) => {
                        start = page;
                        want = first_want(start);
                        break;
                    }
                }
            }
        })
    }
}

impl KnownStarts {
    /// The known page start nearest before `at`.
    fn nearest_before(&self, at: u64) -> u64 {
        let kept = self.kept[self.kept.partition_point(|&k| k <= at).saturating_sub(1)];
        if self.last <= at {
            kept.max(self.last)
        } else {
            kept
        }
    }

    /// Where the damage that contains `at` ends, if it was found before.
    fn damage_end(&self, at: u64) -> Option<u64> {
        self.damage.iter().find(|d| d.contains(&at)).map(|d| d.end)
    }

    fn keep_damage(&mut self, from: u64, end: u64) {
        if self.damage.len() == DAMAGE_KEPT {
            self.damage.remove(0);
        }
        self.damage.push(from..end);
    }

    /// Keeps `start` (a page start a read reached) when no kept one is
    /// within `KNOWN_STRIDE` of it.
    fn keep(&mut self, start: u64) {
        let i = self.kept.partition_point(|&k| k <= start);
        let far_from_before = i > 0 && start - self.kept[i - 1] >= KNOWN_STRIDE;
        let far_from_after = self.kept.get(i).is_none_or(|&next| next - start >= KNOWN_STRIDE);
        if far_from_before && far_from_after {
            self.kept.insert(i, start);
        }
    }
}

/// What starts at `bytes[p..]`, as a walk of the audio pages sees it.
enum Unit {
    /// A page of this stream, `len` bytes long, followed by the header of
    /// another page of this stream or by the end of the stream, or whole
    /// by its checksum.
    Page(usize),
    /// Bytes that are no such page: damage, up to the next checked page.
    Damage,
    /// More bytes are needed to tell, `bytes[p..p + n]` in all.
    NeedMore(usize),
}

/// Tells a page from damage at `bytes[p..]`, `stream_left` bytes before
/// the end of the stream. A page must be followed by another page's header,
/// end the stream, or have a valid checksum: a header whose lacing values
/// were damaged would otherwise take the walk into the middle of the pages
/// after it, where a read that finds its page by checksums would not.
fn unit_at(bytes: &[u8], p: usize, serial: &[u8; 4], stream_left: u64) -> Unit {
    let rest = &bytes[p..];
    if stream_left < HEADER_LEN as u64 {
        return Unit::Damage;
    }
    if rest.len() < HEADER_LEN {
        return Unit::NeedMore(HEADER_LEN);
    }
    if !heads_page_of(rest, serial) {
        return Unit::Damage;
    }
    let Some(len) = declared_page_len(rest, 0) else {
        let header = HEADER_LEN + rest[26] as usize;
        return if header as u64 <= stream_left {
            Unit::NeedMore(header)
        } else {
            Unit::Damage
        };
    };
    let followed_at = len + HEADER_LEN;
    match stream_left {
        left if left == len as u64 => Unit::Page(len),
        left if left < followed_at as u64 => Unit::Damage,
        _ if rest.len() < followed_at => Unit::NeedMore(followed_at),
        _ if heads_page_of(&rest[len..], serial) || checksum_ok(&rest[..len]) => Unit::Page(len),
        _ => Unit::Damage,
    }
}

/// The length of the page that starts `window[at..]` if it is a checked
/// page of this stream: a header of this stream, a valid checksum, and the
/// header of another page of this stream after it, or the end of the
/// stream (`stream_ends` bytes into the window).
fn checked_page_len(window: &[u8], at: usize, serial: &[u8; 4], stream_ends: usize) -> Option<usize> {
    let is_header = |c: usize| {
        window
            .get(c..c + HEADER_LEN)
            .is_some_and(|h| heads_page_of(h, serial))
    };
    if !is_header(at) {
        return None;
    }
    let len = declared_page_len(window, at)?;
    let next = at + len;
    let followed = next == stream_ends || is_header(next);
    (next <= window.len() && followed && checksum_ok(&window[at..next])).then_some(len)
}

/// Whether `head` (a page header's first bytes) starts a page of the
/// stream with this serial number.
fn heads_page_of(head: &[u8], serial: &[u8; 4]) -> bool {
    head[..5] == *b"OggS\0" && head[SERIAL_AT..SERIAL_AT + 4] == *serial
}

impl Computed for AudioPages {
    fn len(&self) -> u64 {
        self.len
    }

    fn heap_bytes(&self) -> usize {
        let starts = self.starts();
        starts.kept.capacity() * std::mem::size_of::<u64>()
            + starts.damage.capacity() * std::mem::size_of::<Range<u64>>()
    }

    /// The pages under the range and the header of the next one.
    fn backing_span(&self, pos: u64, len: u64) -> Option<Range<u64>> {
        let at = self.offset.saturating_add(pos);
        let end = at.saturating_add(len + (HEADER_LEN + 255) as u64);
        Some(at..end.min(self.end()))
    }

    fn read(&self, pos: u64, out: &mut [u8], src: &dyn SegmentSource) -> io::Result<()> {
        let serial = self.serial.get(src)?;
        let at = self.offset + pos;
        let first = self.page_containing(at, src)?;
        // Backing bytes from the first page on, read once and extended only
        // as needed: a page's body is served as it is, and only a page whose
        // header the request touches needs all its bytes (for the checksum).
        let limit = (self.end() - first) as usize;
        let wanted = (at - first) as usize + out.len() + HEADER_LEN + 255;
        SPAN.with_borrow_mut(|span| {
            span.filled = 0;
            // The requested bytes and the next page header in one read;
            // only the last page may need more.
            span.extend(first, wanted.min(limit), src)?;
            let (mut p, mut done, mut last) = (0usize, 0usize, first);
            while done < out.len() {
                let start = first + p as u64;
                span.extend(first, (p + HEADER_LEN + 255).min(limit), src)?;
                let len = loop {
                    match unit_at(span.bytes(), p, &serial, (limit - p) as u64) {
                        Unit::NeedMore(n) => span.extend(first, p + n, src)?,
                        Unit::Page(len) => break Some(len),
                        Unit::Damage => break None,
                    }
                };
                let (len, page) = match len {
                    Some(len) => (len, true),
                    None => ((self.damage_end(start, &serial, src)? - start) as usize, false),
                };
                let from = (at + done as u64).saturating_sub(start) as usize;
                let n = (out.len() - done).min(len - from);
                span.extend(first, p + from + n, src)?;
                let bytes = span.bytes_mut();
                if page && from < CRC_AT + 4 {
                    renumber(&mut bytes[p..], len, self.seq_delta);
                }
                out[done..done + n].copy_from_slice(&bytes[p + from..p + from + n]);
                done += n;
                last = start;
                p += len;
            }
            let mut starts = self.starts();
            starts.last = last;
            starts.keep(last);
            Ok(())
        })
    }
}

/// Backing bytes of the pages a read touches, from some base offset: a
/// buffer reused across reads, zeroed only where it grows (zeroing it for
/// every read cost a tenth of an Ogg read).
#[derive(Default)]
struct Span {
    buf: Vec<u8>,
    /// How many bytes of `buf` hold this read's backing bytes.
    filled: usize,
}

impl Span {
    /// Reads more backing bytes (from `base`), up to `upto` in all.
    fn extend(&mut self, base: u64, upto: usize, src: &dyn SegmentSource) -> io::Result<()> {
        if upto > self.filled {
            if self.buf.len() < upto {
                self.buf.resize(upto, 0);
            }
            src.read_backing(base + self.filled as u64, &mut self.buf[self.filled..upto])?;
            self.filled = upto;
        }
        Ok(())
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.filled]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.filled]
    }
}

/// Adds `delta` to the sequence number of the page whose header starts
/// `header` (a page of `len` bytes) and updates its checksum without reading
/// the page body. The checksum is linear: changing the sequence bytes
/// changes it by the checksum of that difference alone, followed by the
/// rest of the page as zeros. A page whose stored checksum was wrong stays
/// exactly as wrong, so a decoder drops the same pages it would have
/// dropped from the backing file.
fn renumber(header: &mut [u8], len: usize, delta: u32) {
    let seq = u32::from_le_bytes([
        header[SEQ_AT],
        header[SEQ_AT + 1],
        header[SEQ_AT + 2],
        header[SEQ_AT + 3],
    ]);
    let new_seq = seq.wrapping_add(delta);
    header[SEQ_AT..SEQ_AT + 4].copy_from_slice(&new_seq.to_le_bytes());
    let stored = u32::from_le_bytes([
        header[CRC_AT],
        header[CRC_AT + 1],
        header[CRC_AT + 2],
        header[CRC_AT + 3],
    ]);
    let change = crc(&(seq ^ new_seq).to_le_bytes());
    let sum = stored ^ append_zeros(change, len - (SEQ_AT + 4));
    header[CRC_AT..CRC_AT + 4].copy_from_slice(&sum.to_le_bytes());
}

/// The checksum of a message whose checksum is `crc`, followed by `n` zero
/// bytes. With no initial value and no final xor, the checksum register is
/// the message as a polynomial times x^32, modulo the generator; each zero
/// byte multiplies it by x^8. So the answer is `crc` times x^(8n): two
/// products with powers from two small tables (x^(8j) and x^(2048k)), where
/// this runs for every page of every Ogg read.
fn append_zeros(crc: u32, n: usize) -> u32 {
    static POWERS: OnceLock<([u32; 256], [u32; 512])> = OnceLock::new();
    let (low, high) = POWERS.get_or_init(|| {
        let mut low = [1u32; 256];
        for j in 1..low.len() {
            low[j] = mul_mod(low[j - 1], 1 << 8);
        }
        let step = mul_mod(low[255], 1 << 8);
        let mut high = [1u32; 512];
        for k in 1..high.len() {
            high[k] = mul_mod(high[k - 1], step);
        }
        (low, high)
    });
    assert!(n < 1 << 17, "an Ogg page is shorter than 128 KiB");
    mul_mod(mul_mod(crc, low[n & 0xff]), high[n >> 8])
}

/// `a` times `b` as polynomials over GF(2) (bit i: the coefficient of x^i),
/// modulo the Ogg generator.
fn mul_mod(a: u32, b: u32) -> u32 {
    (0..32).rev().fold(0u32, |product, i| {
        let carry = if product & 0x8000_0000 != 0 { OGG_POLY } else { 0 };
        let times_x = (product << 1) ^ carry;
        times_x ^ if a >> i & 1 == 1 { b } else { 0 }
    })
}

thread_local! {
    /// Backing bytes of the pages a read touches, reused across reads.
    static SPAN: std::cell::RefCell<Span> = std::cell::RefCell::new(Span::default());
    /// Backing bytes walked to find a read's first page, reused across reads.
    static WALK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_reference_value() {
        // The checksum of a well-known page (capture pattern and zeros).
        assert_eq!(crc(b""), 0);
        assert_eq!(crc(b"OggS"), 0x5fb0_a94f);
    }

    #[test]
    fn sliced_crc_matches_bytewise() {
        let bytewise = |d: &[u8]| {
            d.iter().fold(0u32, |mut c, &b| {
                c ^= u32::from(b) << 24;
                for _ in 0..8 {
                    c = if c & 0x8000_0000 != 0 {
                        (c << 1) ^ 0x04c1_1db7
                    } else {
                        c << 1
                    };
                }
                c
            })
        };
        let data: Vec<u8> = (0..1000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        for len in [0, 1, 7, 8, 9, 63, 64, 999, 1000] {
            assert_eq!(crc(&data[..len]), bytewise(&data[..len]), "length {len}");
        }
    }

    /// A page of stream 0x04030201 with sequence number 41 and a valid
    /// checksum.
    fn test_page(segments: usize) -> Vec<u8> {
        let lacing: Vec<u8> = (0..segments).map(|i| (i * 37 % 256) as u8).collect();
        let mut page = b"OggS\0\0".to_vec();
        page.extend_from_slice(&[7; 8]); // granule position
        page.extend_from_slice(&[1, 2, 3, 4]); // serial
        page.extend_from_slice(&41u32.to_le_bytes());
        page.extend_from_slice(&[0; 4]);
        page.push(segments as u8);
        page.extend_from_slice(&lacing);
        let body_len: usize = lacing.iter().map(|&l| l as usize).sum();
        page.extend((0..body_len as u32).map(|i| (i.wrapping_mul(40_503) >> 7) as u8));
        let sum = crc(&page);
        page[CRC_AT..CRC_AT + 4].copy_from_slice(&sum.to_le_bytes());
        page
    }

    #[test]
    fn renumbering_matches_a_full_recomputation() {
        for (segments, delta) in [(0usize, 1u32), (1, 3), (17, 200), (255, u32::MAX)] {
            let mut page = test_page(segments);
            let mut expected = page.clone();
            expected[SEQ_AT..SEQ_AT + 4].copy_from_slice(&41u32.wrapping_add(delta).to_le_bytes());
            expected[CRC_AT..CRC_AT + 4].fill(0);
            let sum = crc(&expected);
            expected[CRC_AT..CRC_AT + 4].copy_from_slice(&sum.to_le_bytes());
            let len = page.len();
            renumber(&mut page, len, delta);
            assert_eq!(page, expected, "{segments} segments");
            assert!(checksum_ok(&page));
        }
    }

    #[test]
    fn appending_zeros_matches_hashing_them() {
        let zeros = vec![0u8; 1 << 17];
        for crc_in in [0u32, 1, 0x8000_0000, 0xdead_beef, u32::MAX] {
            for n in [
                0usize,
                1,
                7,
                255,
                256,
                257,
                4096,
                65_307,
                65_535,
                65_536,
                (1 << 17) - 1,
            ] {
                let mut digest = OGG_CRC.digest_with_initial(crc_in);
                digest.update(&zeros[..n]);
                assert_eq!(
                    append_zeros(crc_in, n),
                    digest.finalize(),
                    "crc {crc_in:#x}, {n} zeros"
                );
            }
        }
    }

    /// A backing file held in memory.
    struct Bytes(Vec<u8>);

    impl SegmentSource for Bytes {
        fn read_backing(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            let at = offset as usize;
            let bytes = self
                .0
                .get(at..at + buf.len())
                .ok_or(io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(bytes);
            Ok(())
        }

        fn read_art(&self, _: i64, _: u64, _: &mut [u8]) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    fn with_seq(mut page: Vec<u8>, seq: u32) -> Vec<u8> {
        page[SEQ_AT..SEQ_AT + 4].copy_from_slice(&seq.to_le_bytes());
        page[CRC_AT..CRC_AT + 4].fill(0);
        let sum = crc(&page);
        page[CRC_AT..CRC_AT + 4].copy_from_slice(&sum.to_le_bytes());
        page
    }

    /// Pages of very different lengths (one body holds a capture pattern
    /// and this stream's serial, another a whole page of this stream) read
    /// the same, renumbered, from any offset and in any order, whichever
    /// page the previous read ended in.
    #[test]
    fn audio_pages_read_the_same_from_any_offset_in_any_order() {
        let prefix = vec![0x4f; 300];
        let (mut backing, mut expected) = (prefix.clone(), Vec::new());
        // Over 256 KiB of pages, so a walk takes several chunks.
        let lengths = [3usize, 255, 17, 200, 1, 255, 60, 0, 90].repeat(12);
        for (i, segments) in lengths.into_iter().enumerate() {
            let mut page = test_page(segments);
            if segments == 200 {
                let body = HEADER_LEN + segments + 10;
                page[body..body + 5].copy_from_slice(b"OggS\0");
                page[body + SERIAL_AT..body + SERIAL_AT + 4].copy_from_slice(&[1, 2, 3, 4]);
            }
            if segments == 255 && i % 9 == 5 {
                // A whole valid page of this stream inside the body, and
                // the capture pattern after it.
                let inner = test_page(4);
                let body = HEADER_LEN + segments + 100;
                page[body..body + inner.len()].copy_from_slice(&inner);
                page[body + inner.len()..body + inner.len() + 4].copy_from_slice(b"OggS");
            }
            backing.extend(with_seq(page.clone(), 10 + i as u32));
            expected.extend(with_seq(page, 17 + i as u32));
        }
        let src = Bytes(backing);
        let audio_len = expected.len() as u64;
        assert!(audio_len > 2 * WALK_CHUNK as u64, "{audio_len} bytes of pages");
        let pages = || {
            let serial = Arc::new(StreamSerial::new(prefix.len() as u64));
            AudioPages::new(prefix.len() as u64, audio_len, 7, serial)
        };
        reads_match(pages, &expected, &src, 3000, 101);
    }

    /// Reads of `expected.len()` bytes of audio pages at random offsets and
    /// lengths, each from a fresh `AudioPages` and from one shared by all,
    /// then every `step` bytes from the shared one, give `expected`.
    fn reads_match(
        pages: impl Fn() -> AudioPages,
        expected: &[u8],
        src: &dyn SegmentSource,
        rounds: usize,
        step: usize,
    ) {
        let check = |pages: &AudioPages, pos: usize, len: usize| {
            let len = len.min(expected.len() - pos);
            let mut out = vec![0u8; len];
            pages.read(pos as u64, &mut out, src).unwrap();
            assert!(out == expected[pos..pos + len], "{len} bytes at {pos}");
        };
        let shared = pages();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..rounds {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let pos = (seed % expected.len() as u64) as usize;
            let len = 1 + (seed >> 32) as usize % 40_000;
            check(&shared, pos, len);
            check(&pages(), pos, len);
        }
        for pos in (0..expected.len()).step_by(step) {
            check(&shared, pos, 3000);
        }
    }

    /// Bytes that are no page (zeroed headers, a long run of zeros, junk at
    /// the end) are served as they are and every page around them
    /// renumbered, the same from any offset and in any order.
    #[test]
    fn damage_between_pages_reads_the_same_from_any_offset_in_any_order() {
        let lengths = [3usize, 255, 17, 200, 1, 255, 60, 90].repeat(40);
        let pages: Vec<Vec<u8>> = lengths
            .iter()
            .enumerate()
            .map(|(i, &n)| with_seq(test_page(n), i as u32))
            .collect();
        let starts: Vec<usize> = pages
            .iter()
            .scan(0, |at, p| Some(std::mem::replace(at, *at + p.len())))
            .collect();
        let mut backing: Vec<u8> = pages.concat();
        // Zeros from the body of page 22 over the headers of 23 and 24; a
        // run of zeros longer than a walk's chunk from page 100 on; junk at
        // the end.
        let damaged = [
            starts[22] + HEADER_LEN + 60 + 100..starts[25] - 10,
            starts[100]..starts[100] + WALK_CHUNK + 5000,
            backing.len() - 300..backing.len(),
        ];
        for range in damaged.clone() {
            backing[range].fill(0);
        }
        let touched = |r: Range<usize>| damaged.iter().any(|d| d.start < r.end && r.start < d.end);
        let header = |k: usize| starts[k]..starts[k] + HEADER_LEN + pages[k][26] as usize;
        // A page is renumbered when its header is whole and the next one's
        // is too, or it is whole itself (its checksum holds).
        let mut expected = backing.clone();
        for (k, page) in pages.iter().enumerate() {
            let followed = k + 1 == pages.len() || !touched(header(k + 1));
            let whole = !touched(starts[k]..starts[k] + page.len());
            if !touched(header(k)) && (followed || whole) {
                renumber(&mut expected[starts[k]..], page.len(), 5);
            }
        }
        let prefix = [0x4f; 40];
        let src = Bytes([&prefix[..], &backing[..]].concat());
        let audio = || AudioPages::new(40, expected.len() as u64, 5, Arc::new(StreamSerial::new(40)));
        reads_match(audio, &expected, &src, 600, 1999);
    }

    /// A backing file in memory that counts the bytes read from it.
    struct Counted(Bytes, std::cell::Cell<usize>);

    impl SegmentSource for Counted {
        fn read_backing(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            self.1.set(self.1.get() + buf.len());
            self.0.read_backing(offset, buf)
        }

        fn read_art(&self, rowid: i64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            self.0.read_art(rowid, offset, buf)
        }
    }

    /// A read far into a long stream finds its page near it and reads
    /// little; in a page whose checksum is bad it walks there instead.
    #[test]
    fn a_read_far_into_a_long_stream_reads_near_it() {
        let page = test_page(255);
        let count = SEARCH_BEYOND as usize * 5 / 4 / page.len();
        let damaged = count - 3;
        let (mut backing, mut expected) = (vec![0u8; 50], Vec::new());
        for i in 0..count {
            let mut original = with_seq(page.clone(), i as u32);
            if i == damaged {
                original[HEADER_LEN + 255 + 7] ^= 1;
            }
            let mut served = original.clone();
            renumber(&mut served, page.len(), 3);
            backing.extend(original);
            expected.extend(served);
        }
        let src = Counted(Bytes(backing), 0.into());
        let pages = || AudioPages::new(50, expected.len() as u64, 3, Arc::new(StreamSerial::new(50)));
        for (page_no, inside) in [(count - 5, 100), (count - 1, 7000), (damaged, 3000)] {
            let pos = page_no * page.len() + inside;
            let mut out = vec![0u8; 5000];
            src.1.set(0);
            pages().read(pos as u64, &mut out, &src).unwrap();
            assert_eq!(out, expected[pos..pos + out.len()], "page {page_no}");
            let near = src.1.get() < 1 << 20;
            assert_eq!(
                near,
                page_no != damaged,
                "page {page_no}: {} bytes read",
                src.1.get()
            );
        }
    }

    #[test]
    fn renumbering_keeps_a_bad_checksum_bad() {
        let mut page = test_page(3);
        let last = page.len() - 1;
        page[last] ^= 0x40; // a flipped body byte
        assert!(!checksum_ok(&page));
        let len = page.len();
        renumber(&mut page, len, 2);
        assert!(!checksum_ok(&page));
    }

    /// Pages that hold `lens` whole, in order, each page starting where
    /// the one before ended.
    fn assert_covers(pages: &[PagePlan], lens: &[u64]) {
        let total: u64 = pages.iter().map(PagePlan::body_len).sum();
        assert_eq!(total, lens.iter().sum::<u64>());
        assert!(pages.iter().all(|p| (1..=255).contains(&p.lacing.len())));
        assert!(pages.last().unwrap().packet_ends);
        let mut start = 0;
        for (i, page) in pages.iter().enumerate() {
            assert_eq!(page.body_start, start);
            start += page.body_len();
            let after_255 = i > 0 && pages[i - 1].lacing.last() == Some(&255);
            assert_eq!(page.continued, after_255);
        }
        let ends: u64 = pages
            .iter()
            .map(|p| p.lacing.iter().filter(|&&l| l < 255).count() as u64)
            .sum();
        assert_eq!(ends, lens.len() as u64, "one lacing value under 255 per packet");
    }

    #[test]
    fn pagination_covers_every_byte() {
        for lens in [vec![0u64], vec![255], vec![300, 70_000, 10], vec![255 * 255, 1]] {
            assert_covers(&paginate(&lens), &lens);
        }
    }

    #[test]
    fn pagination_into_a_page_count_fills_each_page_or_says_it_cannot() {
        let lens = [300u64, 4_000];
        // 2 + 16 lacing values.
        for pages in 1..=18 {
            let plans = paginate_into(&lens, pages).unwrap();
            assert_eq!(plans.len(), pages);
            assert_covers(&plans, &lens);
        }
        assert!(paginate_into(&lens, 19).is_none(), "an empty page");
        let big = [255 * 255 * 2 + 1];
        assert!(paginate_into(&big, 2).is_none(), "511 lacing values");
        assert_covers(&paginate_into(&big, 3).unwrap(), &big);
        assert_eq!(lacing_count(254), 1);
        assert_eq!(lacing_count(255), 2);
    }
}
