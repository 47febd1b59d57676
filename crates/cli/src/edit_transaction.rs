//! An edit transaction of `tag`, `art`, `import` or `undo`: the tracks it
//! changes are dated ([`store::EditedTracks`]) and their tags and pictures
//! before it kept in the edit journal ([`store::EditJournal`]), so that
//! `retagfs undo` can put them back.

use retagfs_store::{self as store, Transaction};

pub struct EditTransaction {
    dated: store::EditedTracks,
    journal: store::EditJournal,
}

impl EditTransaction {
    /// Starts the edit of this command in `tx`.
    pub fn begin(tx: &Transaction<'_>) -> anyhow::Result<EditTransaction> {
        Ok(EditTransaction {
            dated: store::EditedTracks::new(),
            journal: store::EditJournal::begin(tx, &command_line())?,
        })
    }

    /// Call before changing a track's tags or pictures.
    pub fn note(&mut self, tx: &Transaction<'_>, track_id: i64) -> anyhow::Result<()> {
        self.dated.note(tx, track_id)?;
        self.journal.note(tx, track_id)?;
        Ok(())
    }

    /// Call once every change is made, before committing.
    pub fn finish(self, tx: &Transaction<'_>) -> anyhow::Result<()> {
        self.dated.settle(tx)?;
        self.journal.finish(tx, None)?;
        Ok(())
    }
}

/// This command as it was typed, for the journal: arguments after the
/// program's name, quoted where a shell would need it.
fn command_line() -> String {
    // An argument that is no UTF-8 (a Latin-1 file name) is kept with
    // replacement characters: the journal's text is for people.
    let quoted = |arg: std::ffi::OsString| {
        let arg = arg.to_string_lossy().into_owned();
        if !arg.is_empty()
            && arg
                .chars()
                .all(|c| c.is_alphanumeric() || "-_=:./,@%+".contains(c))
        {
            arg
        } else {
            format!("'{}'", arg.replace('\'', r"'\''"))
        }
    };
    std::env::args_os()
        .skip(1)
        .map(quoted)
        .collect::<Vec<_>>()
        .join(" ")
}
