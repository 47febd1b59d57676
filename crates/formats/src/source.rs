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
        self.read_exactly(offset, len as usize)
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end of the file).
    pub fn read_upto(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let len = len.min(self.size.saturating_sub(offset)).min(MAX_READ);
        self.read_exactly(offset, len as usize)
    }

    /// Reads up to `buf.len()` bytes at `offset` into `buf` (fewer at the
    /// end of the file): returns how many. For callers that reuse a buffer.
    pub fn read_upto_into(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let n = (buf.len() as u64).min(self.size.saturating_sub(offset)) as usize;
        self.fill(offset, &mut buf[..n])?;
        Ok(n)
    }

    // Zeroed here, not by the allocator (`vec![0; len]`): for a large
    // block it gets fresh pages from the kernel (madvise), a fault per page
    // and a TLB flush on every core, which cost more than the memset.
    #[allow(clippy::slow_vector_initialization)]
    fn read_exactly(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(len);
        buf.resize(len, 0);
        self.fill(offset, &mut buf)?;
        Ok(buf)
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
