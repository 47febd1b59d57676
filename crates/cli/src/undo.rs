//! `retagfs undo`: the last edit made through retagfs reverted, or the
//! journal of recent edits listed.

use retagfs_store::{self as store, LoggedEdit};

use crate::args::UndoArgs;

pub fn run(a: UndoArgs) -> anyhow::Result<()> {
    let mut db = crate::open_existing(&a.db)?;
    if a.list {
        return list(&db, a.json);
    }
    let tx = db.write()?;
    let mut dated = store::EditedTracks::new();
    let undone = store::undo_last_edit(&tx, |id| dated.note(&tx, id))?;
    dated.settle(&tx)?;
    tx.commit()?;
    eprintln!(
        "undid #{} ({} track(s)): {}; `retagfs undo` again to redo it",
        undone.id, undone.tracks, undone.command
    );
    Ok(())
}

fn list(db: &store::Store, json: bool) -> anyhow::Result<()> {
    let edits = db.logged_edits()?;
    let (changes, tracks) = db.unlogged_changes()?;
    if json {
        let edits: Vec<serde_json::Value> = edits.iter().map(edit_json).collect();
        let out = serde_json::json!({
            "edits": edits,
            "not_undoable": {"changes": changes, "tracks": tracks},
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    if edits.is_empty() {
        println!("no edit to undo");
    }
    for (i, e) in edits.iter().enumerate() {
        let next = if i == 0 {
            "  <- `retagfs undo` reverts this"
        } else {
            ""
        };
        println!(
            "#{}  {}  {} track(s)  {}{next}",
            e.id,
            when(e.at),
            e.tracks,
            e.command
        );
    }
    if changes > 0 {
        println!(
            "{changes} change(s) to {tracks} track(s) by other tools or re-scans since the oldest edit \
             listed: these cannot be undone"
        );
    }
    Ok(())
}

fn edit_json(e: &LoggedEdit) -> serde_json::Value {
    serde_json::json!({
        "id": e.id, "at": e.at, "command": e.command, "tracks": e.tracks, "undoes": e.undoes,
    })
}

/// A time as `2026-11-28T02:22:33Z`.
fn when(secs: i64) -> String {
    jiff::Timestamp::from_second(secs).map_or_else(|_| secs.to_string(), |t| t.to_string())
}
