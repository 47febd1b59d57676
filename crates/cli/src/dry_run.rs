//! `--dry-run` of tag and picture edits: what an edit changed in each
//! track's tags, printed before it is rolled back.

use retagfs_store::{self as store, Transaction};

/// Tracks whose changes are listed; the rest are counted.
const LISTED: usize = 20;

/// Prints, for each track whose tags differ from `before`, the keys that
/// changed (old values -> new values), then how many tracks changed.
pub fn print_tag_changes(
    tx: &Transaction<'_>,
    ids: &[i64],
    before: &[Vec<(String, String)>],
) -> anyhow::Result<()> {
    let mut changed = 0;
    for (&id, before) in ids.iter().zip(before) {
        let after = store::tags_of(tx, id)?;
        if &after == before {
            continue;
        }
        changed += 1;
        if changed > LISTED {
            continue;
        }
        let path: String = tx.query_row("SELECT backing_path FROM tracks WHERE id = ?1", [id], |r| {
            r.get(0)
        })?;
        println!("{path}");
        for key in changed_keys(before, &after) {
            println!(
                "  {key}: {:?} -> {:?}",
                values(before, &key),
                values(&after, &key)
            );
        }
    }
    if changed > LISTED {
        println!("... and {} more", changed - LISTED);
    }
    eprintln!(
        "dry run: would change the tags of {changed} of {} track(s); nothing was written",
        ids.len()
    );
    Ok(())
}

fn values<'a>(tags: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    tags.iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The keys whose values differ between two tag lists, in order.
fn changed_keys(before: &[(String, String)], after: &[(String, String)]) -> Vec<String> {
    let mut keys: Vec<String> = before.iter().chain(after).map(|(k, _)| k.clone()).collect();
    keys.sort();
    keys.dedup();
    keys.retain(|k| values(before, k) != values(after, k));
    keys
}
