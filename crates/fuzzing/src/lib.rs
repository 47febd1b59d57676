//! The bodies of the fuzz targets in `fuzz/` (run with `make fuzz`), kept
//! here so that the inputs that once crashed them run in `make test` as
//! ordinary tests, without the fuzzer. Each function panics only on a bug.

use parking_lot::Mutex;
use std::io;
use std::sync::OnceLock;

use arbitrary::{Result as ArbResult, Unstructured};
use retagfs_core::{import, Template};
use retagfs_formats::{probe, synthesize, ReadAt, SegmentSource, Source, SynthesisInput};
use retagfs_store::{ArtLink, BackingPart, Format, PartKind, Stamps, Store, TrackRow};

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// The fuzz targets, by name (a directory of `fuzz/regressions`).
pub const TARGETS: &[(&str, Target)] = &[
    ("flac", flac),
    ("mp3", mp3),
    ("mp4", mp4),
    ("ogg", ogg),
    ("wav", wav),
    ("template", template),
    ("import", import_json),
    ("serve", serve),
    ("http", http_request),
    ("webdav", webdav_request),
    ("query", query),
];

/// A WebDAV request against a small view: the first line is its method
/// and path, header lines follow up to an empty line (`Depth` among
/// them), the rest is its body (a PROPFIND's XML). Any answer but a
/// server error; a multistatus only for a PROPFIND of a finite depth.
pub fn webdav_request(data: &[u8]) {
    static VIEW: OnceLock<(tempfile::TempDir, std::sync::Arc<retagfs_core::View>)> = OnceLock::new();
    let (_, view) = VIEW.get_or_init(small_view);
    let Some(request) = request_of(data) else {
        return;
    };
    let propfind = request.method().as_str() == "PROPFIND";
    let depth = request.headers().get("depth").map(|v| v.as_bytes().to_vec());
    let (status, _, body) = retagfs_http::answer(view.clone(), request);
    assert!(
        !status.is_server_error(),
        "{status}: {}",
        String::from_utf8_lossy(&body)
    );
    if status.as_u16() == 207 {
        assert!(
            propfind && matches!(depth.as_deref(), Some(b"0" | b"1")),
            "207 for {depth:?}"
        );
        assert!(body.starts_with(b"<?xml"), "{}", String::from_utf8_lossy(&body));
    }
}

/// A store of three tracks in two folders, and its view.
fn small_view() -> (tempfile::TempDir, std::sync::Arc<retagfs_core::View>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("fuzz.db");
    Store::open(&db)
        .expect("store")
        .conn()
        .execute_batch(
            "INSERT INTO tracks (id, backing_path, format, audio_offset, audio_length, file_size, \
             mtime_ns, ctime_ns, scanned_at) VALUES (1, '/a.flac', 'flac', 0, 0, 0, 0, 0, 0), \
             (2, '/b.mp3', 'mp3', 0, 0, 0, 0, 0, 0), (3, '/c.flac', 'flac', 0, 0, 0, 0, 0, 0); \
             INSERT INTO tags (track_id, key, position, value) VALUES \
             (1, 'title', 0, 'A & <B>'), (1, 'artist', 0, '%/#?'), (2, 'title', 0, 'Ça'), \
             (3, 'artist', 0, 'Z');",
        )
        .expect("fixture rows");
    let config = retagfs_core::ViewConfig {
        template: Template::parse(retagfs_core::DEFAULT_TEMPLATE).expect("template"),
        fallbacks: retagfs_core::Fallbacks::standard(),
        mode: retagfs_core::Mode::Synthesis,
        synthesis: Default::default(),
        windows_names: false,
        views: Vec::new(),
        cover_name: None,
        playlists: Vec::new(),
    };
    let view = retagfs_core::View::load(&db, config).expect("view");
    (dir, std::sync::Arc::new(view))
}

/// The request `data` spells, if it spells one hyper takes.
fn request_of(data: &[u8]) -> Option<hyper::Request<http_body_util::Full<hyper::body::Bytes>>> {
    let split = data.windows(2).position(|w| w == b"\n\n").unwrap_or(data.len());
    let (head, body) = (&data[..split], data.get(split + 2..).unwrap_or_default());
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.lines();
    let (method, path) = lines.next()?.split_once(' ')?;
    let mut request = hyper::Request::builder().method(method).uri(path);
    for line in lines {
        let (name, value) = line.split_once(':')?;
        request = request.header(name.trim(), value.trim());
    }
    request
        .body(http_body_util::Full::new(hyper::body::Bytes::copy_from_slice(
            body,
        )))
        .ok()
}

