//! Canonical tag keys and how they map to each format's native fields.
//!
//! Keys follow the tag-mapping table of MusicBrainz Picard (lower-case
//! internal names such as `albumartist`, `musicbrainz_recordingid`). A key
//! outside the table passes through: as a Vorbis field of the same name, an
//! ID3 `TXXX` frame, an MP4 freeform `----:com.apple.iTunes:` atom.

use std::collections::HashMap;
use std::sync::OnceLock;

/// One row of the mapping table. `None` means the format has no native
/// field for the key (it then passes through as a custom field).
pub struct Mapping {
    pub key: &'static str,
    /// Vorbis comment field name (upper case by convention).
    pub vorbis: &'static str,
    /// ID3v2.4 frame id, or `TXXX:description` for a user text frame.
    pub id3: Option<&'static str>,
    /// MP4 atom name, or `----:NAME` for a freeform iTunes atom.
    pub mp4: Option<&'static str>,
    /// APEv2 item key.
    pub ape: Option<&'static str>,
    /// RIFF `LIST/INFO` chunk id.
    pub info: Option<&'static str>,
}

macro_rules! map {
    ($key:expr, $vorbis:expr, $id3:expr, $mp4:expr, $ape:expr, $info:expr) => {
        Mapping {
            key: $key,
            vorbis: $vorbis,
            id3: $id3,
            mp4: $mp4,
            ape: $ape,
            info: $info,
        }
    };
}

