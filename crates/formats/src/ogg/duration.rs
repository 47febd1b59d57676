//! How long an Ogg Vorbis or Opus stream plays: the granule position of
//! its last page counts the samples decoded up to there, at the rate the
//! identification header gives (Vorbis), or at 48 kHz from the start of
//! the pre-skip the decoder drops (Opus).

use crate::duration::millis;
use crate::ogg::pages;
use crate::source::le_u32;
use crate::Format;

/// Opus granule positions count 48 kHz samples whatever the input rate.
const OPUS_RATE: u64 = 48_000;

/// The duration of a stream whose identification header packet is
/// `ident` and whose last granule position is `last_granule`.
pub(super) fn duration_ms(format: Format, ident: &[u8], last_granule: u64) -> Option<u64> {
    match format {
        Format::Vorbis => {
            // "\x01vorbis", version (4 bytes), channels (1), sample rate.
            let rate = le_u32(ident.get(12..16)?);
            millis(last_granule, u64::from(rate))
        }
        Format::Opus => {
            // "OpusHead", version (1 byte), channels (1), pre-skip.
            let pre_skip = u16::from_le_bytes(ident.get(10..12)?.try_into().ok()?);
            millis(last_granule.checked_sub(u64::from(pre_skip))?, OPUS_RATE)
        }
        _ => None,
    }
}

/// The granule position in a page header `h`; None when no packet ends on
/// the page (-1) or the position is otherwise negative.
pub(super) fn granule(h: &[u8]) -> Option<u64> {
    let position = i64::from_le_bytes(h.get(6..14)?.try_into().ok()?);
    u64::try_from(position).ok()
}

/// The granule position of the last page of stream `serial` in `bytes`
/// (the last of a file) that has one: found from the end, a page whose
/// checksum holds (audio bytes that look like a page start are not one).
pub(super) fn last_granule(bytes: &[u8], serial: u32) -> Option<u64> {
    (0..bytes.len())
        .rev()
        .filter(|&at| bytes[at..].starts_with(b"OggS\0"))
        .find_map(|at| {
            let page = bytes.get(at..at + pages::declared_page_len(bytes, at)?)?;
            let ours = le_u32(&page[14..]) == serial && pages::checksum_ok(page);
            ours.then(|| granule(page)).flatten()
        })
}