/// A request's path and `Range` header, as a client could send them,
/// against a small view: a path resolves to a node of the view or is
/// refused, never reaches outside it; ranges lie inside the file.
pub fn http_request(data: &[u8]) {
    use retagfs_core::view::tree::{FileEntry, NameExtension, Placement, Tree};
    let text = String::from_utf8_lossy(data);
    let (path, range) = text.split_once('\n').unwrap_or((&text, "bytes=0-"));
    let mut tree = Tree::new();
    for (i, p) in ["A/B/c", "A/d e", "%/#?"].iter().enumerate() {
        tree.place(Placement {
            path: p.to_string(),
            file: FileEntry {
                track_id: i as i64 + 1,
                format: Format::Flac,
                name_extension: NameExtension::OfFormat,
                size: 1000,
                mtime_ns: 0,
                content_version: 1,
                cover: None,
            },
        });
    }
    if let Ok((ino, _)) = retagfs_http::resolve(&tree, path) {
        assert!(
            tree.get(ino).is_some(),
            "{path:?} resolved to a node the tree lacks"
        );
    }
    if let Ok(value) = hyper::header::HeaderValue::from_str(range) {
        for size in [0u64, 1, 1000] {
            if let retagfs_http::Asked::Ranges(ranges) = retagfs_http::asked_ranges(&value, size) {
                for r in ranges {
                    assert!(
                        r.start() <= r.end() && *r.end() < size,
                        "{range:?}: {r:?} of {size}"
                    );
                }
            }
        }
    }
}

/// FLAC metadata blocks (and ID3v2 in front of them).
pub fn flac(data: &[u8]) {
    probe_and_serve(&[b"fLaC", data].concat());
}

/// ID3v2 in front of MPEG frames, ID3v1, APEv2 and Lyrics3 at the end.
pub fn mp3(data: &[u8]) {
    probe_and_serve(&[b"ID3", data].concat());
}

/// The MP4 atom tree after an empty `ftyp`.
pub fn mp4(data: &[u8]) {
    probe_and_serve(&[b"\0\0\0\x08ftyp", data].concat());
}

/// Ogg pages and Vorbis/Opus comment packets.
pub fn ogg(data: &[u8]) {
    probe_and_serve(&[b"OggS", data].concat());
}

/// RIFF/WAV chunks (the RIFF size comes from the input).
pub fn wav(data: &[u8]) {
    let size = data.get(..4).unwrap_or(&[0; 4]);
    probe_and_serve(&[b"RIFF", size, b"WAVE", data.get(4..).unwrap_or_default()].concat());
}

/// The path template parser.
pub fn template(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Template::parse(text);
    }
}

/// A query (docs/query.md): parsed, or refused with a position inside
/// it; a parsed one tested against a track with multi-valued tags.
pub fn query(data: &[u8]) {
    use retagfs_core::query::{Query, QueryTrack};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Query::parse(text, 1_790_000_000) {
        Ok(query) => {
            let tags: Vec<(String, String)> = [
                ("artist", "Beyoncé"),
                ("genre", "Jazz"),
                ("genre", "Soul"),
                ("date", "1959"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            query.matches(&QueryTrack {
                tags: &tags,
                added: 1_700_000_000,
                format: "flac",
                backing_path: "/m/a.flac",
            });
        }
        Err(e) => assert!(e.at <= text.chars().count(), "{e} for {text:?}"),
    }
}

/// The JSON of `retagfs import`, against a store holding two tracks.
pub fn import_json(data: &[u8]) {
    static STORE: OnceLock<Mutex<(tempfile::TempDir, Store)>> = OnceLock::new();
    let store = STORE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&dir.path().join("fuzz.db")).expect("store");
        store
            .conn()
            .execute_batch(
                "INSERT INTO tracks (id, backing_path, format, audio_offset, audio_length, file_size, \
                 mtime_ns, ctime_ns, scanned_at) VALUES (1, '/a.flac', 'flac', 0, 0, 0, 0, 0, 0), \
                 (2, '/b.mp3', 'mp3', 0, 0, 0, 0, 0, 0); \
                 INSERT INTO tags (track_id, key, position, value) VALUES (1, 'title', 0, 'A');",
            )
            .expect("fixture rows");
        Mutex::new((dir, store))
    });
    let guard = store.lock();
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = import::plan(&guard.1, text);
    }
}

