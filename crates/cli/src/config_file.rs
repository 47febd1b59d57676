//! The configuration file: TOML keys named as the command line's long
//! options, which become those options' defaults, so that a flag always
//! overrides the file (docs/usage.md, "The configuration file").
//!
//! ```toml
//! db = "/home/me/music.db"          # every command with a --db
//! template = "$albumartist/$album/$title"
//! fallback = ["genre=Unknown"]      # an option given several times: a list
//! windows-names = true
//!
//! [mount]                           # `retagfs mount` alone
//! read-ahead = "off"
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command};
use toml_edit::{Document, Item, Value};

use crate::config_playlists::playlists_of;
use crate::config_views::{views_of, ViewDefinition};
use crate::UsageError;
use retagfs_core::view::playlists::PlaylistSpec;

/// The option that names the file, and its variable.
pub const CONFIG_OPTION: &str = "--config";
pub const CONFIG_VARIABLE: &str = "RETAGFS_CONFIG";

/// The file to read: the one `--config` or `RETAGFS_CONFIG` names, else
/// the user's own (`$XDG_CONFIG_HOME/retagfs/config.toml`) if it exists.
pub fn locate(args: &[OsString]) -> Option<PathBuf> {
    named_on_command_line(args)
        .or_else(|| {
            std::env::var_os(CONFIG_VARIABLE)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| Some(default_path()?).filter(|p| p.is_file()))
}

/// `$XDG_CONFIG_HOME/retagfs/config.toml`, or under `~/.config`.
pub fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("retagfs").join("config.toml"))
}

/// The value of `--config FILE` or `--config=FILE`, read before clap
/// parses anything, since the file changes how clap parses.
fn named_on_command_line(args: &[OsString]) -> Option<PathBuf> {
    let mut args = args.iter().skip(1).take_while(|a| *a != "--");
    while let Some(arg) = args.next() {
        if arg == CONFIG_OPTION {
            return args.next().map(PathBuf::from);
        }
        let prefix = format!("{CONFIG_OPTION}=");
        if let Some(value) = arg.to_str().and_then(|a| a.strip_prefix(&prefix)) {
            return Some(PathBuf::from(value));
        }
    }
    None
}

/// What the file's arrays of tables define.
#[derive(Default)]
pub struct FileTables {
    /// `[[view]]`
    pub views: Vec<ViewDefinition>,
    /// `[[playlist]]`
    pub playlists: Vec<PlaylistSpec>,
}

/// `cmd` with the file's settings as its options' defaults, and the views
/// and playlists its tables define. An error names the file, the line and
/// what is wrong with it.
pub fn apply(cmd: Command, path: &Path) -> Result<(Command, FileTables), UsageError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError(format!(
            "cannot read the configuration file {}: {e}",
            path.display()
        ))
    })?;
    let document = Document::parse(text.as_str())
        .map_err(|e| UsageError(format!("{}: {}", path.display(), e.to_string().trim_end())))?;
    let at = |span: Option<std::ops::Range<usize>>| Place {
        path,
        line: span.map_or(1, |s| text[..s.start].matches('\n').count() + 1),
    };
    let mut cmd = cmd;
    let mut tables = FileTables::default();
    let root = document.as_table();
    for (key, item) in root.iter() {
        let place = at(root.key(key).and_then(|k| k.span()));
        cmd = match item {
            Item::Value(value) => set_everywhere(cmd, key, value, &place)?,
            Item::Table(table) => {
                if cmd.find_subcommand(key).is_none() {
                    return Err(place.error(format!("[{key}] is not a command of retagfs")));
                }
                let mut sub = cmd.find_subcommand(key).cloned().expect("found above");
                for (option, item) in table.iter() {
                    let place = at(table.key(option).and_then(|k| k.span()));
                    let Item::Value(value) = item else {
                        return Err(place.error(format!("`{option}` is a table; a setting is a value")));
                    };
                    if !has_option(&sub, option) {
                        return Err(place.error(format!("`{option}` is not an option of `retagfs {key}`")));
                    }
                    sub = set_everywhere(sub, option, value, &place)?;
                }
                cmd.mut_subcommand(key, |_| sub)
            }
            Item::ArrayOfTables(views) if key == "view" => {
                tables.views = views_of(views, &|span, what| at(span).error(what))?;
                cmd
            }
            Item::ArrayOfTables(playlists) if key == "playlist" => {
                tables.playlists = playlists_of(playlists, &|span, what| at(span).error(what))?;
                cmd
            }
            Item::ArrayOfTables(_) | Item::None => {
                return Err(place.error(format!("[[{key}]] is not a setting of retagfs")))
            }
        };
    }
    Ok((cmd, tables))
}

