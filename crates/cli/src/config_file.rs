//! `game-server --config FILE`: a TOML file whose keys are the command's flags, by their long
//! names (`listen = "0.0.0.0:7350"`, `allow-auth-url = ["https://…"]`, `allow-insecure-http =
//! true`). A flag given on the command line wins over the file's key; a repeatable flag given
//! there replaces the file's list.
//!
//! The file is read with serde and the `toml` crate into a map of keys to values, each with its
//! place in the file; every key must name a flag of the command, and its value goes through the
//! flag's own parser, so that an error names the key and its line.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use clap::error::{ContextKind, ContextValue};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};
use toml::{Spanned, Value};

/// Why the config file cannot be used: a usage error (exit 2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigFileError {
    /// The file cannot be read.
    #[error("cannot read the config file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file is not TOML (the message gives the line and column).
    #[error("the config file {path} is not valid TOML: {message}")]
    Syntax { path: String, message: String },
    /// A key names no flag of the command.
    #[error("the config file {path}, line {line}: unknown key `{key}`; the keys are the flags' long names, such as `listen` or `auth-url`")]
    UnknownKey {
        path: String,
        line: usize,
        key: String,
    },
    /// A value the flag cannot take.
    #[error("the config file {path}, line {line}: key `{key}`: {message}")]
    BadValue {
        path: String,
        line: usize,
        key: String,
        message: String,
    },
}

/// The command line with the config file merged in, and where each flag the file set came
/// from, to tell a bad value with its key and line.
pub(crate) struct Merged {
    /// The merged command line, to parse again.
    pub(crate) argv: Vec<OsString>,
    /// The file, as shown in errors.
    path: String,
    /// Each key the file contributed, with its line.
    from_file: Vec<(String, usize)>,
}

/// The command line `argv` with the config file at `path` merged in: the file's keys that the
/// command line does not give become flags of `command` (the subcommand `matches` came from,
/// built, so that global flags are among its arguments).
///
/// # Errors
///
/// A [`ConfigFileError`] naming the file, and for a key, the key and its line.
pub(crate) fn merge(
    argv: Vec<OsString>,
    path: &Path,
    command: &Command,
    matches: &ArgMatches,
) -> Result<Merged, ConfigFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: shown.clone(),
        source,
    })?;
    let table: BTreeMap<Spanned<String>, Spanned<Value>> =
        toml::from_str(&text).map_err(|e| ConfigFileError::Syntax {
            path: shown.clone(),
            message: e.to_string(),
        })?;
    let mut merged = Merged {
        argv,
        path: shown,
        from_file: Vec::new(),
    };
    for (key, value) in table {
        let line = line_of(&text, key.span().start);
        let key = key.into_inner();
        let args = args_of(
            &merged.path,
            line,
            &key,
            value.into_inner(),
            command,
            matches,
        )?;
        if !args.is_empty() {
            merged.argv.extend(args.into_iter().map(OsString::from));
            merged.from_file.push((key, line));
        }
    }
    Ok(merged)
}

impl Merged {
    /// The error of parsing the merged command line, told with the file's key and line when
    /// the flag at fault came from the file; otherwise clap's error as it is.
    pub(crate) fn explain(&self, error: clap::Error) -> Result<clap::Error, ConfigFileError> {
        let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else {
            return Ok(error);
        };
        let long = arg
            .trim_start_matches("--")
            .split([' ', '='])
            .next()
            .unwrap_or_default();
        let Some((key, line)) = self.from_file.iter().find(|(key, _)| key == long) else {
            return Ok(error);
        };
        let why = std::error::Error::source(&error)
            .map_or_else(|| error.kind().to_string(), |source| source.to_string());
        let message = match error.get(ContextKind::InvalidValue) {
            Some(ContextValue::String(value)) => format!("invalid value {value:?}: {why}"),
            _ => why,
        };
        Err(ConfigFileError::BadValue {
            path: self.path.clone(),
            line: *line,
            key: key.clone(),
            message,
        })
    }
}

/// The arguments key `key` (at `line`) of the file stands for; none when the command line
/// gives the flag itself.
fn args_of(
    path: &str,
    line: usize,
    key: &str,
    value: Value,
    command: &Command,
    matches: &ArgMatches,
) -> Result<Vec<String>, ConfigFileError> {
    let bad = |message: &str| ConfigFileError::BadValue {
        path: path.to_owned(),
        line,
        key: key.to_owned(),
        message: message.to_owned(),
    };
    let arg = command
        .get_arguments()
        .find(|arg| arg.get_long() == Some(key) && !matches!(key, "config" | "help"))
        .ok_or_else(|| ConfigFileError::UnknownKey {
            path: path.to_owned(),
            line,
            key: key.to_owned(),
        })?;
    if matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine) {
        return Ok(Vec::new());
    }
    let flag = format!("--{key}");
    Ok(match (arg.get_action(), value) {
        (ArgAction::SetTrue, Value::Boolean(true)) => vec![flag],
        (ArgAction::SetTrue, Value::Boolean(false)) => Vec::new(),
        (ArgAction::SetTrue, _) => return Err(bad("expects true or false")),
        (ArgAction::Append, Value::Array(values)) => values
            .iter()
            .map(|v| scalar(v).map(|v| format!("{flag}={v}")))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("expects a list of strings or numbers"))?,
        (_, Value::Array(_)) => return Err(bad("takes one value, not a list")),
        (_, value) => {
            let value = scalar(&value).ok_or_else(|| bad("expects a string, number or boolean"))?;
            vec![format!("{flag}={value}")]
        }
    })
}

/// A TOML scalar as a command-line value: strings as they are, numbers and booleans as their
/// TOML text; `None` for tables, arrays and dates.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Integer(n) => Some(n.to_string()),
        Value::Float(x) => Some(x.to_string()),
        Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}
