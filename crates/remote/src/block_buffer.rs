//! Memory for blocks, used again: a stream read back from the disk cache
//! fills one block after another, and memory fresh from the system for
//! each would cost a page fault per page, zeroed pages and, when given
//! back, a TLB shootdown on every CPU — more than the copy itself.

use std::ops::Deref;

use parking_lot::Mutex;

use crate::BLOCK;

/// Buffers kept for use again: as many as one stream holds in memory
/// (8 MiB).
const KEPT: usize = 64;

static FREE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// One block's bytes; its memory goes back to the pool when dropped.
pub struct BlockBuffer {
    bytes: Vec<u8>,
}

impl BlockBuffer {
    /// A buffer of `len` bytes (at most [`BLOCK`]) whose contents are
    /// whatever its last use left: the caller overwrites them all.
    pub fn for_overwrite(len: usize) -> BlockBuffer {
        debug_assert!(len as u64 <= BLOCK);
        let mut bytes = FREE.lock().pop().unwrap_or_default();
        if bytes.capacity() < BLOCK as usize {
            bytes.reserve_exact(BLOCK as usize - bytes.len());
        }
        // Only bytes never used before are zeroed: a block's length varies
        // only for an object's last one.
        bytes.resize(len, 0);
        BlockBuffer { bytes }
    }

    /// A buffer holding a copy of `from`.
    pub fn copy_of(from: &[u8]) -> BlockBuffer {
        let mut buffer = BlockBuffer::for_overwrite(from.len());
        buffer.bytes.copy_from_slice(from);
        buffer
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

impl Deref for BlockBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for BlockBuffer {
    fn drop(&mut self) {
        let bytes = std::mem::take(&mut self.bytes);
        let mut free = FREE.lock();
        if free.len() < KEPT {
            free.push(bytes);
        }
    }
}

impl std::fmt::Debug for BlockBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockBuffer({} bytes)", self.bytes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_used_again_holds_only_what_it_is_given() {
        let first = BlockBuffer::copy_of(&[7; 100]);
        drop(first);
        let again = BlockBuffer::copy_of(&[1; 10]);
        assert_eq!(&*again, &[1; 10]);
        let longer = BlockBuffer::for_overwrite(BLOCK as usize);
        assert_eq!(longer.len(), BLOCK as usize);
    }
}
