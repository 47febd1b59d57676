//! Command-line arguments.

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "retagfs",
    version,
    about = "A read-only FUSE view of a music library with clean paths and fresh tags",
    long_about = "retagfs scans a music library into a SQLite store, then mounts a clean view of it: \
paths come from a template over the tags, and every file carries metadata generated from the store \
in front of the original, untouched audio bytes. The library itself is never written to.\n\n\
Typical use:\n  retagfs scan ~/Music --db music.db\n  retagfs mount ~/clean --db music.db\n\n\
Exit codes: 0 success, 1 fatal error, 2 usage error.",
    after_help = "Logging: -v for info, -vv for debug, or RETAGFS_LOG=<filter>."
)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Settings file (TOML): keys are long options without their dashes,
    /// and become those options' defaults (`template = "$artist/$title"`;
    /// `[mount]` for one command's). Flags override it [default:
    /// $XDG_CONFIG_HOME/retagfs/config.toml, when it exists].
    #[arg(long, global = true, value_name = "FILE", env = "RETAGFS_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Scan music folders into the store (re-scans skip unchanged files).
    Scan(ScanArgs),
    /// Mount the store's view of the library (blocks until unmounted).
    #[command(
        after_help = "Edits to the store (retagfs tag/art/import, raw SQL per docs/store.md, \
re-scans), and a store moved over this one, show up in the mount without a remount.\n\n\
Ctrl-C, SIGTERM or SIGHUP unmounts. With files open in it, the mount is detached instead \
(as `umount -l`): it leaves the directory tree at once and serves the open files until they \
are closed, then exits; a second signal stops it at once."
    )]
    Mount(MountArgs),
    /// Serve the store's view over HTTP and WebDAV (blocks until Ctrl-C):
    /// GET and HEAD of every file and folder, ranges, listings, playlists,
    /// and PROPFIND for file managers (read-only WebDAV).
    #[command(
        after_help = "No FUSE and no root needed. Files are byte-identical to what `retagfs mount` \
serves; edits to the store show up at once. Folders list as HTML for browsers, as JSON with \
`Accept: application/json`, and as an M3U8 playlist with `?m3u` (`curl 'http://127.0.0.1:8780/Artist/Album/?m3u'`).\n\n\
File managers and players that browse connect with WebDAV to the same URL (Finder, Explorer, \
davfs2, rclone, Kodi, VLC): read-only, class 1.\n\n\
The server only reads (OPTIONS, GET, HEAD, PROPFIND). Without --auth-file anyone who reaches it \
reads the whole library: keep --listen on loopback, or give --auth-file (`htpasswd -cB FILE USER`) \
and, beyond this machine, --tls-cert and --tls-key (or a TLS reverse proxy in front). \
SIGHUP reads the certificate again."
    )]
    Serve(ServeArgs),
    /// Print every track as JSON: id, backing_path, path, format, tags, art.
    Export(ExportArgs),
    /// List the tracks that match a query: their paths in the view, or JSON
    /// as `export` prints it.
    #[command(after_help = "Queries (docs/query.md), as in beets:\n  \
