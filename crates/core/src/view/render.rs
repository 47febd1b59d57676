//! Rendering the tree: where each track goes, from its tags through the
//! template, and the size of its served file.

use super::*;
use crate::view::found_tracks::FoundTracks;
use crate::view::playlists::playlists_matching;
use crate::view::tree::CoverArt;

/// How files are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Fresh metadata from the store in front of the original audio.
    Synthesis,
    /// The backing file's bytes, unchanged, under the template's paths.
    StructureOnly,
}

/// How the tree is laid out and files are served.
#[derive(Debug, Clone)]
pub struct ViewConfig {
    pub template: Template,
    pub fallbacks: Fallbacks,
    pub mode: Mode,
    pub synthesis: SynthesisOptions,
    /// Names Windows accepts ([`crate::view::tree::windows_safe`]), for a view
    /// shared over SMB.
    pub windows_names: bool,
    /// Several views at the root, each its own folder; none: one view,
    /// `template` at the root.
    pub views: Vec<crate::view::views::ViewSpec>,
    /// Folders hold a cover named this, `.jpg` or `.png` after the picture
    /// (`cover`); None: no covers.
    pub cover_name: Option<std::sync::Arc<str>>,
    /// Smart playlists, in `Playlists/` at the root.
    pub playlists: Vec<crate::view::playlists::PlaylistSpec>,
}

/// A track's tags as template fields, plus computed fields:
/// `filename` (backing file name without extension), `format`, and `disc`
/// (the disc number when the album has several discs, else nothing).
pub struct TrackFields<'a> {
    track: &'a TrackRow,
    tags: &'a [(String, String)],
}

impl<'a> TrackFields<'a> {
    pub fn new(track: &'a TrackRow, tags: &'a [(String, String)]) -> Self {
        TrackFields { track, tags }
    }

    fn tag(&self, key: &str) -> Option<String> {
        let values: Vec<&str> = self
            .tags
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect();
        (!values.is_empty()).then(|| values.join(", "))
    }
}

fn leading_number(v: &str) -> Option<u32> {
    let digits: String = v.trim().chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

impl Fields for TrackFields<'_> {
    fn get(&self, field: &str) -> Option<String> {
        match field {
            // Bytes of the name that are not UTF-8 read as Latin-1.
            "filename" => Path::new(&*text_for_display(&self.track.backing_path))
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned()),
            "format" => Some(self.track.format.as_str().to_string()),
            "disc" => {
                let disc = self.tag("discnumber")?;
                // "1/2" (disc 1 of 2, as ID3 writes it) says both.
                let (number, of) = disc.split_once('/').unwrap_or((&disc, ""));
                let total = self
                    .tag("totaldiscs")
                    .and_then(|t| leading_number(&t))
                    .or_else(|| leading_number(of));
                let several = total.is_some_and(|t| t > 1) || leading_number(number).is_some_and(|d| d > 1);
                several.then(|| number.trim().to_string())
            }
            _ => self.tag(field),
        }
    }

    fn values(&self, field: &str) -> Vec<String> {
        match field {
            "filename" | "format" | "disc" => self.get(field).into_iter().collect(),
            _ => (self.tags.iter())
                .filter(|(k, _)| k == field)
                .map(|(_, v)| v.clone())
                .collect(),
        }
    }
}

/// Tracks handed to a rendering thread at a time.
pub(super) const RENDER_BATCH: usize = 256;

/// Reads every track and builds the tree at once (inside
/// [`Store::read_snapshot`] for one consistent state): this thread reads
/// the store, one thread per core renders batches of tracks, and one more
/// grows the tree batch by batch in track id order. Returns the tree and
/// the number of tracks.
pub fn load_tree(store: &Store, config: &ViewConfig) -> retagfs_store::Result<(Tree, usize)> {
    let loaded = load_view(store, config, None, false)?;
    Ok((loaded.tree, loaded.tracks))
}

/// What [`load_view`] read.
pub(super) struct Loaded {
    pub tree: Tree,
    pub tracks: usize,
    /// The tracks each playlist's query matches, in the configuration's
    /// order (when they were asked for).
    pub playlist_tracks: Vec<FoundTracks>,
}