/// Where a setting is written.
struct Place<'a> {
    path: &'a Path,
    line: usize,
}

impl Place<'_> {
    fn error(&self, what: String) -> UsageError {
        UsageError(format!("{}, line {}: {what}", self.path.display(), self.line))
    }
}

/// `cmd` with `--option` defaulting to `value` in it and in every command
/// under it that has that option; an error where none has it or the value
/// does not suit it.
fn set_everywhere(
    cmd: Command,
    option: &str,
    value: &Value,
    place: &Place<'_>,
) -> Result<Command, UsageError> {
    if option == CONFIG_OPTION.trim_start_matches('-') {
        return Err(place.error("the file cannot name another configuration file".into()));
    }
    let values = texts_of(value).ok_or_else(|| {
        place.error(format!(
            "`{option}` takes a string, a number, true or false, or a list of them"
        ))
    })?;
    let mut found = false;
    let cmd = set_in(cmd, option, &values, place, &mut found)?;
    if !found {
        return Err(place.error(format!(
            "`{option}` is not an option of any command (keys are long options without their \
             dashes: `template` for --template)"
        )));
    }
    Ok(cmd)
}

fn set_in(
    cmd: Command,
    option: &str,
    values: &[String],
    place: &Place<'_>,
    found: &mut bool,
) -> Result<Command, UsageError> {
    let mut cmd = cmd;
    let arg = cmd
        .get_arguments()
        .find(|a| a.get_long() == Some(option))
        .cloned();
    if let Some(arg) = arg {
        check_values(&arg, values, place)?;
        *found = true;
        let defaults: Vec<clap::builder::OsStr> = values.iter().map(|v| v.clone().into()).collect();
        // A required option the file gives is given.
        cmd = cmd.mut_arg(arg.get_id().clone(), |a| {
            a.default_values(defaults).required(false)
        });
    }
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
    for name in names {
        let sub = cmd.find_subcommand(&name).cloned().expect("listed above");
        let sub = set_in(sub, option, values, place, found)?;
        cmd = cmd.mut_subcommand(&name, |_| sub);
    }
    Ok(cmd)
}

fn has_option(cmd: &Command, option: &str) -> bool {
    cmd.get_arguments().any(|a| a.get_long() == Some(option))
        || cmd.get_subcommands().any(|s| has_option(s, option))
}

/// The values as the command line would give them, each checked by the
/// option's own parser.
fn check_values(arg: &Arg, values: &[String], place: &Place<'_>) -> Result<(), UsageError> {
    let option = arg.get_long().unwrap_or_default();
    let several = match arg.get_action() {
        ArgAction::Append => true,
        ArgAction::Set => false,
        ArgAction::SetTrue | ArgAction::SetFalse => {
            return match values {
                [v] if v == "true" || v == "false" => Ok(()),
                _ => Err(place.error(format!("`{option}` takes true or false"))),
            };
        }
        _ => return Err(place.error(format!("`{option}` is set on the command line only"))),
    };
    if values.len() != 1 && !several {
        return Err(place.error(format!("`{option}` takes one value, not a list")));
    }
    // The option alone, with its parser (and so its possible values).
    let alone = Arg::new("value")
        .long(option.to_string())
        .value_parser(arg.get_value_parser().clone())
        .action(ArgAction::Append)
        .allow_hyphen_values(true);
    let words = values.iter().flat_map(|v| [format!("--{option}"), v.clone()]);
    let checked = Command::new("retagfs")
        .no_binary_name(true)
        .arg(alone)
        .try_get_matches_from(words);
    if let Err(e) = checked {
        let said = e.to_string();
        let reason: Vec<&str> = said
            .lines()
            .map(|l| l.trim().trim_start_matches("error: "))
            .take_while(|l| !l.is_empty() && !l.starts_with("For more information"))
            .collect();
        return Err(place.error(format!("`{option}`: {}", reason.join(" "))));
    }
    Ok(())
}