miles              artist, album artist, album or title contains it (case and accents ignored)\n  \
genre:jazz         a field contains it;  genre:=Jazz  is exactly it;  genre::^J.z+$  matches a regex\n  \
year:1955..1965    a range (also year:2000.. or ..1999); year is the date's first four digits\n  \
added:-30d..       entered the store in the last 30 days (also added:2026-01)\n  \
albumartist:=      the field is missing or empty\n  \
-genre:jazz        not (also ^genre:jazz);   \"two words\"  quotes group words\n  \
a b , c d          (a and b) or (c and d)")]
    Query(QueryArgs),
    /// Read or edit a track's tags in the store.
    Tag(TagArgs),
    /// Set or remove a track's pictures in the store.
    Art(ArtArgs),
    /// Revert the last edit made through retagfs (`tag`, `art`, `import`,
    /// edits by query, and `undo` itself), or list the recent ones.
    #[command(
        after_help = "The store keeps the tags and pictures of every track an edit changed, for \
the last 50 edits. `retagfs undo` puts back those of the last one, in one transaction, as an edit of \
its own: a second `retagfs undo` redoes it. Changes made by other tools (raw SQL) or by re-scans of \
changed files are listed by --list but cannot be undone."
    )]
    Undo(UndoArgs),
    /// Apply bulk tag edits from JSON in the shape `export` prints, in one
    /// transaction: tracks matched by `id` or `backing_path`; each key of
    /// `tags` replaces that key's values (a string, a list, or null to remove).
    Import(ImportArgs),
    /// Show the settings each command runs with when no flag is given, and
    /// where each comes from: its environment variable (RETAGFS_<OPTION>),
    /// the configuration file, or the built-in default.
    Config(ConfigArgs),
    /// Copy the store to FILE while it is mounted and edited: a consistent
    /// copy as of one commit, which `mount --db FILE` and every command
    /// open as they open the original.
    Backup(BackupArgs),
    /// Compact the store (SQLite's VACUUM) while it is mounted and edited:
    /// edits wait meanwhile, mounts go on reading, nothing committed is
    /// lost. Waits for a running scan to end first (--wait). Prints the
    /// size before and after.
    Vacuum(VacuumArgs),
    /// Check what a first mount needs (/dev/fuse, fusermount3, the store,
    /// the library's folders, free space) and say what to do about each
    /// problem. Exit 0 when a mount would work, 1 when something would
    /// stop it.
    Doctor(DoctorArgs),
    /// Print the completion script of a shell (`make install` installs
    /// them): `source <(retagfs completions bash)`.
    Completions(CompletionsArgs),
    /// Write a manual page per command into a folder (for packaging).
    #[command(hide = true)]
    ManPages(ManPagesArgs),
}

impl Command {
    /// The store the command works on, when given.
    pub fn db(&self) -> Option<&Path> {
        match self {
            Command::Scan(a) => Some(&a.db),
            Command::Mount(a) => Some(&a.db),
            Command::Serve(a) => Some(&a.db),
            Command::Export(a) => Some(&a.db),
            Command::Query(a) => Some(&a.db),
            Command::Undo(a) => Some(&a.db),
            Command::Tag(a) => a.db.as_deref(),
            Command::Art(a) => a.db.as_deref(),
            Command::Import(a) => Some(&a.db),
            Command::Backup(a) => Some(&a.db),
            Command::Vacuum(a) => Some(&a.db),
            Command::Doctor(a) => a.db.as_deref(),
            Command::Config(_) | Command::Completions(_) | Command::ManPages(_) => None,
        }
    }

    /// How the command lays out the view, when it does.
    pub fn view_args_mut(&mut self) -> Option<&mut ViewArgs> {
        match self {
            Command::Mount(a) => Some(&mut a.view),
            Command::Serve(a) => Some(&mut a.view),
            Command::Export(a) => Some(&mut a.view),
            Command::Query(a) => Some(&mut a.view),
            _ => None,
        }
    }
}

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh or fish.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args)]
pub struct ManPagesArgs {
    /// The folder to write `retagfs.1` and `retagfs-COMMAND.1` into.
    pub dir: PathBuf,
}

#[derive(Args)]
pub struct DoctorArgs {
    /// The store a mount would serve (without it, only the machine is
    /// checked).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Print every check as JSON: `ok`, and `checks` (check, status: ok,
    /// fail or note, detail).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct BackupArgs {
    /// The store to copy.
    #[arg(long)]
    pub db: PathBuf,
    /// The copy: a file that does not exist yet.
    pub file: PathBuf,
}

