//! The ID3v1 genre list (with the Winamp extensions), used by ID3v1 tags,
//! numeric ID3v2 `TCON` values and MP4 `gnre` atoms.

#[rustfmt::skip]
const GENRES: &[&str] = &[
    "Blues", "Classic Rock", "Country", "Dance", "Disco", "Funk", "Grunge", "Hip-Hop", "Jazz",
    "Metal", "New Age", "Oldies", "Other", "Pop", "R&B", "Rap", "Reggae", "Rock", "Techno",
    "Industrial", "Alternative", "Ska", "Death Metal", "Pranks", "Soundtrack", "Euro-Techno",
    "Ambient", "Trip-Hop", "Vocal", "Jazz+Funk", "Fusion", "Trance", "Classical", "Instrumental",
    "Acid", "House", "Game", "Sound Clip", "Gospel", "Noise", "Alternative Rock", "Bass", "Soul",
    "Punk", "Space", "Meditative", "Instrumental Pop", "Instrumental Rock", "Ethnic", "Gothic",
    "Darkwave", "Techno-Industrial", "Electronic", "Pop-Folk", "Eurodance", "Dream",
    "Southern Rock", "Comedy", "Cult", "Gangsta", "Top 40", "Christian Rap", "Pop/Funk", "Jungle",
    "Native American", "Cabaret", "New Wave", "Psychedelic", "Rave", "Showtunes", "Trailer",
    "Lo-Fi", "Tribal", "Acid Punk", "Acid Jazz", "Polka", "Retro", "Musical", "Rock & Roll",
    "Hard Rock", "Folk", "Folk-Rock", "National Folk", "Swing", "Fast Fusion", "Bebop", "Latin",
    "Revival", "Celtic", "Bluegrass", "Avantgarde", "Gothic Rock", "Progressive Rock",
    "Psychedelic Rock", "Symphonic Rock", "Slow Rock", "Big Band", "Chorus", "Easy Listening",
    "Acoustic", "Humour", "Speech", "Chanson", "Opera", "Chamber Music", "Sonata", "Symphony",
    "Booty Bass", "Primus", "Porn Groove", "Satire", "Slow Jam", "Club", "Tango", "Samba",
    "Folklore", "Ballad", "Power Ballad", "Rhythmic Soul", "Freestyle", "Duet", "Punk Rock",
    "Drum Solo", "A Cappella", "Euro-House", "Dance Hall", "Goa", "Drum & Bass", "Club-House",
    "Hardcore Techno", "Terror", "Indie", "BritPop", "Afro-Punk", "Polsk Punk", "Beat",
    "Christian Gangsta Rap", "Heavy Metal", "Black Metal", "Crossover", "Contemporary Christian",
    "Christian Rock", "Merengue", "Salsa", "Thrash Metal", "Anime", "Jpop", "Synthpop",
    "Abstract", "Art Rock", "Baroque", "Bhangra", "Big Beat", "Breakbeat", "Chillout",
    "Downtempo", "Dub", "EBM", "Eclectic", "Electro", "Electroclash", "Emo", "Experimental",
    "Garage", "Global", "IDM", "Illbient", "Industro-Goth", "Jam Band", "Krautrock", "Leftfield",
    "Lounge", "Math Rock", "New Romantic", "Nu-Breakz", "Post-Punk", "Post-Rock", "Psytrance",
    "Shoegaze", "Space Rock", "Trop Rock", "World Music", "Neoclassical", "Audiobook",
    "Audio Theatre", "Neue Deutsche Welle", "Podcast", "Indie Rock", "G-Funk", "Dubstep",
    "Garage Rock", "Psybient",
];

/// Genre name for an ID3v1 genre index.
pub fn by_index(i: usize) -> Option<&'static str> {
    GENRES.get(i).copied()
}

/// Resolves ID3v2 `TCON` references: `(17)`, `17`, `(17)Rock`, `RX`, `CR`.
pub fn resolve_id3(value: &str) -> String {
    let v = value.trim();
    let numeric = |s: &str| s.parse::<usize>().ok().and_then(by_index);
    if let Some(name) = numeric(v) {
        return name.to_string();
    }
    if let Some(rest) = v.strip_prefix('(') {
        if let Some((n, tail)) = rest.split_once(')') {
            if !tail.is_empty() {
                return tail.to_string();
            }
            match n {
                "RX" => return "Remix".into(),
                "CR" => return "Cover".into(),
                _ => {
                    if let Some(name) = numeric(n) {
                        return name.to_string();
                    }
                }
            }
        }
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_references() {
        assert_eq!(resolve_id3("(17)"), "Rock");
        assert_eq!(resolve_id3("17"), "Rock");
        assert_eq!(resolve_id3("(17)Real Rock"), "Real Rock");
        assert_eq!(resolve_id3("Shoegaze"), "Shoegaze");
        assert_eq!(resolve_id3("(999)"), "(999)");
        assert_eq!(by_index(191), Some("Psybient"));
    }
}
