//! Following the store: a refresh re-renders the tracks the change log
//! names; a reload builds the tree from a store that replaced the served one.

use super::render::placements_of;
use super::*;

/// Changed tracks beyond which a refresh reloads everything in bulk.
const REBUILD_ABOVE: usize = 5000;

/// What a refresh found in the store's change log.
enum Pending {
    Nothing,
    /// The log was truncated past what the tree reflects (or too many
    /// tracks changed): this tree of this many tracks, up to this log
    /// position.
    Rebuild(Box<Tree>, usize, i64),
    /// These tracks changed (None: removed), up to this log position; with
    /// the live searches each now matches, and the playlists any matches.
    Tracks(Vec<(i64, Vec<Placement>)>, Vec<(i64, Vec<u64>)>, Vec<usize>, i64),
    /// A newer retagfs migrated the store to this schema version, which
    /// this one cannot read: the view stays as it is.
    NewerSchema(i64),
    /// The store was migrated to this version, which this retagfs knows,
    /// since its connections opened it: they load it again.
    Migrated(i64),
}

/// The outcome of one refresh.
#[derive(Debug, Default)]
pub struct Refresh {
    /// Tracks re-rendered (every track for a rebuild).
    pub tracks: usize,
    /// Whether the tree was rebuilt (change log truncated past its
    /// position, or too many tracks changed to load one by one).
    pub rebuilt: bool,
    /// The tracks re-rendered, unless the tree was rebuilt.
    pub changed: Vec<i64>,
    /// The playlists (by place in the configuration) one of them matches
    /// now.
    pub playlists_matched: Vec<usize>,
    /// What the kernel must forget.
    pub invalidations: Invalidations,
}

impl View {
    /// Brings the tree up to date with the store: only the tracks the
    /// change log names since the last refresh are re-rendered, unless the
    /// log was truncated past that point (then everything is).
    pub fn refresh(&self) -> anyhow::Result<Refresh> {
        let mut seen = self.seen_seq.lock();
        let since = *seen;
        let searches = self.searches.queries();
        let pending = self
            .pool
            .with(|store| {
                store
                    .read_snapshot(|s| {
                        let version = s.schema_version_now()?;
                        if version > retagfs_store::SCHEMA_VERSION {
                            return Ok(Pending::NewerSchema(version));
                        }
                        if version != s.schema_version() {
                            return Ok(Pending::Migrated(version));
                        }
                        let last = s.last_change_seq()?;
                        if last <= since {
                            return Ok(Pending::Nothing);
                        }
                        if s.first_change_seq()?.is_some_and(|first| first > since + 1) {
                            let (tree, tracks) = load_tree(s, &self.config)?;
                            return Ok(Pending::Rebuild(Box::new(tree), tracks, last));
                        }
                        let ids = s.tracks_changed_since(since)?;
                        // Many tracks load faster in bulk than one by one.
                        if ids.len() > REBUILD_ABOVE {
                            let (tree, tracks) = load_tree(s, &self.config)?;
                            return Ok(Pending::Rebuild(Box::new(tree), tracks, last));
                        }
                        let mut changed = Vec::new();
                        let mut matched = Vec::new();
                        let mut playlists = Vec::new();
                        for id in ids {
                            let bundle = s.track_bundle(id)?;
                            if !searches.is_empty() {
                                matched.push((id, matching_searches(bundle.as_ref(), &searches)));
                            }
                            if let Some(b) = &bundle {
                                self.note_matching_playlists(b, &mut playlists);
                            }
                            changed.push((
                                id,
                                bundle.map_or_else(Vec::new, |b| placements_of(&self.config, &b)),
                            ));
                        }
                        Ok(Pending::Tracks(changed, matched, playlists, last))
                    })
                    .map_err(|e| io::Error::other(e.to_string()))
            })
            .context("reading the store's change log")?;
        let mut out = Refresh::default();
        match pending {
            Pending::Nothing => {}
            Pending::NewerSchema(version) => self.note_newer_schema(version),
            Pending::Migrated(version) => {
                drop(seen);
                tracing::info!("the store was migrated to schema version {version}: loading it again");
                return self.reload();
            }
            Pending::Rebuild(new, tracks, last) => {
                out = self.replace_tree(*new, tracks);
                *seen = last;
            }
            Pending::Tracks(changed, matched, playlists, last) => {
                let mut tree = self.tree.write();
                out.tracks = changed.len();
                out.changed = changed.iter().map(|(id, _)| *id).collect();
                out.playlists_matched = playlists;
                for (id, placements) in changed {
                    tree.replace(file_ino(id), placements, &mut out.invalidations);
                }
                tree.note_listing_changes(&out.invalidations, None);
                self.searches
                    .follow(&matched, |id| search::placement_in(&tree, id));
                // After the tree: an open that read the store before this
                // refresh and caches the old row is then caught by the
                // tree's newer version.
                self.opened.evict(out.changed.iter().copied());
                *seen = last;
            }
        }
        Ok(out)
    }

    /// Says, once per schema version, that a newer retagfs migrated the
    /// store and that this mount no longer follows it.
    fn note_newer_schema(&self, version: i64) {
        let mut noted = self.newer_schema_noted.lock();
        if *noted != Some(version) {
            *noted = Some(version);
            tracing::warn!(
                "a newer retagfs migrated the store {} to schema version {version} (this one \
                 reads up to {}): the mount keeps serving the view it has and no longer follows \
                 edits; restart it with the newer retagfs",
                self.pool.db.display(),
                retagfs_store::SCHEMA_VERSION
            );
        }
    }

    /// Loads the store again from its path, after the file there was
    /// replaced (a store rebuilt elsewhere and moved into place, or removed
    /// and scanned anew): the tree is built from the new one, then the
    /// connections to the old file are closed; if the new file cannot be
    /// loaded, the old one stays served. Files already open keep serving
    /// what they opened, but fail their pictures' reads (EIO). The old
    /// store's `-wal` and `-shm` must be gone from their paths first, or
    /// SQLite reads the new store through them ([`crate::view::watch`] sees to
    /// it).
    pub fn reload(&self) -> anyhow::Result<Refresh> {
        let mut seen = self.seen_seq.lock();
        self.pool.replace(
            |store| {
                store
                    .read_snapshot(|s| {
                        let (tree, tracks) = load_tree(s, &self.config)?;
                        Ok((tree, tracks, s.last_change_seq()?))
                    })
                    .context("reading the store")
            },
            |(tree, tracks, last)| {
                *seen = last;
                self.replace_tree(tree, tracks)
            },
        )
    }

    /// Serves `new` instead of the current tree; what the kernel must
    /// forget comes back.
    fn replace_tree(&self, mut new: Tree, tracks: usize) -> Refresh {
        let mut tree = self.tree.write();
        let invalidations = tree.diff(&new);
        new.note_listing_changes(&invalidations, Some(&tree));
        *tree = new;
        // Made again from the new tree when next looked up.
        self.searches.clear();
        self.opened.clear();
        self.warmed.lock().clear();
        Refresh {
            tracks,
            rebuilt: true,
            invalidations,
            ..Refresh::default()
        }
    }
}

/// The live searches (of [`search::Searches::queries`]) a track matches
/// (none once it is gone).
fn matching_searches(bundle: Option<&TrackBundle>, searches: &[(u64, Arc<Query>)]) -> Vec<u64> {
    let Some(bundle) = bundle else {
        return Vec::new();
    };
    let track = QueryTrack::of(bundle);
    searches
        .iter()
        .filter(|(_, query)| query.matches(&track))
        .map(|(id, _)| *id)
        .collect()
}