#[derive(Args)]
pub struct VacuumArgs {
    /// The store to compact.
    #[arg(long)]
    pub db: PathBuf,
    /// Seconds to wait for a running scan to end before giving up.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub wait: u64,
    /// Print the sizes as JSON on stdout: `before_bytes`, `after_bytes`,
    /// `seconds`, `wal_emptied`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ConfigArgs {
    /// Print them as JSON: `file`, and `settings` (command, option, values,
    /// source, variable).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ImportArgs {
    /// The store to edit.
    #[arg(long)]
    pub db: PathBuf,
    /// The JSON file, or - for standard input.
    pub file: PathBuf,
    /// Print what would change; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args)]
pub struct ScanArgs {
    /// Music folders to scan, and buckets: s3://BUCKET[/PREFIX] (see
    /// docs/usage.md, "Libraries in object storage").
    #[arg(required = true, value_name = "DIR|s3://BUCKET[/PREFIX]")]
    pub dirs: Vec<PathBuf>,
    /// The store (created if missing).
    #[arg(long)]
    pub db: PathBuf,
    /// Threads that read folders, and threads that probe files (default:
    /// one per core for folders, 16 once the walk finds itself waiting on
    /// the disk, and at least 8 for files, as a first scan mostly waits on
    /// the disk; 16 for each when a folder given is on network storage or
    /// FUSE, where every request is a round trip).
    #[arg(long, short)]
    pub jobs: Option<usize>,
    /// Follow symbolic links (loops are detected and skipped).
    #[arg(long)]
    pub follow_symlinks: bool,
    /// Remove tracks whose backing file is gone.
    #[arg(long)]
    pub prune: bool,
    /// List every folder again. By default a re-scan on a local file system
    /// (ext4, XFS, Btrfs, tmpfs, F2FS, ZFS, bcachefs) lists only folders
    /// whose ctime changed since the last scan and stats every file in the
    /// others; use this after changing the store by hand or if a file added
    /// to the library was not found.
    #[arg(long)]
    pub full: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// How paths are rendered (shared by `mount` and `export`).
#[derive(Args, Clone)]
pub struct ViewArgs {
    /// Path template, e.g. '${albumartist|artist}/$album/${tracknumber:02} $title'.
    /// Fields are tag keys plus `filename`, `format` and `disc` (the disc number
    /// when the album has several discs); `[...]` vanishes when a field in it is empty.
    #[arg(long, short)]
    pub template: Option<String>,
    /// Value for a field that has none, e.g. --fallback genre=Unknown (repeatable).
    #[arg(long = "fallback", value_name = "KEY=VALUE")]
    pub fallbacks: Vec<String>,
    /// Value for any field that has none and no --fallback of its own.
    #[arg(long, value_name = "VALUE")]
    pub default_fallback: Option<String>,
    /// Names that Windows accepts, for a view shared over SMB (Samba, Sonos,
    /// Windows clients): `< > : " \ | ? *` become `_`, trailing dots and
    /// spaces go, and device names such as `CON` or `nul.live` get a `_`.
    #[arg(long)]
    pub windows_names: bool,
    /// Give each folder of tracks a cover file (`cover.jpg` or
    /// `cover.png`, after the picture): the front cover most of its tracks
    /// carry, as media servers and players look for it. On by default when
    /// the configuration file defines views; `--covers false` turns it off.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub covers: Option<bool>,
    /// The name of cover files, without extension (`folder` for
    /// `folder.jpg`).
    #[arg(long, value_name = "NAME", default_value = "cover")]
    pub cover_name: String,
    /// The configuration file's `[[view]]`s: several views at the root.
    #[arg(skip)]
    pub views: Vec<crate::config_views::ViewDefinition>,
    /// The configuration file's `[[playlist]]`s.
    #[arg(skip)]
    pub playlists: Vec<retagfs_core::view::playlists::PlaylistSpec>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Fresh tags and art from the store in front of the original audio.
    Synthesis,
    /// The original files, byte for byte, under the template's paths.
    StructureOnly,
}

#[derive(Args)]
pub struct ServeArgs {
    /// The store made by `retagfs scan`.
    #[arg(long)]
    pub db: PathBuf,
    /// Address and port to listen on; loopback unless you say otherwise.
    #[arg(long, default_value = "127.0.0.1:8780")]
    pub listen: std::net::SocketAddr,
    /// Connections served at once; more wait their turn.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// Seconds a client may take to send a request's headers, keep a
    /// connection idle, or leave an answer unread; such a client is dropped.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub header_timeout: u64,
    /// An htpasswd file of bcrypt hashes (`htpasswd -cB FILE USER`): every
    /// request must carry one of its users' name and password (HTTP Basic).
    /// Read again when it changes.
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// Serve HTTPS with this PEM certificate chain (and --tls-key); read
    /// again on SIGHUP.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    pub view: ViewArgs,
    #[arg(long, value_enum, default_value = "synthesis")]
    pub mode: ModeArg,
}

/// `--metrics`, for `mount` and `serve`.
#[derive(Args, Clone)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics: requests,
    /// bytes and errors, open files, caches, refreshes, memory (see
    /// docs/usage.md). Keep it on loopback (127.0.0.1:PORT) unless
    /// monitoring runs on another machine.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
}

#[derive(Args)]
pub struct MountArgs {
    /// An empty directory to mount on.
    pub mountpoint: PathBuf,
    /// The store made by `retagfs scan`.
    #[arg(long)]
    pub db: PathBuf,
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    pub view: ViewArgs,
    #[arg(long, value_enum, default_value = "synthesis")]
    pub mode: ModeArg,
    /// Serve the same view over HTTP and WebDAV too, from this process (as
    /// `retagfs serve` does): one daemon, one view, one live refresh. For
    /// passwords and HTTPS, run `retagfs serve` beside the mount.
    #[arg(long, value_name = "ADDR:PORT")]
    pub serve: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// Check the template and print sample paths and counts; do not mount.
    #[arg(long)]
    pub dry_run: bool,
    /// No search folders: by default `MOUNTPOINT/.search/QUERY/` (never
    /// listed, made by looking it up) holds the tracks matching QUERY, as
    /// `retagfs query` finds them; a `/` in QUERY is written `%2F`.
    #[arg(long)]
    pub no_search: bool,
    /// Let other users (e.g. a media server) read the mount. Non-root users
    /// need `user_allow_other` in /etc/fuse.conf.
    #[arg(long)]
    pub allow_other: bool,
    /// Owner of every served file and directory (a user name or uid);
    /// default: the user who mounts.
    #[arg(long, value_name = "USER")]
    pub owner: Option<String>,
    /// Group of every served file and directory (a group name or gid);
    /// default: the mounting user's group.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Permission bits of served files, in octal; no write bits (the mount
    /// is read-only). The kernel enforces them.
    #[arg(long, value_name = "OCTAL", default_value = "444", value_parser = parse_read_only_mode)]
    pub file_mode: u16,
    /// Permission bits of directories, in octal; no write bits.
    #[arg(long, value_name = "OCTAL", default_value = "555", value_parser = parse_read_only_mode)]
    pub dir_mode: u16,
    /// Threads answering the kernel's requests; opens and reads wait on the
    /// backing files, so slow (network) storage wants more [default: 8;
    /// 32 when the store has tracks in object storage, where a read may
    /// wait out its --remote-deadline].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Serve every file through the daemon, even those the kernel could
    /// read straight from the backing file. By default, when running as
    /// root on Linux 6.9+, files served byte-identical (all of them with
    /// `--mode structure-only`) use FUSE kernel passthrough: reads at the
    /// backing disk's speed, but a backing file changed on disk is then
    /// served as it is now rather than refused until the next scan.
    #[arg(long)]
    pub no_kernel_passthrough: bool,
    /// Read backing files ahead of sequential readers, in 1 MiB chunks, six
    /// at a time (96 MiB at most in all): many-fold faster streaming from
    /// storage where each read waits milliseconds. On local disks the
    /// kernel's own read-ahead does it (no memory or threads of ours).
    #[arg(long, value_enum, default_value = "auto")]
    pub read_ahead: ReadAheadArg,
    /// How the kernel hands requests over. FUSE over io_uring (Linux 6.14+)
    /// answers each request on the CPU that asked, several times faster
    /// for walks and opens than /dev/fuse. It needs the fuse module
    /// parameter enable_uring=Y, which lets FUSE servers ask for io_uring
    /// and changes nothing else. `auto` turns it on when run as root (and
    /// says so) and otherwise uses io_uring only if it is already on; `on`
    /// fails when io_uring cannot be had; `off` keeps to /dev/fuse.
    #[arg(long, value_enum, default_value = "auto", env = "RETAGFS_IO_URING")]
    pub io_uring: IoUringArg,
    /// ID3v2 version of the tags served in MP3 files and WAV `id3 ` chunks:
    /// 4 (UTF-8, the default) or 3 (UTF-16, for players that cannot read v2.4).
    #[arg(long, value_name = "3|4", default_value_t = 4, value_parser = clap::value_parser!(u8).range(3..=4))]
    pub id3v2_version: u8,
}

#[derive(Args)]
pub struct UndoArgs {
    /// The store whose last edit to revert.
    #[arg(long)]
    pub db: PathBuf,
    /// List the edits that can be undone, newest first, and change nothing.
    #[arg(long)]
    pub list: bool,
    /// With --list, print JSON.
    #[arg(long, requires = "list")]
    pub json: bool,
}

#[derive(Args)]
pub struct QueryArgs {
    /// The store to search.
    #[arg(long)]
    pub db: PathBuf,
    /// The query; several words are joined with spaces (quote the whole to
    /// keep the shell away from quotes and `*`). One that starts with `-`
    /// comes after `--` (or write `^` for not).
    #[arg(value_name = "QUERY")]
    pub query: Vec<String>,
    /// Print the matching tracks as JSON, in the shape `export` prints.
    #[arg(long, conflicts_with = "print")]
    pub json: bool,
    /// What is printed of each matching track, one per line: `view`, its
    /// path in the view (which is built first, as a mount builds it);
    /// `library`, its backing file or object; `id`, its track id.
    #[arg(long, value_enum, default_value_t = Printed::View, value_name = "WHAT")]
    pub print: Printed,
    /// The view whose paths are printed (as `mount` takes them).
    #[command(flatten)]
    pub view: ViewArgs,
}

/// What `query` prints of each track.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Printed {
    View,
    Library,
    Id,
}