/// A batch of tracks rendered: its number, its placements, the fields
/// that had a value, and the tracks playlists match (by the playlist's
/// place in the configuration).
type Rendered = (usize, Vec<Placement>, u64, Vec<FoundTracks>);

/// [`load_tree`], noting in `valued`, if given, which of the template's
/// fields ([`Template::fields`], the first 64) had a value in some track,
/// and finding each playlist's tracks in the same pass if `find_playlists`
/// (the queries tested on the tracks read, not run again on the store).
pub(super) fn load_view(
    store: &Store,
    config: &ViewConfig,
    valued: Option<&mut u64>,
    find_playlists: bool,
) -> retagfs_store::Result<Loaded> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (batches_tx, batches_rx) = crossbeam_channel::bounded::<(usize, Vec<TrackBundle>)>(workers * 2);
    let (placed_tx, placed_rx) = crossbeam_channel::unbounded::<Rendered>();
    let names = config.template.fields();
    let noting = valued.is_some();
    let playlists = if find_playlists {
        config.playlists.as_slice()
    } else {
        &[]
    };
    std::thread::scope(|s| {
        for _ in 0..workers {
            let (batches, placed, names) = (batches_rx.clone(), placed_tx.clone(), &names);
            s.spawn(move || {
                for (n, batch) in batches {
                    let mut valued = 0;
                    let mut placed_batch = Vec::with_capacity(batch.len());
                    let mut found: Vec<FoundTracks> =
                        playlists.iter().map(|_| FoundTracks::default()).collect();
                    for b in batch {
                        let fields = TrackFields::new(&b.track, &b.tags);
                        if noting {
                            let fields = NotingFields::new(fields, names);
                            placed_batch.extend(placements(config, &b, &fields));
                            valued |= fields.valued.get();
                        } else {
                            placed_batch.extend(placements(config, &b, &fields));
                        }
                        for index in playlists_matching(playlists, &b) {
                            found[index].push(&playlists[index], &b);
                        }
                    }
                    if placed.send((n, placed_batch, valued, found)).is_err() {
                        return;
                    }
                }
            });
        }
        drop((batches_rx, placed_tx));
        let builder = s.spawn(move || {
            let mut tree = TreeBuilder::default().with_covers(config.cover_name.clone());
            let mut valued = 0;
            let mut playlist_tracks: Vec<FoundTracks> =
                playlists.iter().map(|_| FoundTracks::default()).collect();
            // Batches rendered ahead of one still being rendered wait here.
            let mut early = BTreeMap::new();
            let mut next = 0;
            for (n, placements, batch_valued, found) in placed_rx {
                valued |= batch_valued;
                early.insert(n, (placements, found));
                while let Some((placements, found)) = early.remove(&next) {
                    placements.into_iter().for_each(|p| tree.add(p));
                    for (tracks, batch) in playlist_tracks.iter_mut().zip(found) {
                        tracks.append(batch);
                    }
                    next += 1;
                }
            }
            (tree.finish(), valued, playlist_tracks)
        });
        let (mut count, mut sent) = (0, 0);
        let mut batch = Vec::with_capacity(RENDER_BATCH);
        let read = store.for_each_track(|bundle| {
            count += 1;
            batch.push(bundle);
            if batch.len() == RENDER_BATCH {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(RENDER_BATCH));
                let _ = batches_tx.send((sent, full));
                sent += 1;
            }
        });
        if !batch.is_empty() {
            let _ = batches_tx.send((sent, batch));
        }
        drop(batches_tx);
        let (mut tree, tree_valued, playlist_tracks) = builder.join().expect("building the tree panicked");
        if let Some(valued) = valued {
            *valued = tree_valued;
        }
        let playlist_names: Vec<String> = config.playlists.iter().map(|p| p.name.clone()).collect();
        tree.add_playlists(crate::view::playlists::PLAYLISTS_FOLDER, &playlist_names);
        read.map(|()| Loaded {
            tree,
            tracks: count,
            playlist_tracks,
        })
    })
}

/// A track's fields, noting which of `names` had a value (bit i for
/// `names[i]`).
struct NotingFields<'a> {
    fields: TrackFields<'a>,
    names: &'a [&'a str],
    valued: std::cell::Cell<u64>,
}