/// Random store rows (format, audio range, parts, tags, art) around random
/// backing bytes: synthesis may refuse them, but a layout it accepts must
/// read consistently at any offset.
pub fn serve(data: &[u8]) {
    let mut u = Unstructured::new(data);
    if let Ok((track, tags, art, blocks, parts, backing, images)) = random_rows(&mut u) {
        let input = SynthesisInput {
            track: &track,
            tags: &tags,
            art: &art,
            flac_blocks: &blocks,
            parts: &parts,
            options: Default::default(),
            backing: Some(&backing as &dyn ReadAt),
        };
        let sources = Sources {
            backing: &backing,
            images: &images,
        };
        if let Ok(layout) = synthesize(&input) {
            check_reads(&layout, &sources, &mut u);
        }
    }
}

type Rows = (
    TrackRow,
    Vec<(String, String)>,
    Vec<ArtLink>,
    Vec<(u8, Vec<u8>)>,
    Vec<BackingPart>,
    Vec<u8>,
    Vec<Vec<u8>>,
);

fn random_rows(u: &mut Unstructured<'_>) -> ArbResult<Rows> {
    let format = *u.choose(&Format::ALL)?;
    let backing: Vec<u8> = u.arbitrary()?;
    let size = backing.len() as u64;
    let audio_offset = u.int_in_range(0..=size)?;
    let audio_length = u.int_in_range(0..=size - audio_offset)?;
    let track = TrackRow {
        id: 1,
        backing_path: "/fuzz".into(),
        format,
        audio_offset,
        audio_length,
        stamps: Stamps {
            size,
            mtime_ns: 0,
            ctime_ns: 0,
        },
        content_version: 1,
        passthrough: None,
        changed_at: 0,
        vendor: None,
        remote_etag: None,
        added_at: 0,
        duration_ms: None,
    };
    let tags: Vec<(String, String)> = u.arbitrary()?;
    let images: Vec<Vec<u8>> = u.arbitrary()?;
    let mut art = Vec::new();
    for (i, image) in images.iter().enumerate() {
        art.push(ArtLink {
            art_rowid: i as i64,
            sha256: "0".repeat(64),
            mime: u.choose(&["image/jpeg", "image/png", "image/gif"])?.to_string(),
            width: u.arbitrary()?,
            height: u.arbitrary()?,
            depth: u.arbitrary()?,
            data_len: image.len() as u64,
            picture_type: u.int_in_range(0..=20)?,
            description: u.arbitrary()?,
        });
    }
    let blocks: Vec<(u8, Vec<u8>)> = u.arbitrary()?;
    let kinds = [
        PartKind::Chunk,
        PartKind::Data,
        PartKind::Page,
        PartKind::Packet,
        PartKind::Atom,
        PartKind::Moov,
        PartKind::Ilst,
        PartKind::IlstInNewMeta,
        PartKind::IlstInNewUdta,
    ];
    let mut parts = Vec::new();
    for _ in 0..u.int_in_range(0..=8)? {
        let offset = u.int_in_range(0..=size)?;
        let length = u.int_in_range(0..=size - offset)?;
        parts.push(BackingPart::new(*u.choose(&kinds)?, offset, length));
    }
    Ok((track, tags, art, blocks, parts, backing, images))
}

/// Reads at random offsets agree with one whole read and never go past
/// the declared size.
fn check_reads(layout: &retagfs_formats::Layout, src: &dyn SegmentSource, u: &mut Unstructured<'_>) {
    let len = layout.len();
    if len > 64 << 20 {
        return;
    }
    let mut whole = vec![0u8; len as usize];
    let Ok(n) = layout.read_at(0, &mut whole, src) else {
        return;
    };
    assert_eq!(n as u64, len, "a whole read returns the declared size");
    for _ in 0..8 {
        let (Ok(offset), Ok(size)) = (u.int_in_range(0..=len + 10), u.int_in_range(0..=70_000usize)) else {
            break;
        };
        let mut buf = vec![0u8; size];
        if let Ok(n) = layout.read_at(offset, &mut buf, src) {
            let start = offset.min(len) as usize;
            let end = (start + size).min(len as usize);
            assert_eq!(n, end - start, "read of {size} at {offset} of {len}");
            assert_eq!(&buf[..n], &whole[start..end], "read of {size} at {offset}");
        }
    }
}

