fn main() {
    let db = retagfs_store::Store::open(std::path::Path::new("/tmp/exp/c.db")).unwrap();
    for q in [
        "SELECT path, device, inode, mtime_ns, ctime_ns, skipped, entries FROM scanned_dirs",
        "SELECT path, entries FROM scanned_dirs",
    ] {
        let mut best = std::time::Duration::MAX;
        for _ in 0..50 {
            let t = std::time::Instant::now();
            let mut stmt = db.conn().prepare(q).unwrap();
            let mut rows = stmt.query([]).unwrap();
            let mut n = 0i64;
            while let Some(r) = rows.next().unwrap() {
                for i in 0..r.as_ref().column_count() {
                    match r.get_ref(i).unwrap() {
                        rusqlite::types::ValueRef::Integer(x) => n += x,
                        rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => {
                            n += b.len() as i64
                        }
                        _ => {}
                    }
                }
            }
            best = best.min(t.elapsed());
            std::hint::black_box(n);
        }
        let t = std::time::Instant::now();
        let d = db.scanned_dirs().unwrap();
        println!("{q}: {:?}  (scanned_dirs {:?} {})", best, t.elapsed(), d.len());
    }
}
