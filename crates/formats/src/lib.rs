//! Per-format knowledge of retagfs: detect a file's format by content,
//! probe it with bounded reads (tags, art, the byte range of its audio), and
//! synthesize the segment layout of the file served for given tags and art.
//!
//! Nothing here touches the store or the file system directly: probes read
//! through [`Source`], layouts are plain data that the reader in
//! `retagfs-core` turns into bytes.

mod duration;
mod error;
mod flac;
mod layout;
mod mp3;
mod mp3_duration;
mod mp4;
mod ogg;
mod probe;
mod sniff;
mod source;
mod synth;
pub mod tags;
mod wav;

pub use error::{ProbeError, SynthesisError};
pub use layout::SegmentSource;
pub use layout::{Layout, Segment};
pub use probe::{probe, Probe};
pub use retagfs_store::Format;
pub use sniff::{format_mismatch, sniff};
pub use source::{ReadAt, Source};
pub use synth::{synthesize, synthesized_len, FlacBlockLen, SynthesisInput, SynthesisOptions};
pub use tags::id3v2_write::Id3Version;
pub use tags::picture::sniffed_art;
