//! The probe workers: each takes a file, reads what a probe needs of it
//! through a window of bounded reads, and fingerprints its audio.

use super::*;

/// Bytes at each end of the audio that make up the content fingerprint.
pub(super) const FINGERPRINT_SPAN: u64 = 64 * 1024;

#[derive(Clone, Copy)]
pub(super) struct Job<'a> {
    /// Borrowed from the walk's files, which outlive the probing.
    pub(super) path: &'a str,
    pub(super) stamps: Stamps,
    pub(super) existing: Option<i64>,
    /// Its index in the walk's files.
    pub(super) index: usize,
}

pub(super) enum Outcome<'a> {
    Scanned(Job<'a>, Box<Probed>),
    Failed(Job<'a>, ProbeError),
}

impl Outcome<'_> {
    /// About how much memory the result holds: its pictures, tag values
    /// and FLAC blocks.
    pub(super) fn held_bytes(&self) -> usize {
        let Outcome::Scanned(_, probed) = self else {
            return 0;
        };
        let t = &probed.track;
        t.pictures.iter().map(|p| p.art.data.len()).sum::<usize>()
            + t.tags.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
            + t.flac_blocks.iter().map(|(_, data)| data.len()).sum::<usize>()
    }
}

/// A file probed: what goes to the store, and the sha256 fingerprint that
/// a store before version 5 would hold of it (computed only while a track
/// known by one may be this file, moved).
pub(super) struct Probed {
    pub(super) track: ScannedTrack,
    pub(super) sha256: Option<[u8; 32]>,
}

impl Probed {
    /// The file's fingerprints, the store's own first.
    pub(super) fn fingerprints(&self) -> impl Iterator<Item = Fingerprint> + Clone + '_ {
        let blake3 = self.track.fingerprint.map(Fingerprint::Blake3);
        blake3.into_iter().chain(self.sha256.map(Fingerprint::Sha256))
    }
}

/// Probes one file and computes its content fingerprint (and with
/// `sha256`, the one of stores before version 5), reading through `buf`.
pub(super) fn probe_file(job: &Job<'_>, sha256: bool, buf: &mut Vec<u8>) -> Result<Probed, ProbeError> {
    let file = Windowed::new(File::open(text_to_path(job.path))?);
    let src = Source::new(&file as &dyn ReadAt, job.stamps.size);
    let p = probe(&src)?;
    let fingerprints = fingerprints(&src, p.audio_offset, p.audio_length, sha256, buf)?;
    let track = scanned_track(job.path.to_string(), job.stamps, p, fingerprints.blake3);
    Ok(Probed {
        track,
        sha256: fingerprints.sha256,
    })
}

/// What goes to the store of a file at `path` with `stamps`, probed as
/// `p`, whose audio has the content fingerprint `blake3`.
pub(super) fn scanned_track(
    path: String,
    stamps: Stamps,
    p: retagfs_formats::Probe,
    blake3: [u8; 32],
) -> ScannedTrack {
    ScannedTrack {
        backing_path: path,
        format: p.format,
        audio_offset: p.audio_offset,
        audio_length: p.audio_length,
        stamps,
        fingerprint: Some(blake3),
        tags: p.tags,
        pictures: dedup_pictures(p.pictures),
        flac_blocks: p.flac_blocks,
        parts: p.parts,
        passthrough: p.passthrough,
        vendor: p.vendor,
        duration_ms: p.duration_ms,
    }
}

/// A file read through a window: a small read fetches `WINDOW` bytes from
/// its offset, and later reads inside them are answered from memory. A
/// probe reads a file's headers a few bytes at a time (a FLAC's block
/// headers are 4 bytes each) and small files' start and end twice (checks,
/// then the fingerprint): on storage without a page cache (FUSE remotes)
/// each read is a round trip.
pub(super) struct Windowed {
    pub(super) file: File,
    pub(super) window: std::cell::RefCell<Window>,
}

#[derive(Default)]
pub(super) struct Window {
    /// Where the bytes start in the file.
    pub(super) at: u64,
    /// How many of `bytes` were read.
    pub(super) filled: usize,
    /// `WINDOW` long once used: kept from file to file by each thread, so
    /// that no file pays for zeroing a fresh buffer.
    pub(super) bytes: Vec<u8>,
}

/// Bytes fetched for a small read.
pub(super) const WINDOW: usize = 64 * 1024;

impl Windowed {
    pub(super) fn new(file: File) -> Windowed {
        // A probe reads a file's start and end: the kernel's read-ahead,
        // up to megabytes on a fast disk, would read much of the rest.
        // SAFETY: a hint on a descriptor this file owns.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        let window = Window {
            bytes: SPARE_WINDOW.take(),
            ..Window::default()
        };
        Windowed {
            file,
            window: std::cell::RefCell::new(window),
        }
    }
}

impl Drop for Windowed {
    fn drop(&mut self) {
        SPARE_WINDOW.set(std::mem::take(&mut self.window.get_mut().bytes));
    }
}

