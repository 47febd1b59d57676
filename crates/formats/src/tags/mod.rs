//! Tag containers, read and written: ID3v2, ID3v1, APEv2, Vorbis comments,
//! the pictures they carry, and the mapping of each container's field
//! names to the store's canonical keys.

pub(crate) mod ape;
pub(crate) mod genres;
pub(crate) mod id3v1;
pub(crate) mod id3v2_read;
pub(crate) mod id3v2_write;
pub mod keys;
pub(crate) mod picture;
pub(crate) mod text;
pub(crate) mod vorbis_comment;
