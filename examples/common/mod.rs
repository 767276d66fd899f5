//! What the examples share: their `main`, their command lines (each example declares its
//! options in one table, [`options!`]), the books of their invariants (`ledger.rs`) and the
//! parts of their reports (`report.rs`); nothing of the timer.

// Each example uses only part of it.
#![allow(dead_code)]

mod ledger;
mod report;

use std::str::FromStr;

pub(crate) use ledger::*;
pub(crate) use report::*;

/// Declares an example's command line: its `Config`, from one table of a line per option
/// (its field, type, default, flag, the name of its value and its help; the type parses
/// from a string, and shows its default in the help with `Debug`), and `parse_args`, which
/// refuses a `Config` that breaks a rule of `check`, with its message. Every example also
/// has `--no-progress` (`progress`) and `-h, --help`. The doc comment of `Config` is the
/// help's text: the paragraph before the options and the one after them. Needs `common` in
/// scope.
macro_rules! options {
    ($(#[doc = $doc:literal])* $config:ident {
        $($field:ident: $ty:ty = $default:expr, $flag:literal $value:ident, $help:literal;)*
    }
    check |$c:ident| [$(($rule:expr, $message:literal),)*]) => {
        $(#[doc = $doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub(crate) struct $config {
            $(#[doc = $help] pub(crate) $field: $ty,)*
            /// Print a progress line on stderr while running.
            pub(crate) progress: bool,
        }

        impl Default for $config {
            fn default() -> Self {
                $config { $($field: $default,)* progress: true }
            }
        }

        impl common::Options for $config {
            const HELP: &'static [&'static str] = &[$($doc),*];

            fn options(&self) -> Vec<(&'static str, &'static str, String)> {
                vec![$((concat!($flag, " ", stringify!($value)), $help, format!("{:?}", self.$field))),*]
            }

            fn set(&mut self, flag: &str, value: &mut dyn FnMut() -> Option<String>)
                -> Result<(), String> {
                match flag {
                    "--no-progress" => self.progress = false,
                    $($flag => self.$field = common::value_of(flag, value())?,)*
                    _ => return Err(format!("unknown argument {flag:?}")),
                }
                Ok(())
            }
        }

        pub(crate) use common::Command;

        /// Parses the command line (without the program name).
        pub(crate) fn parse_args(args: impl IntoIterator<Item = String>)
            -> Result<Command<$config>, String> {
            common::parse(args, |$c: &$config| vec![$(($rule, $message)),*])
        }
    };
}
pub(crate) use options;

/// An example's `Config`, as [`options!`] declares it.
pub(crate) trait Options: Default {
    /// The help's text, a line each: the doc comment of `Config`.
    const HELP: &'static [&'static str];
    /// Each option's flag with the name of its value, its help, and its value here.
    fn options(&self) -> Vec<(&'static str, &'static str, String)>;
    /// Sets the option `flag`, calling `value` for its value; an error for an unknown flag.
    fn set(&mut self, flag: &str, value: &mut dyn FnMut() -> Option<String>) -> Result<(), String>;
}

/// Parses the value `raw` given to `flag`.
pub(crate) fn value_of<T: FromStr>(flag: &str, raw: Option<String>) -> Result<T, String> {
    let raw = raw.ok_or_else(|| format!("{flag} needs a value"))?;
    raw.parse()
        .map_err(|_| format!("{flag}: cannot parse {raw:?}"))
}

/// What a command line asked for: a run with its configuration, or the help.
#[derive(Debug, PartialEq)]
pub(crate) enum Command<C> {
    Run(C),
    Help,
}

/// Parses a command line (without the program name) of `--flag value` and `--flag=value`
/// arguments into a `C`, refused with the message of the first of its `rules` that does not
/// hold. `-h` or `--help` asks for the help.
pub(crate) fn parse<C: Options>(
    args: impl IntoIterator<Item = String>,
    rules: impl FnOnce(&C) -> Vec<(bool, &str)>,
) -> Result<Command<C>, String> {
    let mut config = C::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, mut inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg, None),
        };
        if flag == "-h" || flag == "--help" {
            return Ok(Command::Help);
        }
        config.set(&flag, &mut || inline.take().or_else(|| args.next()))?;
    }
    match rules(&config).into_iter().find(|(holds, _)| !holds) {
        Some((_, message)) => Err(message.to_owned()),
        None => Ok(Command::Run(config)),
    }
}

/// The help of the example `name`: `C`'s text around the table of its options and their
/// defaults.
pub(crate) fn usage<C: Options>(name: &str) -> String {
    let mut rows = C::default().options();
    rows.push(("--no-progress", "no progress line on stderr", String::new()));
    rows.push(("-h, --help", "print this help", String::new()));
    let flags = rows.iter().map(|row| row.0.len()).max().unwrap_or(0);
    let helps = rows.iter().map(|row| row.1.len()).max().unwrap_or(0);
    let text: Vec<&str> = C::HELP.iter().map(|line| line.trim_start()).collect();
    let (about, after) =
        text.split_at(text.iter().position(|l| l.is_empty()).unwrap_or(text.len()));
    let mut out = format!(
        "{}\n\nUsage: {name} [OPTIONS]\n\nOptions:\n",
        about.join("\n")
    );
    for (flag, help, default) in rows {
        let default = match default.as_str() {
            "" | "\"\"" => String::new(), // none, or an empty path: no default
            shown => format!("[{shown}]"),
        };
        let row = format!("  {flag:<flags$}  {help:<helps$}  {default}");
        out += row.trim_end();
        out += "\n";
    }
    out + &after.join("\n")
}

/// The `main` of every example: parses the command line with `parse`, prints the help for
/// `--help` (exit code 0) or after a bad command line (2), else runs the simulation with
/// `run`, prints the report it returns, and exits with 1 if its invariant fails.
pub(crate) fn example_main<C: Options>(
    name: &str,
    parse: impl FnOnce(Vec<String>) -> Result<Command<C>, String>,
    run: impl FnOnce(&C) -> Table,
) {
    let config = match parse(std::env::args().skip(1).collect()) {
        Ok(Command::Run(config)) => config,
        Ok(Command::Help) => {
            println!("{}", usage::<C>(name));
            return;
        }
        Err(message) => {
            eprintln!("{name}: {message}\n\n{}", usage::<C>(name));
            std::process::exit(2);
        }
    };
    let report = run(&config);
    let invariant_holds = report.holds();
    print!("{}", report.render());
    if !invariant_holds {
        std::process::exit(1);
    }
}
