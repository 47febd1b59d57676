//! `retagfs man-pages DIR`: a manual page for retagfs and for each of its
//! commands (`retagfs.1`, `retagfs-mount.1`, ...), made from the command
//! line's definition; `make install` runs it.

use clap::Command;

use crate::args::ManPagesArgs;

pub fn run(a: ManPagesArgs, cmd: &Command) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.dir)?;
    let cmd = cmd.clone().name("retagfs").version(env!("CARGO_PKG_VERSION"));
    clap_mangen::generate_to(cmd, &a.dir)
        .map_err(|e| anyhow::anyhow!("cannot write the manual pages into {}: {e}", a.dir.display()))?;
    Ok(())
}
