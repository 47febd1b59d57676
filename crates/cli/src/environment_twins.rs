//! Every option's environment twin: `--cache-dir` is also read from
//! `RETAGFS_CACHE_DIR`, for containers and service units. clap reads them,
//! so a flag beats its variable, which beats the configuration file (whose
//! settings are the options' defaults), which beats the built-in default.

use clap::{Arg, ArgAction, Command};

/// The variable an option is read from: `RETAGFS_` and its long name in
/// upper case, `-` as `_`.
pub fn variable_of(long: &str) -> String {
    format!("RETAGFS_{}", long.to_uppercase().replace('-', "_"))
}

/// `cmd` and every command under it with an environment twin for each
/// option that takes a value or is a switch (not `--help`, `--version` or
/// the counted `-v`, whose twin is `RETAGFS_LOG`).
pub fn with_environment_twins(cmd: Command) -> Command {
    let cmd = cmd.mut_args(|arg| match twin_of(&arg) {
        Some(variable) => arg.env(variable),
        None => arg,
    });
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
    names
        .iter()
        .fold(cmd, |cmd, name| cmd.mut_subcommand(name, with_environment_twins))
}

fn twin_of(arg: &Arg) -> Option<String> {
    let long = arg.get_long()?;
    (holds_a_setting(arg) && arg.get_env().is_none()).then(|| variable_of(long))
}

/// Whether an option holds a value or a switch that a variable, the
/// configuration file or `retagfs config` can speak of (not `--help`,
/// `--version` or the counted `-v`).
pub fn holds_a_setting(arg: &Arg) -> bool {
    matches!(
        arg.get_action(),
        ArgAction::Set | ArgAction::Append | ArgAction::SetTrue | ArgAction::SetFalse
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_is_the_long_option_in_capitals() {
        assert_eq!(variable_of("cache-dir"), "RETAGFS_CACHE_DIR");
        assert_eq!(variable_of("db"), "RETAGFS_DB");
    }
}
