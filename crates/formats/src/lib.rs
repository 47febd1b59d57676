//! Per-format knowledge of retagfs: detect a file's format by content,
//! probe it with bounded reads (tags, art, the byte range of its audio), and
//! synthesize the segment layout of the file served for given tags and art.
//!
//! Nothing here touches the store or the file system directly: probes read
//! through [`Source`], layouts are plain data that the reader in
//! `retagfs-core` turns into bytes.

mod ape;
mod error;
mod flac;
mod genres;
mod id3v1;
mod id3v2_read;
mod id3v2_write;
pub mod keys;
mod layout;
mod mp3;
mod mp4;
mod mp4_samples;
mod mp4_synth;
mod ogg;
mod ogg_pages;
mod picture;
mod probe;
mod sniff;
mod source;
mod synth;
mod text;
mod vorbis_comment;
mod wav;

pub use error::ProbeError;
pub use id3v2_write::Id3Version;
pub use layout::SegmentSource;
pub use layout::{Layout, Segment};
pub use picture::sniffed_art;
pub use probe::{probe, Probe};
pub use retagfs_store::Format;
pub use sniff::{format_mismatch, sniff};
pub use source::{ReadAt, Source};
pub use synth::{synthesize, synthesized_len, FlacBlockLen, SynthesisInput, SynthesisOptions};