#[rustfmt::skip]
pub const TABLE: &[Mapping] = &[
    map!("title", "TITLE", Some("TIT2"), Some("\u{a9}nam"), Some("Title"), Some("INAM")),
    map!("artist", "ARTIST", Some("TPE1"), Some("\u{a9}ART"), Some("Artist"), Some("IART")),
    map!("album", "ALBUM", Some("TALB"), Some("\u{a9}alb"), Some("Album"), Some("IPRD")),
    map!("albumartist", "ALBUMARTIST", Some("TPE2"), Some("aART"), Some("Album Artist"), Some("IAAR")),
    map!("tracknumber", "TRACKNUMBER", Some("TRCK"), Some("trkn"), Some("Track"), Some("ITRK")),
    map!("totaltracks", "TOTALTRACKS", None, None, None, None),
    map!("discnumber", "DISCNUMBER", Some("TPOS"), Some("disk"), Some("Disc"), None),
    map!("totaldiscs", "TOTALDISCS", None, None, None, None),
    map!("date", "DATE", Some("TDRC"), Some("\u{a9}day"), Some("Year"), Some("ICRD")),
    map!("originaldate", "ORIGINALDATE", Some("TDOR"), Some("----:ORIGINALDATE"), Some("Original Date"), None),
    map!("genre", "GENRE", Some("TCON"), Some("\u{a9}gen"), Some("Genre"), Some("IGNR")),
    map!("composer", "COMPOSER", Some("TCOM"), Some("\u{a9}wrt"), Some("Composer"), Some("IMUS")),
    map!("comment", "COMMENT", Some("COMM"), Some("\u{a9}cmt"), Some("Comment"), Some("ICMT")),
    map!("lyrics", "LYRICS", Some("USLT"), Some("\u{a9}lyr"), Some("Lyrics"), None),
    map!("compilation", "COMPILATION", Some("TCMP"), Some("cpil"), Some("Compilation"), None),
    map!("bpm", "BPM", Some("TBPM"), Some("tmpo"), Some("BPM"), None),
    map!("isrc", "ISRC", Some("TSRC"), Some("----:ISRC"), Some("ISRC"), Some("ISRC")),
    map!("label", "LABEL", Some("TPUB"), Some("----:LABEL"), Some("Label"), None),
    map!("catalognumber", "CATALOGNUMBER", Some("TXXX:CATALOGNUMBER"), Some("----:CATALOGNUMBER"), Some("CatalogNumber"), None),
    map!("grouping", "GROUPING", Some("TIT1"), Some("\u{a9}grp"), Some("Grouping"), None),
    map!("subtitle", "SUBTITLE", Some("TIT3"), Some("----:SUBTITLE"), Some("Subtitle"), None),
    map!("lyricist", "LYRICIST", Some("TEXT"), Some("----:LYRICIST"), Some("Lyricist"), None),
    map!("conductor", "CONDUCTOR", Some("TPE3"), Some("----:CONDUCTOR"), Some("Conductor"), None),
    map!("remixer", "REMIXER", Some("TPE4"), Some("----:REMIXER"), Some("MixArtist"), None),
    map!("copyright", "COPYRIGHT", Some("TCOP"), Some("cprt"), Some("Copyright"), Some("ICOP")),
    map!("encodedby", "ENCODEDBY", Some("TENC"), Some("\u{a9}too"), Some("EncodedBy"), Some("ITCH")),
    map!("encodersettings", "ENCODERSETTINGS", Some("TSSE"), None, None, Some("ISFT")),
    map!("language", "LANGUAGE", Some("TLAN"), Some("----:LANGUAGE"), Some("Language"), Some("ILNG")),
    map!("mood", "MOOD", Some("TMOO"), Some("----:MOOD"), Some("Mood"), None),
    map!("key", "KEY", Some("TKEY"), Some("----:initialkey"), Some("Key"), None),
    map!("media", "MEDIA", Some("TMED"), Some("----:MEDIA"), Some("Media"), Some("IMED")),
    map!("originalartist", "ORIGINALARTIST", Some("TOPE"), None, None, None),
    map!("artistsort", "ARTISTSORT", Some("TSOP"), Some("soar"), Some("ArtistSort"), None),
    map!("albumartistsort", "ALBUMARTISTSORT", Some("TSO2"), Some("soaa"), Some("AlbumArtistSort"), None),
    map!("albumsort", "ALBUMSORT", Some("TSOA"), Some("soal"), Some("AlbumSort"), None),
    map!("titlesort", "TITLESORT", Some("TSOT"), Some("sonm"), Some("TitleSort"), None),
    map!("composersort", "COMPOSERSORT", Some("TSOC"), Some("soco"), Some("ComposerSort"), None),
    map!("musicbrainz_recordingid", "MUSICBRAINZ_TRACKID", Some("UFID:http://musicbrainz.org"), Some("----:MusicBrainz Track Id"), Some("MUSICBRAINZ_TRACKID"), None),
    map!("musicbrainz_releasetrackid", "MUSICBRAINZ_RELEASETRACKID", Some("TXXX:MusicBrainz Release Track Id"), Some("----:MusicBrainz Release Track Id"), Some("MUSICBRAINZ_RELEASETRACKID"), None),
    map!("musicbrainz_albumid", "MUSICBRAINZ_ALBUMID", Some("TXXX:MusicBrainz Album Id"), Some("----:MusicBrainz Album Id"), Some("MUSICBRAINZ_ALBUMID"), None),
    map!("musicbrainz_artistid", "MUSICBRAINZ_ARTISTID", Some("TXXX:MusicBrainz Artist Id"), Some("----:MusicBrainz Artist Id"), Some("MUSICBRAINZ_ARTISTID"), None),
    map!("musicbrainz_albumartistid", "MUSICBRAINZ_ALBUMARTISTID", Some("TXXX:MusicBrainz Album Artist Id"), Some("----:MusicBrainz Album Artist Id"), Some("MUSICBRAINZ_ALBUMARTISTID"), None),
    map!("musicbrainz_releasegroupid", "MUSICBRAINZ_RELEASEGROUPID", Some("TXXX:MusicBrainz Release Group Id"), Some("----:MusicBrainz Release Group Id"), Some("MUSICBRAINZ_RELEASEGROUPID"), None),
    map!("musicbrainz_workid", "MUSICBRAINZ_WORKID", Some("TXXX:MusicBrainz Work Id"), Some("----:MusicBrainz Work Id"), Some("MUSICBRAINZ_WORKID"), None),
    map!("musicbrainz_discid", "MUSICBRAINZ_DISCID", Some("TXXX:MusicBrainz Disc Id"), Some("----:MusicBrainz Disc Id"), Some("MUSICBRAINZ_DISCID"), None),
    map!("releasetype", "RELEASETYPE", Some("TXXX:MusicBrainz Album Type"), Some("----:MusicBrainz Album Type"), Some("MUSICBRAINZ_ALBUMTYPE"), None),
    map!("releasestatus", "RELEASESTATUS", Some("TXXX:MusicBrainz Album Status"), Some("----:MusicBrainz Album Status"), Some("MUSICBRAINZ_ALBUMSTATUS"), None),
    map!("releasecountry", "RELEASECOUNTRY", Some("TXXX:MusicBrainz Album Release Country"), Some("----:MusicBrainz Album Release Country"), Some("RELEASECOUNTRY"), None),
    map!("barcode", "BARCODE", Some("TXXX:BARCODE"), Some("----:BARCODE"), Some("Barcode"), None),
    map!("asin", "ASIN", Some("TXXX:ASIN"), Some("----:ASIN"), Some("ASIN"), None),
    map!("script", "SCRIPT", Some("TXXX:SCRIPT"), Some("----:SCRIPT"), Some("Script"), None),
    map!("replaygain_track_gain", "REPLAYGAIN_TRACK_GAIN", Some("TXXX:REPLAYGAIN_TRACK_GAIN"), Some("----:REPLAYGAIN_TRACK_GAIN"), Some("REPLAYGAIN_TRACK_GAIN"), None),
    map!("replaygain_track_peak", "REPLAYGAIN_TRACK_PEAK", Some("TXXX:REPLAYGAIN_TRACK_PEAK"), Some("----:REPLAYGAIN_TRACK_PEAK"), Some("REPLAYGAIN_TRACK_PEAK"), None),
    map!("replaygain_album_gain", "REPLAYGAIN_ALBUM_GAIN", Some("TXXX:REPLAYGAIN_ALBUM_GAIN"), Some("----:REPLAYGAIN_ALBUM_GAIN"), Some("REPLAYGAIN_ALBUM_GAIN"), None),
    map!("replaygain_album_peak", "REPLAYGAIN_ALBUM_PEAK", Some("TXXX:REPLAYGAIN_ALBUM_PEAK"), Some("----:REPLAYGAIN_ALBUM_PEAK"), Some("REPLAYGAIN_ALBUM_PEAK"), None),
];