#[derive(Args)]
pub struct ExportArgs {
    /// The store to print.
    #[arg(long)]
    pub db: PathBuf,
    #[command(flatten)]
    pub view: ViewArgs,
}

#[derive(Args)]
pub struct TagArgs {
    /// The store to read or edit. Not needed when the track is named by
    /// its file in a mounted view: the mount names its store.
    #[arg(long, global = true)]
    pub db: Option<PathBuf>,
    /// Let TRACK be a folder (of the library or of a mounted view): every
    /// track under it.
    #[arg(short, long, global = true)]
    pub recursive: bool,
    /// Edit every track that matches this query (docs/query.md) instead of
    /// one TRACK: every positional argument is then a KEY=VALUE (or, for
    /// `art set`, the image).
    #[arg(long, global = true, value_name = "QUERY", conflicts_with = "recursive")]
    pub query: Option<String>,
    /// Show what the edit would change, and in how many tracks, and change
    /// nothing.
    #[arg(long, global = true)]
    pub dry_run: bool,
    #[command(subcommand)]
    pub action: TagAction,
}

#[derive(Subcommand)]
pub enum TagAction {
    /// Print a track's tags (all, or the given keys) as KEY=VALUE lines.
    Get {
        /// The track: its id (as `export` prints it), its file in the library, or
        /// its file in a mounted view.
        #[arg(value_parser = track_reference())]
        track: String,
        /// Keys to print (all when none is given).
        keys: Vec<String>,
    },
    /// Replace keys: `title=New` (repeat a key for several values).
    Set {
        /// The track: its id (as `export` prints it), its file in the library, or
        /// its file in a mounted view (with -r, a folder of either).
        #[arg(value_parser = track_reference())]
        track: String,
        /// KEY=VALUE pairs.
        #[arg(required_unless_present = "query")]
        pairs: Vec<String>,
    },
    /// Append values: `genre=Jazz`.
    Add {
        /// The track: its id (as `export` prints it), its file in the library, or
        /// its file in a mounted view (with -r, a folder of either).
        #[arg(value_parser = track_reference())]
        track: String,
        /// KEY=VALUE pairs.
        #[arg(required_unless_present = "query")]
        pairs: Vec<String>,
    },
    /// Remove keys (`comment`) or single values (`genre=Jazz`).
    Rm {
        /// The track: its id (as `export` prints it), its file in the library, or
        /// its file in a mounted view (with -r, a folder of either).
        #[arg(value_parser = track_reference())]
        track: String,
        /// Keys (`comment`) or single values (`genre=Jazz`).
        #[arg(required_unless_present = "query")]
        keys: Vec<String>,
    },
}

