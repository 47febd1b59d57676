//! What clients see of a regular file of the tree, a track's or a
//! folder's cover: its size, time, type, and the version its entity tag
//! names (HTTP and WebDAV answers, the kernel's cached pages).

use retagfs_store::Format;

use crate::view::tree::{Entry, FileEntry, FolderCover, NameExtension};
use crate::View;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServedFile {
    pub size: u64,
    pub mtime_ns: i64,
    /// With `version`, names the bytes served (an entity tag): the track,
    /// or a cover's picture.
    pub id: i64,
    pub version: i64,
    pub content_type: &'static str,
    /// The track served, when it is one.
    pub track_id: Option<i64>,
}

impl ServedFile {
    pub fn of_track(file: &FileEntry) -> ServedFile {
        ServedFile {
            size: file.size,
            mtime_ns: file.mtime_ns,
            id: file.track_id,
            version: file.content_version,
            content_type: file.content_type(),
            track_id: Some(file.track_id),
        }
    }

    pub fn of_cover(cover: &FolderCover) -> ServedFile {
        ServedFile {
            size: u64::from(cover.art.len),
            mtime_ns: cover.mtime_ns,
            // Negative: no track's.
            id: -cover.art.art_rowid,
            version: cover.art.art_rowid,
            content_type: cover.art.content_type(),
            track_id: None,
        }
    }

    pub fn is_audio(&self) -> bool {
        self.track_id.is_some()
    }
}

impl View {
    /// What clients see of the file of a node; None for a folder.
    pub fn served_file_of(&self, entry: &Entry) -> Option<ServedFile> {
        match entry {
            Entry::File(file) => Some(ServedFile::of_track(file)),
            Entry::Cover { cover, .. } => Some(ServedFile::of_cover(cover)),
            Entry::Playlist { index, .. } => self.playlist_file(*index),
            Entry::Dir { .. } => None,
        }
    }
}

impl FileEntry {
    /// The `Content-Type` of the track's served file.
    pub fn content_type(&self) -> &'static str {
        match (self.format, self.name_extension) {
            (Format::Mp4, NameExtension::M4v | NameExtension::Mp4) => "video/mp4",
            (Format::Flac, _) => "audio/flac",
            (Format::Mp3, _) => "audio/mpeg",
            (Format::Mp4, _) => "audio/mp4",
            (Format::Vorbis, _) => "audio/ogg",
            (Format::Opus, _) => "audio/ogg; codecs=opus",
            (Format::Wav, _) => "audio/wav",
        }
    }
}
