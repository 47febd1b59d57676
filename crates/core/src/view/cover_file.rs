//! Opening a folder's cover ([`crate::view::tree::FolderCover`]): a file
//! whose bytes are one picture of the store, versioned by the picture.

use super::*;
use crate::view::served_file::ServedFile;
use crate::view::tree::FolderCover;

impl View {
    /// Opens a cover, as the tree holds it now.
    pub(super) fn open_cover(&self, cover: &FolderCover, store_generation: u64) -> OpenFile {
        let mut layout = Layout::default();
        layout.push_art(cover.art.art_rowid, u64::from(cover.art.len));
        OpenFile::from_store(
            no_track(),
            Arc::new(layout),
            ServedFile::of_cover(cover),
            store_generation,
        )
    }
}