impl<'a> NotingFields<'a> {
    fn new(fields: TrackFields<'a>, names: &'a [&'a str]) -> Self {
        NotingFields {
            fields,
            names,
            valued: std::cell::Cell::new(0),
        }
    }
}

impl Fields for NotingFields<'_> {
    fn get(&self, field: &str) -> Option<String> {
        let value = self.fields.get(field);
        if value.as_deref().is_some_and(|v| !v.trim().is_empty()) {
            if let Some(bit) = self.names.iter().position(|n| *n == field).filter(|&i| i < 64) {
                self.valued.set(self.valued.get() | 1 << bit);
            }
        }
        value
    }

    fn values(&self, field: &str) -> Vec<String> {
        self.fields.values(field)
    }
}

/// The template's field references (`${albumartist|artist}`) that no track
/// had a value for, given the fields that had one (`valued`, as
/// [`load_view`] notes them). Computed fields are left out: `disc`
/// is empty wherever no album has several discs.
pub(super) fn references_never_valued(template: &Template, valued: u64) -> Vec<String> {
    let names = template.fields();
    let had_value = |name: &str| {
        let bit = names.iter().position(|n| *n == name);
        bit.is_none_or(|i| i >= 64 || valued & (1 << i) != 0)
    };
    let mut out: Vec<String> = template
        .chains()
        .into_iter()
        .filter(|chain| !chain.iter().any(|f| COMPUTED_FIELDS.contains(&f.as_str())))
        .filter(|chain| !chain.iter().any(|f| had_value(f)))
        .map(|chain| format!("${{{}}}", chain.join("|")))
        .collect();
    out.dedup();
    out
}

/// Fields [`TrackFields`] computes rather than reads from the tags.
const COMPUTED_FIELDS: [&str; 3] = ["filename", "format", "disc"];

/// Where a track goes in the tree (each view's folder that shows it) and
/// its served size.
fn placements(config: &ViewConfig, b: &TrackBundle, fields: &dyn Fields) -> Vec<Placement> {
    let file = file_entry(config, b);
    let placed = |path: String| Placement {
        path: if config.windows_names {
            crate::view::tree::windows_safe(&path)
        } else {
            path
        },
        file: file.clone(),
    };
    if config.views.is_empty() {
        let paths = config.template.render_each(fields, &config.fallbacks);
        return paths.into_iter().map(placed).collect();
    }
    let track = QueryTrack::of(b);
    (config.views.iter())
        .filter(|v| v.query.as_ref().is_none_or(|q| q.matches(&track)))
        .flat_map(|v| {
            let paths = v.template.render_each(fields, &v.fallbacks);
            paths
                .into_iter()
                .map(|path| placed(format!("{}/{}", v.name, path)))
        })
        .collect()
}

/// A track's file as the tree holds it.
fn file_entry(config: &ViewConfig, b: &TrackBundle) -> FileEntry {
    let t = &b.track;
    let size = match config.mode {
        Mode::StructureOnly => t.stamps.size,
        Mode::Synthesis => {
            synthesized_len(t, &b.tags, &b.art, &b.flac_block_lens, &b.parts, config.synthesis)
        }
    };
    FileEntry {
        track_id: t.id,
        format: t.format,
        name_extension: NameExtension::of(t.format, &t.backing_path),
        size,
        mtime_ns: t.served_mtime_ns(),
        content_version: t.content_version,
        cover: config
            .cover_name
            .as_ref()
            .and_then(|_| CoverArt::of_track(&b.art)),
    }
}

/// One track's placements read from the store, `None` once it is gone.
#[cfg(test)]
pub(super) fn load_placements(
    store: &Store,
    config: &ViewConfig,
    id: i64,
) -> retagfs_store::Result<Option<Vec<Placement>>> {
    Ok(store.track_bundle(id)?.map(|b| placements_of(config, &b)))
}

/// Where a track read from the store goes in the tree.
pub(super) fn placements_of(config: &ViewConfig, b: &TrackBundle) -> Vec<Placement> {
    placements(config, b, &TrackFields::new(&b.track, &b.tags))
}
