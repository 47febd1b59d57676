//! Every input under `fuzz/regressions/<target>/` (inputs that once made a
//! fuzz target fail, kept after the fix) runs through its target again, and
//! every committed fixture goes through probe -> serve -> probe.

use std::path::Path;

use retagfs_fuzzing::{probe_and_serve, TARGETS};

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn regression_inputs_pass_their_targets() {
    let mut ran = 0;
    for (name, target) in TARGETS {
        let dir = repo().join("fuzz/regressions").join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            eprintln!("{name}: {}", path.display());
            target(&data);
            ran += 1;
        }
    }
    eprintln!("{ran} regression inputs");
}

#[test]
fn fixtures_probe_serve_and_probe_back() {
    for dir in [
        "tests/fixtures",
        "tests/fixtures-odd",
        "tests/fixtures-passthrough",
    ] {
        for entry in std::fs::read_dir(repo().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            probe_and_serve(&std::fs::read(&path).unwrap());
        }
    }
}
