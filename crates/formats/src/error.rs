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

/// Why a served file could not be synthesized from the store's rows: the
/// open fails (EIO) and the reason is logged with the file's path.
#[derive(Debug, Error)]
pub enum SynthesisError {
    /// The rows cannot describe a valid file of their format (another tool
    /// wrote them, or wrote them wrong).
    #[error("{0}")]
    Rows(String),
    /// Bytes the layout is built from (an MP4 `moov`) no longer read as
    /// they did when the file was scanned.
    #[error("{0}")]
    Backing(#[from] ProbeError),
}

impl From<&str> for SynthesisError {
    fn from(why: &str) -> Self {
        SynthesisError::Rows(why.to_string())
    }
}

impl From<String> for SynthesisError {
    fn from(why: String) -> Self {
        SynthesisError::Rows(why)
    }
}
