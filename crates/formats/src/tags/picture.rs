//! Pictures: the FLAC PICTURE structure (also used, base64-encoded, by Ogg
//! `METADATA_BLOCK_PICTURE`) and sniffing of image type and dimensions.

use retagfs_store::{ArtLink, NewArt, ScannedPicture};

use crate::error::{malformed, Result};
use crate::source::be_u32;

/// Parses the body of a FLAC PICTURE block.
pub fn parse_flac_picture(b: &[u8]) -> Result<ScannedPicture> {
    let fields = PictureFields::parse(b)?;
    let data = Cursor {
        b,
        pos: fields.data_at,
    }
    .take(fields.data_len)?
    .to_vec();
    Ok(fields.with_image(data))
}

/// The fields of a FLAC PICTURE body before its image bytes, and where
/// those are in the body.
pub struct PictureFields {
    picture_type: u32,
    mime: String,
    description: String,
    dims: (u32, u32, u32),
    pub data_at: usize,
    pub data_len: usize,
}

impl PictureFields {
    /// Reads the fields from the start of a PICTURE body (`b` may end
    /// before the image bytes, or within them).
    pub fn parse(b: &[u8]) -> Result<PictureFields> {
        let mut r = Cursor { b, pos: 0 };
        let picture_type = r.u32()?;
        let mime_len = r.u32()? as usize;
        let mime = String::from_utf8_lossy(r.take(mime_len)?).into_owned();
        let desc_len = r.u32()? as usize;
        let description = String::from_utf8_lossy(r.take(desc_len)?).into_owned();
        let (width, height, depth, _colors) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
        let data_len = r.u32()? as usize;
        Ok(PictureFields {
            picture_type,
            mime,
            description,
            dims: (width, height, depth),
            data_at: r.pos,
            data_len,
        })
    }

    /// The picture these fields describe, with its image bytes.
    pub fn with_image(self, data: Vec<u8>) -> ScannedPicture {
        picture(
            data,
            &self.mime,
            self.picture_type.min(20) as u8,
            self.description,
            self.dims,
        )
    }
}

/// Builds a picture, trusting the image bytes over the declared mime type
/// and dimensions when the image can be recognised.
pub fn picture(
    data: Vec<u8>,
    declared_mime: &str,
    picture_type: u8,
    description: String,
    declared_dims: (u32, u32, u32),
) -> ScannedPicture {
    let art = sniffed_art(data).unwrap_or_else(|data| {
        let mime = match declared_mime.to_ascii_lowercase().as_str() {
            "" => "application/octet-stream".to_string(),
            "jpg" | "image/jpg" => "image/jpeg".to_string(),
            "png" => "image/png".to_string(),
            m => m.to_string(),
        };
        let (width, height, depth) = declared_dims;
        NewArt {
            mime,
            width,
            height,
            depth,
            data,
        }
    });
    ScannedPicture {
        sha256: art.sha256(),
        art,
        picture_type: picture_type.min(20),
        description,
    }
}

/// An image to store, its type and dimensions read from its bytes; the
/// bytes back when they are not a JPEG, PNG, GIF, BMP or WebP image.
pub fn sniffed_art(data: Vec<u8>) -> std::result::Result<NewArt, Vec<u8>> {
    match image_info(&data) {
        Some((mime, width, height, depth)) => Ok(NewArt {
            mime,
            width,
            height,
            depth,
            data,
        }),
        None => Err(data),
    }
}

/// The FLAC PICTURE structure up to and including the data length field;
/// the image bytes follow it.
pub fn flac_picture_header(link: &ArtLink) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + link.mime.len() + link.description.len());
    out.extend_from_slice(&u32::from(link.picture_type).to_be_bytes());
    out.extend_from_slice(&(link.mime.len() as u32).to_be_bytes());
    out.extend_from_slice(link.mime.as_bytes());
    out.extend_from_slice(&(link.description.len() as u32).to_be_bytes());
    out.extend_from_slice(link.description.as_bytes());
    for v in [link.width, link.height, link.depth, 0] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(&(link.data_len as u32).to_be_bytes());
    out
}