/// A TOML value as command-line words: None for a table or a date.
fn texts_of(value: &Value) -> Option<Vec<String>> {
    let scalar = |v: &Value| match v {
        Value::String(s) => Some(s.value().clone()),
        Value::Integer(i) => Some(i.value().to_string()),
        Value::Float(f) => Some(f.value().to_string()),
        Value::Boolean(b) => Some(b.value().to_string()),
        Value::Datetime(_) | Value::Array(_) | Value::InlineTable(_) => None,
    };
    match value {
        Value::Array(items) => items.iter().map(scalar).collect(),
        other => scalar(other).map(|v| vec![v]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[arg(long, global = true)]
        config: Option<PathBuf>,
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Sub {
        Mount {
            #[arg(long)]
            template: Option<String>,
            #[arg(long = "fallback")]
            fallbacks: Vec<String>,
            #[arg(long)]
            windows_names: bool,
            #[arg(long, default_value_t = 8)]
            jobs: u32,
        },
        Export {
            #[arg(long)]
            template: Option<String>,
        },
    }

    fn parsed(file: &str, args: &[&str]) -> Result<Sub, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, file).unwrap();
        let (cmd, _) = apply(<Cli as clap::CommandFactory>::command(), &path).map_err(|e| e.0)?;
        let matches = cmd.try_get_matches_from(args).map_err(|e| e.to_string())?;
        let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches).map_err(|e| e.to_string())?;
        Ok(cli.command)
    }

    #[test]
    fn the_file_sets_defaults_and_flags_win() {
        let file =
            "template = \"$artist\"\nfallback = [\"genre=X\"]\n[mount]\nwindows-names = true\njobs = 3\n";
        let Sub::Mount {
            template,
            fallbacks,
            windows_names,
            jobs,
        } = parsed(file, &["r", "mount"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (template.as_deref(), fallbacks, windows_names, jobs),
            (Some("$artist"), vec!["genre=X".to_string()], true, 3)
        );
        let Sub::Mount { template, jobs, .. } =
            parsed(file, &["r", "mount", "--template", "$title", "--jobs", "5"]).unwrap()
        else {
            panic!()
        };
        assert_eq!((template.as_deref(), jobs), (Some("$title"), 5));
        let Sub::Export { template } = parsed(file, &["r", "export"]).unwrap() else {
            panic!()
        };
        assert_eq!(
            template.as_deref(),
            Some("$artist"),
            "a key at the top is every command's"
        );
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        for (file, says) in [
            (
                "\n\ntemplat = \"x\"\n",
                "line 3: `templat` is not an option of any command",
            ),
            (
                "[export]\njobs = 2\n",
                "line 2: `jobs` is not an option of `retagfs export`",
            ),
            (
                "[mount]\njobs = \"many\"\n",
                "line 2: `jobs`: invalid value 'many'",
            ),
            (
                "template = [\"a\", \"b\"]\n",
                "line 1: `template` takes one value, not a list",
            ),
            ("[nope]\n", "line 1: [nope] is not a command"),
            ("[[views]]\nname = \"x\"\n", "line 1: [[views]] is not a setting"),
            (
                "[[view]]\nname = \"x\"\ntemplat = \"$a\"\n",
                "line 3: a view has no `templat`",
            ),
            (
                "[[view]]\nname = \"a/b\"\ntemplate = \"$a\"\n",
                "line 2: view \"a/b\": a view's name is one folder",
            ),
            (
                "[[view]]\nname = \"x\"\ntemplate = \"$a\"\nquery = \"year:..\"\n",
                "line 4: view \"x\": invalid query",
            ),
            (
                "[[view]]\nname = \"x\"\n",
                "line 1: view \"x\" needs a `template`",
            ),
            (
                "[[view]]\nname = \"x\"\ntemplate = \"$a\"\n[[view]]\nname = \"x\"\ntemplate = \"$b\"\n",
                "line 5: two views are named",
            ),
            ("template = \"open\n", "TOML parse error at line 1"),
            (
                "config = \"other.toml\"\n",
                "line 1: the file cannot name another",
            ),
        ] {
            let e = parsed(file, &["r", "mount"]).unwrap_err();
            assert!(e.contains(says), "{file:?}: {e}");
        }
    }

    #[test]
    fn config_is_found_before_parsing() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            named_on_command_line(&args(&["r", "mount", "--config", "a.toml", "x"])),
            Some(PathBuf::from("a.toml"))
        );
        assert_eq!(
            named_on_command_line(&args(&["r", "--config=b.toml", "mount"])),
            Some(PathBuf::from("b.toml"))
        );
        assert_eq!(
            named_on_command_line(&args(&["r", "mount", "--", "--config", "c"])),
            None
        );
    }
}
