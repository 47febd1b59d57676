//! SQLite's process-wide settings.

/// Statement journals are kept in memory whatever their size
/// ([`configure_sqlite`]; SQLite's "-1").
const STATEMENT_JOURNAL_ALWAYS_IN_MEMORY: std::os::raw::c_int = -1;

/// Process-wide SQLite settings; false if SQLite refused them (it was in
/// use already), which costs only speed.
///
/// A write statement inside a transaction keeps a statement journal (the
/// pages it changed, to undo it alone if it fails); the change-log
/// triggers make every write statement need one. SQLite moves a journal
/// of more than 64 KiB to a temporary file, and every later statement of
/// that transaction then journals through the file: a first scan of a
/// library with long lyrics wrote gigabytes to `/var/tmp` that way, and
/// took longer (docs/benchmarks-log.md). Always
/// in memory, not up to a size: with a limit of 512 KiB or more, the
/// bundled SQLite (3.54) failed every statement whose journal grew past
/// it with "database or disk is full" (a migration rebuilding a large
/// table did; a test below writes such a statement). A journal holds the
/// pages one statement changes, which retagfs keeps few.
///
/// SQLite also counts the memory it allocates, under a process-wide lock
/// taken at every allocation and free; nothing here reads the count.
///
/// # Safety
///
/// No SQLite function may run on another thread meanwhile (SQLite's
/// configuration is not thread-safe): call it first thing in `main`.
pub unsafe fn configure_sqlite() -> bool {
    use rusqlite::ffi;
    // SAFETY: the caller guarantees that no other thread uses SQLite; each
    // option takes one int, as passed.
    let settings = unsafe {
        [
            ffi::sqlite3_config(
                ffi::SQLITE_CONFIG_STMTJRNL_SPILL,
                STATEMENT_JOURNAL_ALWAYS_IN_MEMORY,
            ),
            ffi::sqlite3_config(ffi::SQLITE_CONFIG_MEMSTATUS, 0 as std::os::raw::c_int),
        ]
    };
    settings.iter().all(|&rc| rc == ffi::SQLITE_OK)
}