/// Length of [`flac_picture_header`] plus the image: the PICTURE body length.
pub fn flac_picture_len(link: &ArtLink) -> u64 {
    32 + link.mime.len() as u64 + link.description.len() as u64 + link.data_len
}

/// Recognises JPEG, PNG, GIF, BMP and WebP images: (mime, width, height,
/// bits per pixel). Dimensions are 0 where the header does not give them.
pub fn image_info(d: &[u8]) -> Option<(String, u32, u32, u32)> {
    if d.starts_with(b"\x89PNG\r\n\x1a\n") && d.len() >= 26 {
        let depth = u32::from(d[24])
            * match d[25] {
                2 => 3,
                4 => 2,
                6 => 4,
                _ => 1,
            };
        return Some(("image/png".into(), be_u32(&d[16..]), be_u32(&d[20..]), depth));
    }
    if d.starts_with(b"\xff\xd8\xff") {
        let (w, h, depth) = jpeg_dimensions(d).unwrap_or((0, 0, 0));
        return Some(("image/jpeg".into(), w, h, depth));
    }
    if (d.starts_with(b"GIF87a") || d.starts_with(b"GIF89a")) && d.len() >= 10 {
        let w = u16::from_le_bytes([d[6], d[7]]) as u32;
        let h = u16::from_le_bytes([d[8], d[9]]) as u32;
        return Some(("image/gif".into(), w, h, 8));
    }
    if d.starts_with(b"BM") {
        return Some(("image/bmp".into(), 0, 0, 0));
    }
    if d.len() >= 12 && &d[..4] == b"RIFF" && &d[8..12] == b"WEBP" {
        return Some(("image/webp".into(), 0, 0, 0));
    }
    None
}

/// Walks JPEG markers to the first start-of-frame segment.
fn jpeg_dimensions(d: &[u8]) -> Option<(u32, u32, u32)> {
    let mut i = 2;
    while i + 9 < d.len() {
        if d[i] != 0xff {
            return None;
        }
        let marker = d[i + 1];
        if marker == 0xff {
            i += 1;
            continue;
        }
        let len = u16::from_be_bytes([d[i + 2], d[i + 3]]) as usize;
        let is_sof = matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc);
        if is_sof {
            let h = u16::from_be_bytes([d[i + 5], d[i + 6]]) as u32;
            let w = u16::from_be_bytes([d[i + 7], d[i + 8]]) as u32;
            let components = u32::from(d[i + 9]);
            return Some((w, h, u32::from(d[i + 4]) * components));
        }
        i += 2 + len;
    }
    None
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        match self.pos.checked_add(n) {
            Some(end) if end <= self.b.len() => {
                let s = &self.b[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            _ => malformed(format!(
                "picture field of {n} bytes runs past the end of its block ({} bytes)",
                self.b.len()
            )),
        }
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(be_u32(self.take(4)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picture_header_round_trips() {
        let link = ArtLink {
            art_rowid: 1,
            sha256: String::new(),
            mime: "image/png".into(),
            width: 2,
            height: 3,
            depth: 24,
            data_len: 4,
            picture_type: 3,
            description: "front".into(),
        };
        let mut body = flac_picture_header(&link);
        body.extend_from_slice(b"\x01\x02\x03\x04");
        assert_eq!(body.len() as u64, flac_picture_len(&link));
        let p = parse_flac_picture(&body).unwrap();
        assert_eq!(p.picture_type, 3);
        assert_eq!(p.description, "front");
        assert_eq!(p.art.data, b"\x01\x02\x03\x04");
        assert_eq!((p.art.width, p.art.height), (2, 3));
    }

    #[test]
    fn truncated_picture_is_an_error() {
        assert!(parse_flac_picture(&[0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