/// Other spellings seen in real files for a canonical key, matched after
/// lower-casing (Vorbis field names, APE keys, ID3 TXXX descriptions).
const ALIASES: &[(&str, &str)] = &[
    ("album artist", "albumartist"),
    ("album_artist", "albumartist"),
    ("tracktotal", "totaltracks"),
    ("disctotal", "totaldiscs"),
    ("track", "tracknumber"),
    ("disc", "discnumber"),
    ("year", "date"),
    ("unsyncedlyrics", "lyrics"),
    ("unsynced lyrics", "lyrics"),
    ("musicbrainz_trackid", "musicbrainz_recordingid"),
    ("musicbrainz_albumtype", "releasetype"),
    ("musicbrainz_albumstatus", "releasestatus"),
    ("mixartist", "remixer"),
    ("initialkey", "key"),
];

struct Index {
    by_native: HashMap<String, &'static str>,
    by_key: HashMap<&'static str, &'static Mapping>,
}

fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut by_native = HashMap::new();
        let mut by_key = HashMap::new();
        for (alias, key) in ALIASES {
            by_native.insert(alias.to_string(), *key);
        }
        for m in TABLE {
            by_key.insert(m.key, m);
            by_native.insert(m.vorbis.to_lowercase(), m.key);
            for native in [m.ape, m.id3, m.mp4].into_iter().flatten() {
                // TXXX descriptions and freeform names also appear bare (as
                // Vorbis or APE keys written by other taggers).
                let bare = native.split_once(':').map_or(native, |(_, d)| d);
                by_native.entry(bare.to_lowercase()).or_insert(m.key);
            }
        }
        // A Vorbis field named like an MP4 atom or ID3 frame is not that field.
        for m in TABLE {
            by_native.insert(m.key.to_string(), m.key);
        }
        Index { by_native, by_key }
    })
}

/// The mapping row of a canonical key, if the key is in the table.
pub fn mapping(key: &str) -> Option<&'static Mapping> {
    index().by_key.get(key).copied()
}

/// Canonical key for a field name as found in a file (Vorbis field, APE
/// key, ID3 TXXX description, MP4 freeform name): trimmed, lower-cased,
/// known aliases resolved. Returns `None` for a name that is not a usable key.
pub fn canonical_key(native: &str) -> Option<String> {
    let k = native.trim().to_lowercase();
    if k.is_empty() || k.contains('=') || k.chars().any(|c| c.is_control()) {
        return None;
    }
    Some(index().by_native.get(&k).map(|s| s.to_string()).unwrap_or(k))
}