#[derive(Args)]
pub struct ArtArgs {
    /// The store to edit. Not needed when the track is named by its file in
    /// a mounted view: the mount names its store.
    #[arg(long, global = true)]
    pub db: Option<PathBuf>,
    /// Let TRACK be a folder (of the library or of a mounted view): every
    /// track under it.
    #[arg(short, long, global = true)]
    pub recursive: bool,
    /// Edit every track that matches this query (docs/query.md) instead of
    /// one TRACK: every positional argument is then a KEY=VALUE (or, for
    /// `art set`, the image).
    #[arg(long, global = true, value_name = "QUERY", conflicts_with = "recursive")]
    pub query: Option<String>,
    /// Show what the edit would change, and in how many tracks, and change
    /// nothing.
    #[arg(long, global = true)]
    pub dry_run: bool,
    #[command(subcommand)]
    pub action: ArtAction,
}

#[derive(Subcommand)]
pub enum ArtAction {
    /// Set the picture of a type (replacing one of that type) from an image file.
    Set {
        /// The track: its id (as `export` prints it), its file in the library, or
        /// its file in a mounted view (with -r, a folder of either).
        #[arg(value_parser = track_reference())]
        track: String,
        /// The image file: JPEG, PNG, GIF, BMP or WebP.
        #[arg(required_unless_present = "query")]
        image: Option<PathBuf>,
        /// Picture type: front, back, leaflet, media, artist, other, or 0-20.
        #[arg(long = "type", default_value = "front")]
        picture_type: String,
    },
    /// Remove the pictures of a type (all pictures with --all).
    Rm {
        /// The track: its id (as `export` prints it), its file in the library, or
        /// its file in a mounted view (with -r, a folder of either).
        #[arg(value_parser = track_reference(), required_unless_present = "query")]
        track: Option<String>,
        /// Picture type to remove: front, back, leaflet, media, artist, other, or 0-20.
        #[arg(long = "type", default_value = "front", conflicts_with = "all")]
        picture_type: String,
        /// Remove every picture of the track.
        #[arg(long)]
        all: bool,
    },
}

