//! The `retagfs` command line.

mod args;
mod backup;
mod completions;
mod config_file;
mod config_playlists;
mod config_report;
mod config_tables;
mod config_views;
mod doctor;
mod dry_run;
mod edit;
mod edit_transaction;
mod environment_twins;
mod export;
mod fuse_access;
mod import;
mod man_pages;
mod metrics;
mod mount;
mod query;
mod scan;
mod serve;
mod undo;
mod vacuum;

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use anyhow::bail;
use clap::{CommandFactory, FromArgMatches};
use retagfs_store::Store;

use args::{Cli, Command};

/// jemalloc: threads allocate without contending (a re-scan's walk spent a
/// third of its time waiting on glibc's allocator locks).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings: a background thread returns freed pages to the
/// system within about a second (returning each at once made every free a
/// system call and, with several threads, a TLB shootdown); one arena per
/// CPU, not four, each thread allocating from its CPU's (each arena keeps
/// the pages its threads freed until they are returned, so more arenas
/// raised a scan's peak memory). Figures: docs/benchmarks-log.md.
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: &[u8; 80] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,percpu_arena:percpu\0";

/// Returns the memory freed so far to the system now (after a mount has
/// loaded the store, so that its resident size is what it keeps).
pub fn release_free_memory() {
    // "arena.<MALLCTL_ARENAS_ALL>.purge": every arena.
    const PURGE_ALL: &[u8] = b"arena.4096.purge\0";
    // SAFETY: a documented mallctl that takes and returns nothing.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
}

/// Exit code for a fatal error (bad store, missing directory, failed mount).
const EXIT_FATAL: u8 = 1;
/// Exit code for a usage error (clap uses it too).
const EXIT_USAGE: u8 = 2;

/// An error in how the command was called (bad template, bad key): exit 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Opens a store that must already exist (every command but `scan`).
pub fn open_existing(db: &Path) -> anyhow::Result<Store> {
    check_exists(db)?;
    Ok(Store::open(db)?)
}

/// Fails, saying to scan first, when there is no store at `db`.
pub fn check_exists(db: &Path) -> anyhow::Result<()> {
    if !db.exists() {
        bail!(
            "no store at {}: create it with `retagfs scan <MUSIC_DIR> --db {}`",
            db.display(),
            db.display()
        );
    }
    Ok(())
}

/// Fails, saying to scan first, when the store at `db` holds no track
/// (there is no view to serve).
pub fn check_has_tracks(db: &Path) -> anyhow::Result<()> {
    if !open_existing(db)?.has_tracks()? {
        bail!(
            "the store {} has no tracks: run `retagfs scan <MUSIC_DIR> --db {}` first",
            db.display(),
            db.display()
        );
    }
    Ok(())
}

fn init_logging(verbose: u8) {
    // The FUSE library logs every request type it does not implement
    // (terminal ioctls from `less`, ...) at warn level: keep only its errors.
    let default = match verbose {
        0 => "warn,fuser=error",
        1 => "info,fuser=error",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("RETAGFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only for a person at a terminal: a log file or the journal
    // would keep the escape codes.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}

/// SQLite allocates with the C library's `malloc`, which alone on its heap
/// would shrink and grow the heap by a system call at a time (60,000 `brk`
/// calls in a first scan of 20k files): keep freed memory for reuse. The
/// values SQLite copies (a cover of a few hundred kB) come from the heap
/// too, not a map of their own each.
fn keep_c_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tunables; called before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TOP_PAD, 4 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 2 << 20);
    }
}

fn main() -> ExitCode {
    keep_c_heap();
    let (cli, config_file) = match parse_command_line() {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("retagfs: error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    init_logging(cli.verbose);
    // SAFETY: no other thread exists yet, and SQLite has not been used.
    if !unsafe { retagfs_store::configure_sqlite() } {
        tracing::debug!("SQLite kept its default statement journal size");
    }
    let db = cli.command.db().map(Path::to_path_buf);
    let result = match cli.command {
        Command::Scan(a) => scan::run(a),
        Command::Mount(a) => mount::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Export(a) => export::run(a),
        Command::Query(a) => query::run(a),
        Command::Undo(a) => undo::run(a),
        Command::Tag(a) => edit::tag(a),
        Command::Art(a) => edit::art(a),
        Command::Import(a) => import::run(a),
        Command::Backup(a) => backup::run(a),
        Command::Vacuum(a) => vacuum::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Completions(a) => completions::run(a, &command_line()),
        Command::ManPages(a) => man_pages::run(a, &command_line()),
        Command::Config(a) => config_report::run(a, command_line(), config_file.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped early (`retagfs export | head`) is no error.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("retagfs: error: {e:#}");
            if let Some(hint) = db
                .as_deref()
                .and_then(|db| retagfs_store::explain_store_error(e.as_ref(), db))
            {
                eprintln!("retagfs: {hint}");
            }
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::from(EXIT_FATAL)
            }
        }
    }
}

/// The command line's definition, every option with its environment
/// twin.
fn command_line() -> clap::Command {
    environment_twins::with_environment_twins(Cli::command())
}

/// The command line, with the environment's and the configuration file's
/// settings beneath it (flag > variable > file > default), and the file
/// read, if any. clap's own errors (and `--help`) end the process as clap
/// does.
fn parse_command_line() -> Result<(Cli, Option<std::path::PathBuf>), UsageError> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut cmd = command_line();
    let mut tables = config_file::FileTables::default();
    let file = config_file::locate(&args);
    if let Some(path) = &file {
        (cmd, tables) = config_file::apply(cmd, path)?;
    }
    let matches = cmd.try_get_matches_from_mut(&args).unwrap_or_else(|e| e.exit());
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // A template given above the file (a flag, or its variable) lays out
    // one view, as it says, instead of the file's views.
    let template_above_file = matches.subcommand().is_some_and(|(_, m)| {
        m.try_contains_id("template").unwrap_or(false)
            && matches!(
                m.value_source("template"),
                Some(clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable)
            )
    });
    if let Some(view) = cli.command.view_args_mut() {
        if !template_above_file {
            view.views = tables.views;
        }
        view.playlists = tables.playlists;
    }
    Ok((cli, file))
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        let kind = c
            .downcast_ref::<std::io::Error>()
            .map(|io| io.kind())
            .or_else(|| {
                c.downcast_ref::<serde_json::Error>()
                    .and_then(|json| json.io_error_kind())
            });
        kind == Some(std::io::ErrorKind::BrokenPipe)
    })
}