/// The canonical key of a native ID3 frame id / MP4 atom, if it has one.
pub fn key_for_native(native: &str) -> Option<&'static str> {
    TABLE.iter().find_map(|m| {
        (m.id3 == Some(native) || m.mp4 == Some(native) || m.info == Some(native)).then_some(m.key)
    })
}

/// Collects tags from a file into canonical form: cleaned values, `3/12`
/// numbers split into number and total, empty values dropped.
#[derive(Default)]
pub struct TagList {
    tags: Vec<(String, String)>,
}

impl TagList {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a value under a native field name (canonicalized here).
    pub fn push_native(&mut self, native: &str, value: &str) {
        if let Some(key) = canonical_key(native) {
            self.push(&key, value);
        }
    }

    /// Adds a value under a canonical key.
    pub fn push(&mut self, key: &str, value: &str) {
        let Some(value) = clean_value(value) else {
            return;
        };
        let total_key = match key {
            "tracknumber" => "totaltracks",
            "discnumber" => "totaldiscs",
            _ => {
                self.tags.push((key.into(), value));
                return;
            }
        };
        match value.split_once('/') {
            Some((n, total)) => {
                for (k, v) in [(key, n.trim()), (total_key, total.trim())] {
                    if !v.is_empty() {
                        self.tags.push((k.into(), v.into()));
                    }
                }
            }
            None => self.tags.push((key.into(), value)),
        }
    }

    /// The tags, with a total that was given twice (once in `3/12`, once as
    /// its own field) kept once.
    pub fn finish(self) -> Vec<(String, String)> {
        let mut seen: Vec<(String, String)> = Vec::with_capacity(self.tags.len());
        for (k, v) in self.tags {
            let is_total = k == "totaltracks" || k == "totaldiscs";
            if is_total && seen.iter().any(|(sk, _)| *sk == k) {
                continue;
            }
            seen.push((k, v));
        }
        seen
    }
}

/// Adds the keys of a lower-priority tag container that the primary one
/// lacks (the way taggers merge ID3v2 with APEv2 and ID3v1).
pub fn merge_missing(primary: &mut Vec<(String, String)>, secondary: Vec<(String, String)>) {
    let have: std::collections::HashSet<String> = primary.iter().map(|(k, _)| k.clone()).collect();
    primary.extend(secondary.into_iter().filter(|(k, _)| !have.contains(k)));
}

/// Cleans a value as taggers leave it: trailing NUL bytes removed; a value
/// that is empty after that is dropped.
pub fn clean_value(v: &str) -> Option<String> {
    let v = v.trim_end_matches('\0');
    if v.trim().is_empty() {
        None
    } else {
        Some(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_keys_resolve_aliases_and_case() {
        assert_eq!(canonical_key("Album Artist").unwrap(), "albumartist");
        assert_eq!(canonical_key("ALBUMARTIST").unwrap(), "albumartist");
        assert_eq!(canonical_key("TRACKTOTAL").unwrap(), "totaltracks");
        assert_eq!(
            canonical_key("MUSICBRAINZ_TRACKID").unwrap(),
            "musicbrainz_recordingid"
        );
        assert_eq!(
            canonical_key("MusicBrainz Album Id").unwrap(),
            "musicbrainz_albumid"
        );
        assert_eq!(canonical_key("My Custom").unwrap(), "my custom");
        assert_eq!(canonical_key(" "), None);
        assert_eq!(canonical_key("a=b"), None);
    }

    #[test]
    fn track_numbers_split_and_totals_dedup() {
        let mut t = TagList::new();
        t.push("tracknumber", "3/12");
        t.push("totaltracks", "12");
        t.push("discnumber", "1/2");
        t.push("title", "x\0");
        t.push("genre", "\0");
        assert_eq!(
            t.finish(),
            vec![
                ("tracknumber".into(), "3".into()),
                ("totaltracks".into(), "12".into()),
                ("discnumber".into(), "1".into()),
                ("totaldiscs".into(), "2".into()),
                ("title".into(), "x".into()),
            ]
        );
    }
}