/// A fallback's `KEY=VALUE` (a flag's or a view's), its key as tags
/// hold keys.
pub fn fallback_pair(pair: &str) -> Option<(String, String)> {
    let (key, value) = pair.split_once('=')?;
    Some((key.trim().to_lowercase(), value.to_string()))
}

impl ViewArgs {
    /// The view these arguments describe; a bad template or fallback is a
    /// usage error that points at the problem.
    pub fn config(&self, mode: retagfs_core::Mode) -> anyhow::Result<retagfs_core::ViewConfig> {
        use retagfs_core::{Fallbacks, Template, DEFAULT_TEMPLATE};
        let source = self.template.as_deref().unwrap_or(DEFAULT_TEMPLATE);
        let template = Template::parse(source).map_err(|e| crate::UsageError(e.to_string()))?;
        let mut fallbacks = Fallbacks::standard();
        for pair in &self.fallbacks {
            let Some((k, v)) = fallback_pair(pair) else {
                return Err(crate::UsageError(format!("--fallback {pair:?}: expected KEY=VALUE")).into());
            };
            fallbacks.per_field.insert(k, v);
        }
        fallbacks.default = self.default_fallback.clone();
        let views = self.views.iter().map(|v| {
            let mut own = fallbacks.clone();
            own.per_field.extend(v.fallbacks.iter().cloned());
            if v.default_fallback.is_some() {
                own.default = v.default_fallback.clone();
            }
            retagfs_core::view::views::ViewSpec {
                name: v.name.clone(),
                template: v.template.clone(),
                query: v.query.clone(),
                fallbacks: own,
            }
        });
        let views: Vec<_> = views.collect();
        let covers = self.covers.unwrap_or(!views.is_empty());
        let cover_name = match retagfs_core::view::tree::sanitize_component(&self.cover_name) {
            Some(name) if name == self.cover_name => name,
            _ => {
                return Err(crate::UsageError(format!(
                    "--cover-name {:?}: give a file name without `/`",
                    self.cover_name
                ))
                .into())
            }
        };
        Ok(retagfs_core::ViewConfig {
            template,
            fallbacks,
            mode,
            synthesis: Default::default(),
            windows_names: self.windows_names,
            views,
            cover_name: covers.then(|| cover_name.into()),
            playlists: self.playlists.clone(),
        })
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ReadAheadArg {
    /// Chunks for backing files on network file systems (NFS, SMB, 9p,
    /// Ceph) and FUSE; for local ones the kernel's own read-ahead, and the
    /// start of a folder's next files once one is read through.
    Auto,
    /// Chunks for every backing file.
    On,
    /// Never: every read goes to the backing file as the kernel asks.
    Off,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum IoUringArg {
    /// When the kernel has it (turned on as root).
    Auto,
    /// Always; fail if the kernel cannot offer it.
    On,
    /// Never.
    Off,
}

impl From<ReadAheadArg> for retagfs_core::ReadAheadMode {
    fn from(r: ReadAheadArg) -> Self {
        match r {
            ReadAheadArg::Auto => retagfs_core::ReadAheadMode::Auto,
            ReadAheadArg::On => retagfs_core::ReadAheadMode::Always,
            ReadAheadArg::Off => retagfs_core::ReadAheadMode::Never,
        }
    }
}

impl From<ModeArg> for retagfs_core::Mode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Synthesis => retagfs_core::Mode::Synthesis,
            ModeArg::StructureOnly => retagfs_core::Mode::StructureOnly,
        }
    }
}