impl ReadAt for Windowed {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let mut w = self.window.borrow_mut();
        let inside = offset >= w.at && offset + buf.len() as u64 <= w.at + w.filled as u64;
        if !inside {
            if buf.len() > WINDOW / 4 {
                return ReadAt::read_at(&self.file, buf, offset);
            }
            w.bytes.resize(WINDOW, 0);
            w.filled = ReadAt::read_at(&self.file, &mut w.bytes, offset)?;
            w.at = offset;
        }
        let from = (offset - w.at) as usize;
        let n = buf.len().min(w.filled.saturating_sub(from));
        buf[..n].copy_from_slice(&w.bytes[from..from + n]);
        Ok(n)
    }
}

/// A file may carry the same image twice (in two tag containers).
pub(super) fn dedup_pictures(pictures: Vec<ScannedPicture>) -> Vec<ScannedPicture> {
    let mut seen = HashSet::new();
    pictures
        .into_iter()
        .filter(|p| seen.insert((p.picture_type, p.sha256)))
        .collect()
}

pub(super) struct Fingerprints {
    pub(super) blake3: [u8; 32],
    pub(super) sha256: Option<[u8; 32]>,
}

/// The fingerprints of the audio at `offset`, `len` bytes long: BLAKE3
/// over its length (8 bytes, little-endian), its first 64 KiB and the rest
/// of its last 64 KiB (so the whole audio once when it is shorter than 128
/// KiB); with `sha256`, also the sha256 of stores before version 5 (its
/// length, first 64 KiB and last 64 KiB, overlapping in short audio).
/// `buf` is kept from file to file: a fresh zeroed buffer per file cost as
/// much as the hashing.
pub(super) fn fingerprints(
    src: &Source<'_>,
    offset: u64,
    len: u64,
    sha256: bool,
    buf: &mut Vec<u8>,
) -> Result<Fingerprints, ProbeError> {
    buf.resize(FINGERPRINT_SPAN as usize, 0);
    let span = FINGERPRINT_SPAN.min(len);
    let mut blake3 = blake3::Hasher::new();
    blake3.update(&len.to_le_bytes());
    let mut legacy = sha256.then(|| Sha256::new_with_prefix(len.to_le_bytes()));
    let head = read_span(src, offset, span, buf)?;
    blake3.update(head);
    if let Some(h) = &mut legacy {
        h.update(head);
    }
    let tail_at = offset + len - span;
    // How much of the tail the head already holds.
    let in_head = (offset + span).saturating_sub(tail_at).min(span);
    match &mut legacy {
        Some(h) => {
            let tail = read_span(src, tail_at, span, buf)?;
            h.update(tail);
            blake3.update(tail.get(in_head as usize..).unwrap_or_default());
        }
        None if in_head < span => {
            blake3.update(read_span(src, tail_at + in_head, span - in_head, buf)?);
        }
        None => {}
    }
    Ok(Fingerprints {
        blake3: blake3.finalize().into(),
        sha256: legacy.map(|h| h.finalize().into()),
    })
}

/// `len` bytes at `offset` (fewer at the end of the file), read into `buf`.
pub(super) fn read_span<'b>(
    src: &Source<'_>,
    offset: u64,
    len: u64,
    buf: &'b mut [u8],
) -> Result<&'b [u8], ProbeError> {
    let n = src.read_upto_into(offset, &mut buf[..len as usize])?;
    Ok(&buf[..n])
}

/// Probes jobs until there are none left to take; `sha256`: whether new
/// files need the fingerprint of stores before version 5 too.
pub(super) fn worker<'a>(
    jobs: &Jobs<'_, 'a>,
    results: Sender<Vec<Outcome<'a>>>,
    sha256: bool,
    bytes_per_send: usize,
) {
    let mut buf = Vec::new();
    let (mut batch, mut held) = (Vec::new(), 0);
    while let Some(job) = jobs.take() {
        let outcome = match probe_file(&job, sha256 && job.existing.is_none(), &mut buf) {
            Ok(probed) => Outcome::Scanned(job, Box::new(probed)),
            Err(e) => Outcome::Failed(job, e),
        };
        held += outcome.held_bytes();
        batch.push(outcome);
        // Sent a few at a time while the writer is busy: a send to a full
        // channel parks this thread and every receive wakes one, time
        // spent in the kernel rather than probing.
        let full = batch.len() >= RESULTS_PER_SEND || held >= bytes_per_send;
        if full || results.is_empty() {
            held = 0;
            if results.send(std::mem::take(&mut batch)).is_err() {
                return;
            }
        }
    }
    if !batch.is_empty() {
        let _ = results.send(batch);
    }
}

/// Results a probing thread holds before it sends them, at most...
pub(super) const RESULTS_PER_SEND: usize = 16;
/// ... and the bytes of tags and pictures all probing threads together
/// may hold in unsent results, shared out between them (large covers go
/// one at a time), so that more threads do not hold more memory.
pub(super) const RESULT_BYTES_UNSENT: usize = 2 << 20;

/// The files to probe, taken in order by the probing threads: an index
/// to bump rather than a channel to feed (whose every job woke a
/// thread when the probes waited on the writer).
pub(super) struct Jobs<'j, 'a> {
    pub(super) todo: &'j [Job<'a>],
    pub(super) next: AtomicUsize,
}

impl<'a> Jobs<'_, 'a> {
    pub(super) fn take(&self) -> Option<Job<'a>> {
        self.todo.get(self.next.fetch_add(1, Ordering::Relaxed)).copied()
    }
}
