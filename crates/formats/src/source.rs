//! Bounded, positioned reads of a file being probed.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::error::{ProbeError, Result};

/// Anything that supports positioned reads (a file, or bytes in tests).
pub trait ReadAt {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = (offset as usize).min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

impl ReadAt for Vec<u8> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.as_slice().read_at(buf, offset)
    }
}

/// A buffer kept by this thread from file to file, for large reads whose
/// bytes are only looked at (a file's last frames, a window of page
/// headers). A fresh zeroed buffer per file costs more than the read: the
/// allocator hands large blocks back to the system when they are freed,
/// and zeroes them again by faulting in new pages.
pub struct Scratch(Vec<u8>);

/// Spare buffers per thread; a probe uses two at most at once.
const SPARES: usize = 4;
/// Buffers larger than this are freed, not kept (a thread of a scan on
/// network storage, one of 16, would otherwise keep megabytes).
const KEPT_BYTES: usize = 512 << 10;

thread_local! {
    static SPARE: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Scratch {
    /// An empty buffer: a spare one of this thread (its memory already
    /// in place), or a new one.
    pub fn take() -> Scratch {
        let mut buf = SPARE.with(|s| s.borrow_mut().pop()).unwrap_or_default();
        buf.clear();
        Scratch(buf)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        if buf.capacity() <= KEPT_BYTES {
            SPARE.with(|s| {
                let mut spare = s.borrow_mut();
                if spare.len() < SPARES {
                    spare.push(buf);
                }
            });
        }
    }
}

impl std::ops::Deref for Scratch {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl std::ops::DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

/// Largest single read a probe may make: no tag block, picture or header
/// that claims more is believed.
pub const MAX_READ: u64 = 64 << 20;

/// A file of known size, read only in bounded pieces.
pub struct Source<'a> {
    inner: &'a dyn ReadAt,
    size: u64,
}

impl<'a> Source<'a> {
    pub fn new(inner: &'a dyn ReadAt, size: u64) -> Self {
        Source { inner, size }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The file itself, for reads that are not a probe's.
    pub fn reader(&self) -> &'a dyn ReadAt {
        self.inner
    }

    /// Reads exactly `len` bytes at `offset`; an error names `what` if the
    /// file is shorter or the length is absurd.
    pub fn read(&self, offset: u64, len: u64, what: &str) -> Result<Vec<u8>> {
        self.check_span(offset, len, what)?;
        let mut buf = vec![0u8; len as usize];
        self.fill(offset, &mut buf)?;
        Ok(buf)
    }

    /// Whether `len` bytes at `offset` are believable and in the file.
    fn check_span(&self, offset: u64, len: u64, what: &str) -> Result<()> {
        if len > MAX_READ {
            return Err(ProbeError::Malformed(format!(
                "{what} claims {len} bytes, more than the {MAX_READ}-byte limit"
            )));
        }
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(ProbeError::Truncated(format!(
                "{what} at offset {offset} needs {len} bytes but the file has {}",
                self.size
            )));
        }
        Ok(())
    }

    /// [`Source::read`] into `buf` (a [`Scratch`]), which becomes `len`
    /// long.
    pub fn read_into(&self, offset: u64, len: u64, what: &str, buf: &mut Vec<u8>) -> Result<()> {
        self.check_span(offset, len, what)?;
        buf.clear();
        buf.resize(len as usize, 0);
        self.fill(offset, buf)
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end of the file).
    pub fn read_upto(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let len = len.min(self.size.saturating_sub(offset)).min(MAX_READ);
        let mut buf = vec![0u8; len as usize];
        self.fill(offset, &mut buf)?;
        Ok(buf)
    }

    /// Reads up to `buf.len()` bytes at `offset` into `buf` (fewer at the
    /// end of the file): returns how many. For callers that reuse a buffer.
    pub fn read_upto_into(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let n = (buf.len() as u64).min(self.size.saturating_sub(offset)) as usize;
        self.fill(offset, &mut buf[..n])?;
        Ok(n)
    }

    fn fill(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.inner.read_at(&mut buf[done..], offset + done as u64)?;
            if n == 0 {
                return Err(ProbeError::Truncated(format!(
                    "file ended at {} while reading",
                    offset + done as u64
                )));
            }
            done += n;
        }
        Ok(())
    }
}

pub(crate) fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

pub(crate) fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

pub(crate) fn be_u24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_buffers_come_back_empty_with_their_memory() {
        {
            let mut a = Scratch::take();
            a.extend_from_slice(&[7u8; 1000]);
        }
        let b = Scratch::take();
        assert!(b.is_empty() && b.capacity() >= 1000);
        // Two at once: the second is another buffer.
        let c = Scratch::take();
        assert_ne!(b.as_ptr(), c.as_ptr());
    }

    #[test]
    fn large_scratch_buffers_are_not_kept() {
        {
            let mut a = Scratch::take();
            a.resize(KEPT_BYTES + 1, 0);
        }
        for _ in 0..SPARES + 1 {
            assert!(Scratch::take().capacity() <= KEPT_BYTES);
        }
    }

    #[test]
    fn read_into_checks_the_span_and_fills_exactly() {
        let bytes: Vec<u8> = (0..100u8).collect();
        let src = Source::new(&bytes, 100);
        let mut buf = Scratch::take();
        buf.extend_from_slice(&[9u8; 500]);
        src.read_into(90, 10, "tail", &mut buf).unwrap();
        assert_eq!(&buf[..], &bytes[90..]);
        assert!(matches!(
            src.read_into(95, 10, "tail", &mut buf),
            Err(ProbeError::Truncated(_))
        ));
        assert!(matches!(
            src.read_into(0, MAX_READ + 1, "tag", &mut buf),
            Err(ProbeError::Malformed(_))
        ));
    }
}