/// How libraries in object stores (`s3://BUCKET/PREFIX`) are read.
/// Endpoint, region and credentials come from the standard variables
/// (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
/// AWS_PROFILE with ~/.aws/credentials), never from flags.
#[derive(Args, Clone)]
pub struct RemoteArgs {
    /// Where bytes read from object stores are kept between runs, by object,
    /// version and 128 KiB block [default: $XDG_CACHE_HOME/retagfs/objects,
    /// else ~/.cache/retagfs/objects].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The most the cache folder holds (least recently used blocks go
    /// first), e.g. 4G, 500M; 0 keeps nothing on disk.
    #[arg(long, value_name = "SIZE", default_value = "4G", value_parser = parse_size)]
    pub cache_size: u64,
    /// Seconds a read of an object may take, retries included, before it
    /// fails with EIO. While the store does not answer, reads that need it
    /// fail at once, and one a second tries it again.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = parse_deadline)]
    pub remote_deadline: f64,
}

impl RemoteArgs {
    /// Gives these settings to the process's remote (made when first used).
    pub fn apply(&self) {
        retagfs_core::set_remote_settings(retagfs_remote::RemoteSettings {
            deadline: std::time::Duration::from_secs_f64(self.remote_deadline),
            cache_dir: Some(
                self.cache_dir
                    .clone()
                    .unwrap_or_else(retagfs_remote::default_cache_dir),
            ),
            cache_size: self.cache_size,
        });
    }
}

/// A size such as 4G, 500M, 64K or a number of bytes.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (number, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let factor: u64 = match unit
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(format!("{s:?}: give a size such as 4G, 500M or 65536")),
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{s:?}: give a size such as 4G, 500M or 65536"))?;
    Ok((n * factor as f64) as u64)
}

fn parse_deadline(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?}: give seconds between 0.1 and 3600")),
    }
}

/// An octal permission mode without write, setuid, setgid or sticky bits.
fn parse_read_only_mode(s: &str) -> Result<u16, String> {
    let mode = u16::from_str_radix(s, 8).map_err(|_| format!("{s:?} is not an octal mode such as 444"))?;
    if mode > 0o777 {
        return Err(format!("{s}: only permission bits (at most 777) are allowed"));
    }
    if mode & 0o222 != 0 {
        return Err(format!(
            "{s}: the mount is read-only, so write bits cannot be given (try {:o})",
            mode & !0o222
        ));
    }
    Ok(mode)
}

/// A track reference as the store's text: a path whose name is not UTF-8
/// (which clap would refuse as a `String`) is kept byte for byte.
fn track_reference() -> impl clap::builder::TypedValueParser<Value = String> {
    use clap::builder::TypedValueParser;
    clap::builder::OsStringValueParser::new()
        .map(|given| retagfs_store::path_to_text(Path::new(&given)).into_owned())
}
