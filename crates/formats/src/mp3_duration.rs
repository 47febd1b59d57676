//! How long an MP3 plays. An encoder that knew (LAME, Xing, Fraunhofer)
//! counted the frames in an Xing/Info or VBRI header in the first frame:
//! frames times samples per frame over the sample rate. Without one the
//! stream is taken as constant bitrate: its bytes over the first frame's
//! bitrate, which is what players estimate too.

use crate::duration::millis;
use crate::mp3::{parse_frame_header, FrameHeader};
use crate::source::be_u32;

/// The duration of the audio whose first frame starts `first_frame` (as
/// many of its bytes as were read) and that runs `audio_bytes` from there.
pub(crate) fn duration_ms(first_frame: &[u8], audio_bytes: u64) -> Option<u64> {
    let header = parse_frame_header(first_frame)?;
    match counted_frames(first_frame, &header) {
        // Fewer than one byte a frame: a count no stream of these bytes has.
        Some(frames) if frames > audio_bytes => None,
        Some(frames) => millis(frames * header.samples(), u64::from(header.sample_rate)),
        // A bitrate of 0 is free format: its length says nothing.
        None => millis(audio_bytes.checked_mul(8)?, u64::from(header.bitrate)),
    }
}

/// The frame count an encoder wrote in the first frame, if it wrote one.
fn counted_frames(frame: &[u8], header: &FrameHeader) -> Option<u64> {
    xing_frames(frame, header)
        .or_else(|| vbri_frames(frame))
        .filter(|&frames| frames > 0)
}

/// The frame count of an Xing (VBR) or Info (CBR) header, which follows
/// the layer III side information: its flags, then the count if flag 1 is
/// set.
fn xing_frames(frame: &[u8], header: &FrameHeader) -> Option<u64> {
    let at = 4 + side_info_len(header)?;
    let tag = frame.get(at..at + 4)?;
    if tag != b"Xing" && tag != b"Info" {
        return None;
    }
    let flags = be_u32(frame.get(at + 4..at + 8)?);
    if flags & 1 == 0 {
        return None;
    }
    Some(u64::from(be_u32(frame.get(at + 8..at + 12)?)))
}

/// Bytes of side information after a layer III frame header; other
/// layers have none and carry no Xing header.
fn side_info_len(header: &FrameHeader) -> Option<usize> {
    if header.layer != 3 {
        return None;
    }
    Some(match (header.mpeg1, header.mono) {
        (true, false) => 32,
        (true, true) | (false, false) => 17,
        (false, true) => 9,
    })
}

/// The frame count of a Fraunhofer VBRI header, always 32 bytes after the
/// frame header: version, delay, quality, bytes, then frames.
fn vbri_frames(frame: &[u8]) -> Option<u64> {
    const AT: usize = 4 + 32;
    if frame.get(AT..AT + 4)? != b"VBRI" {
        return None;
    }
    Some(u64::from(be_u32(frame.get(AT + 14..AT + 18)?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::assert_near_ffprobe;
    use crate::source::Source;

    fn probed_duration(file: &[u8]) -> Option<u64> {
        let file = file.to_vec();
        crate::mp3::probe(&Source::new(&file, file.len() as u64))
            .unwrap()
            .duration_ms
    }

    #[test]
    fn the_fixture_s_info_header_gives_its_duration() {
        let file = include_bytes!("../../../tests/fixtures/tagged.mp3");
        // ffprobe says 1.071000 s: 41 frames of 576 samples at 22.05 kHz,
        // the encoder's delay and padding included.
        assert_near_ffprobe(probed_duration(file), 1.071);
    }

    /// A 417-byte MPEG-1 layer III frame (128 kbit/s, 44.1 kHz, stereo).
    fn frame() -> Vec<u8> {
        let mut f = vec![0u8; 417];
        f[..4].copy_from_slice(&[0xff, 0xfb, 0x90, 0x00]);
        f
    }

    /// A first frame with an Xing or Info header after the side
    /// information, or a VBRI header, that counts `frames`.
    fn counting(tag: &[u8; 4], frames: u32) -> Vec<u8> {
        let mut f = frame();
        let at = 36;
        f[at..at + 4].copy_from_slice(tag);
        if tag == b"VBRI" {
            f[at + 14..at + 18].copy_from_slice(&frames.to_be_bytes());
        } else {
            f[at + 4..at + 8].copy_from_slice(&1u32.to_be_bytes());
            f[at + 8..at + 12].copy_from_slice(&frames.to_be_bytes());
        }
        f
    }

    #[test]
    fn a_frame_count_gives_frames_times_samples_over_the_rate() {
        for tag in [b"Xing", b"Info", b"VBRI"] {
            let file = [counting(tag, 100), frame().repeat(100)].concat();
            // 100 frames of 1152 samples at 44.1 kHz.
            assert_eq!(probed_duration(&file), Some(2612), "{tag:?}");
        }
    }

    #[test]
    fn without_a_count_the_bitrate_gives_the_duration() {
        // 100 frames of 417 bytes at 128 kbit/s (without padding bits, a
        // little shorter than 100 frames play).
        assert_eq!(probed_duration(&frame().repeat(100)), Some(2606));
        let uncounted = [counting(b"Info", 0), frame().repeat(99)].concat();
        assert_eq!(probed_duration(&uncounted), Some(2606));
    }

    #[test]
    fn mpeg2_frames_hold_576_samples() {
        // MPEG-2 layer III, 64 kbit/s, 22.05 kHz, stereo: 208 bytes, with
        // its Xing header after 17 bytes of side information.
        let mut first = vec![0u8; 208];
        first[..4].copy_from_slice(&[0xff, 0xf3, 0x80, 0x00]);
        first[21..25].copy_from_slice(b"Xing");
        first[25..29].copy_from_slice(&1u32.to_be_bytes());
        first[29..33].copy_from_slice(&10u32.to_be_bytes());
        assert_eq!(duration_ms(&first, 208 * 11), Some(261));
    }

    #[test]
    fn absurd_counts_and_free_format_give_no_duration() {
        // More frames than the audio has bytes.
        let file = [counting(b"Xing", u32::MAX), frame().repeat(3)].concat();
        assert_eq!(probed_duration(&file), None);
        // Free format (bitrate index 0): no bitrate to divide by.
        let mut free = vec![0u8; 300];
        free[..4].copy_from_slice(&[0xff, 0xfb, 0x00, 0x00]);
        assert_eq!(probed_duration(&free.repeat(3)), None);
        // Bytes that are no frame header.
        assert_eq!(duration_ms(b"ID3\x04", 1000), None);
        // An Xing header cut off before its count: the bitrate estimate
        // (6 frames of 417 bytes at 128 kbit/s).
        assert_eq!(duration_ms(&counting(b"Xing", 5)[..40], 417 * 6), Some(156));
    }
}
