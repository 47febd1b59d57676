use thiserror::Error;

/// Why a file could not be probed. The message is recorded in the store and
/// shown to the user next to the file's path.
#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("not a recognised audio format (FLAC, MP3, MP4/M4A, Ogg Vorbis, Ogg Opus, WAV)")]
    UnknownFormat,
    #[error("empty file (0 bytes)")]
    Empty,
    #[error("truncated: {0}")]
    Truncated(String),
    #[error("malformed: {0}")]
    Malformed(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("read error: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, ProbeError>;

pub(crate) fn malformed<T>(msg: impl Into<String>) -> Result<T> {
    Err(ProbeError::Malformed(msg.into()))
}
