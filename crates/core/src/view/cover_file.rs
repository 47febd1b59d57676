//! Opening a folder's cover ([`crate::view::tree::CoverArt`]): a file
//! whose bytes are one picture of the store.

use super::*;
use crate::view::tree::Entry;

fn enoent() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOENT)
}

impl View {
    /// Opens cover `ino`. It stands for the first of its folder's tracks
    /// that carries the picture: that track's row versions it (HTTP
    /// validators, the kernel's cached pages), as an edit of the track's
    /// pictures is what changes the cover.
    pub(super) fn open_cover(&self, ino: u64, store_generation: u64) -> io::Result<OpenFile> {
        let (art, served, track_id) = {
            let tree = self.tree();
            let node = tree.get(ino).ok_or_else(enoent)?;
            let Entry::Cover(cover) = node.entry else {
                return Err(enoent());
            };
            let art = cover.art;
            let cover_served = crate::view::served_file::ServedFile::of_cover(&cover);
            let Some(Entry::Dir { children }) = tree.get(node.parent).map(|n| &n.entry) else {
                return Err(enoent());
            };
            let track = children
                .values()
                .find_map(|child| match tree.get(*child).map(|n| &n.entry) {
                    Some(Entry::File(f)) if f.cover == Some(art) => Some(f.track_id),
                    _ => None,
                });
            (art, cover_served, track.ok_or_else(enoent)?)
        };
        let track = self
            .pool
            .with(|store| {
                store
                    .track(track_id)
                    .map_err(|e| failed(track_id, Log::Yes, "reading the store", &e))
            })?
            .ok_or_else(enoent)?;
        let mut layout = Layout::default();
        layout.push_art(art.art_rowid, u64::from(art.len));
        Ok(OpenFile::from_store(track, layout, served, store_generation))
    }
}
