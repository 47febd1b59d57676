//! `retagfs completions SHELL`: the completion script of bash, zsh or fish,
//! made from the command line's definition (`make install` puts each where
//! its shell looks).

use clap::Command;

use crate::args::CompletionsArgs;

pub fn run(a: CompletionsArgs, cmd: &Command) -> anyhow::Result<()> {
    let mut cmd = cmd.clone();
    clap_complete::generate(a.shell, &mut cmd, "retagfs", &mut std::io::stdout().lock());
    Ok(())
}