struct Sources<'a> {
    backing: &'a [u8],
    images: &'a [Vec<u8>],
}

fn copy_from(data: &[u8], offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    match data.get(start..).and_then(|d| d.get(..buf.len())) {
        Some(bytes) => {
            buf.copy_from_slice(bytes);
            Ok(())
        }
        None => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
    }
}

impl SegmentSource for Sources<'_> {
    fn read_backing(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        copy_from(self.backing, offset, buf)
    }

    fn read_art(&self, rowid: i64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let image = self.images.get(rowid as usize).ok_or(io::ErrorKind::NotFound)?;
        copy_from(image, offset, buf)
    }
}

/// Probes `file`; if it probes, serves it from the probed rows (as a scan
/// then a mount would) and checks that the served file reads consistently
/// and probes back. An Ogg file is served again with a comment too long
/// for its header pages, so that its audio pages are renumbered.
pub fn probe_and_serve(file: &[u8]) {
    let owned = file.to_vec();
    let backing: &dyn ReadAt = &owned;
    let size = file.len() as u64;
    let Ok(p) = probe(&Source::new(backing, size)) else {
        return;
    };
    assert!(
        p.audio_offset + p.audio_length <= size,
        "audio range inside the file"
    );
    serve_probed(backing, file, &p, &p.tags);
    let header_pages = p.parts.iter().filter(|part| part.kind == PartKind::Page).count();
    if matches!(p.format, Format::Vorbis | Format::Opus) && header_pages <= 4 {
        let mut tags = p.tags.clone();
        tags.push(("comment".into(), "x".repeat(header_pages * 65_025)));
        serve_probed(backing, file, &p, &tags);
    }
}

/// Serves `file` (its bytes, also as `backing`) as probed (`p`) with
/// `tags`, checks that reads at any offset agree and that the served file
/// probes back.
fn serve_probed(backing: &dyn ReadAt, file: &[u8], p: &retagfs_formats::Probe, tags: &[(String, String)]) {
    let images: Vec<Vec<u8>> = p.pictures.iter().map(|pic| pic.art.data.clone()).collect();
    let art = p.art_links();
    let track = p.track_row(file.len() as u64);
    let input = SynthesisInput {
        track: &track,
        tags,
        art: &art,
        flac_blocks: &p.flac_blocks,
        parts: &p.parts,
        options: Default::default(),
        backing: Some(backing),
    };
    let layout = synthesize(&input).unwrap_or_else(|e| panic!("a probed file must synthesize: {e}"));
    let sources = Sources {
        backing: file,
        images: &images,
    };
    let mut served = vec![0u8; layout.len() as usize];
    let n = layout
        .read_at(0, &mut served, &sources)
        .unwrap_or_else(|e| panic!("a probed file must serve: {e}"));
    assert_eq!(n, served.len());
    // Reads that start mid-file, after one that ended at the end (as the
    // kernel's read-ahead sends them), serve the same bytes.
    for at in [n / 3, n / 2, n.saturating_sub(5000)] {
        let mut part = vec![0u8; (n - at).min(70_000)];
        layout
            .read_at(at as u64, &mut part, &sources)
            .unwrap_or_else(|e| panic!("a read at {at} must serve: {e}"));
        assert_eq!(part, served[at..at + part.len()], "bytes read at {at}");
    }
    if p.format == Format::Mp3 && tags.is_empty() && p.pictures.is_empty() {
        // Nothing to write, so no ID3 tag: the served file is the audio
        // range alone, which may start with bytes before the first frame
        // (kept: decoders treat them differently) and then is not
        // recognisable by its first bytes, though it plays.
        return;
    }
    probe(&Source::new(&served as &dyn ReadAt, served.len() as u64))
        .unwrap_or_else(|e| panic!("the served file must probe back: {e}"));
}
