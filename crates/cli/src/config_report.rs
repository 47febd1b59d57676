//! `retagfs config`: the settings each command runs with when no flag is
//! given, and where each comes from: an environment variable, the
//! configuration file, or the built-in default.

use std::io::Write;
use std::path::Path;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};
use serde::Serialize;

use crate::args::ConfigArgs;
use crate::environment_twins::holds_a_setting;

#[derive(Serialize)]
struct Report<'a> {
    /// The configuration file read, if any.
    file: Option<String>,
    settings: Vec<Setting<'a>>,
}

#[derive(Serialize)]
struct Setting<'a> {
    command: String,
    option: &'a str,
    values: Vec<String>,
    /// "environment", "file" or "default".
    source: &'static str,
    /// The option's environment variable.
    variable: Option<String>,
}

/// Prints the settings of every command of `pristine` (the command line's
/// definition, with its variables) once `file`'s settings are its
/// defaults; `pristine` tells the file's defaults from the built-in ones.
pub fn run(a: ConfigArgs, pristine: Command, file: Option<&Path>) -> anyhow::Result<()> {
    let configured = match file {
        Some(path) => crate::config_file::apply(pristine.clone(), path)?.0,
        None => pristine.clone(),
    };
    let (configured, pristine) = (&configured, &pristine);
    let mut settings = Vec::new();
    let settings_commands = configured
        .get_subcommands()
        .filter(|s| !["config", "completions", "man-pages"].contains(&s.get_name()));
    for sub in settings_commands {
        let Some(built_in) = pristine.find_subcommand(sub.get_name()) else {
            continue;
        };
        settings_of(configured, &[sub.get_name()], sub, built_in, &mut settings);
    }
    let report = Report {
        file: file.map(|f| f.display().to_string()),
        settings,
    };
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "configuration file: {}",
        report.file.as_deref().unwrap_or("none")
    )?;
    for s in &report.settings {
        let from = match (&s.variable, s.source) {
            (Some(variable), "environment") => format!("environment: {variable}"),
            (_, source) => source.to_string(),
        };
        writeln!(
            out,
            "{} --{} {}  ({from})",
            s.command,
            s.option,
            shell_words(&s.values)
        )?;
    }
    Ok(())
}

/// The settings of the command at `path` under `root` (and of those under
/// it), as a run of it with no flag would take them.
fn settings_of<'a>(
    root: &Command,
    path: &[&str],
    cmd: &'a Command,
    built_in: &Command,
    out: &mut Vec<Setting<'a>>,
) {
    let words = std::iter::once("retagfs").chain(path.iter().copied());
    let mut matches = root.clone().ignore_errors(true).try_get_matches_from(words).ok();
    for name in path {
        matches = matches.and_then(|m| m.subcommand_matches(name).cloned());
    }
    let name = path.join(" ");
    if let Some(matches) = matches {
        for arg in cmd.get_arguments() {
            let (Some(option), true) = (arg.get_long(), holds_a_setting(arg)) else {
                continue;
            };
            if let Some(setting) = setting_of(&matches, arg, built_in, &name, option) {
                out.push(setting);
            }
        }
    }
    for sub in cmd.get_subcommands() {
        if let Some(built_in) = built_in.find_subcommand(sub.get_name()) {
            let deeper: Vec<&str> = path.iter().copied().chain([sub.get_name()]).collect();
            settings_of(root, &deeper, sub, built_in, out);
        }
    }
}

fn setting_of<'a>(
    matches: &ArgMatches,
    arg: &'a clap::Arg,
    built_in: &Command,
    name: &str,
    option: &'a str,
) -> Option<Setting<'a>> {
    let id = arg.get_id().as_str();
    let values: Vec<String> = matches
        .get_raw(id)?
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let original = built_in.get_arguments().find(|a| a.get_id() == arg.get_id());
    let file_gave = original.is_none_or(|o| o.get_default_values() != arg.get_default_values());
    let source = match matches.value_source(id)? {
        ValueSource::EnvVariable => "environment",
        ValueSource::DefaultValue if file_gave => "file",
        ValueSource::DefaultValue => "default",
        _ => return None,
    };
    Some(Setting {
        command: name.to_string(),
        option,
        values,
        source,
        variable: arg.get_env().map(|v| v.to_string_lossy().into_owned()),
    })
}

/// Values as one would type them.
fn shell_words(values: &[String]) -> String {
    let word = |v: &String| {
        if !v.is_empty() && v.chars().all(|c| c.is_alphanumeric() || "-_./:=@+,".contains(c)) {
            v.clone()
        } else {
            format!("'{}'", v.replace('\'', r"'\''"))
        }
    };
    values.iter().map(word).collect::<Vec<_>>().join(" ")
}
