//! Inline-code ("eval") flags, per interpreter family.
//!
//! When the policy allows interpreters but not eval, an interpreter may run a script
//! file but not code given on its command line (`bash -c`, `python -c`, `perl -e`,
//! `node --eval`, `deno eval`, `pwsh -EncodedCommand`, …) or on the request's stdin.
//!
//! Each family has a table of its real options: which short letters are inline code,
//! which take a value (attached or the next argument), which take only an attached value
//! (`perl -i.bak`, so `-ie` is not eval), which take digits (`perl -l0`), and which name
//! the program (`python -m mod`). Options are read until the first operand (the script),
//! `--`, or `-` (stdin), exactly as the interpreter reads them; clusters are read letter
//! by letter (`-ec`, `-xc`, `-Ic`, `-Sc`, `-pe`).
//!
//! Where a table is silent the scan fails closed: an unknown short letter is assumed to
//! take the rest of its word as a value unless that rest holds an eval letter (then it is
//! eval), and an unknown option at the end of its word is assumed to take the next word
//! as its value unless that word starts with `-`. So a flag is never skipped as somebody's
//! value; the price is that an odd command line may be refused.

use super::Word;

/// What an interpreter's arguments say about where its program text comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Scan {
    /// A script file or module names the program.
    Script,
    /// An inline-code flag, at `index` in the request's args.
    Eval { flag: String, index: usize },
    /// The program text is read from stdin (no script operand, `-`, `sh -s`, `python -i`).
    Stdin,
    /// An argument whose text is only known at run time (xargs input) could be a flag.
    Unknown { index: usize },
}

/// Interpreter families with their own flag grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    /// POSIX-style shells and csh: `-c`, clusters, `-o opt`, `+o opt`.
    Shell,
    /// fish: `-c`, `-C`/`--init-command`.
    Fish,
    /// CPython and PyPy: `-c`, `-m mod`.
    Python,
    /// perl: `-e`, `-E`.
    Perl,
    /// ruby: `-e` (`-E` is the encoding).
    Ruby,
    /// node: `-e`, `-p`, `--eval`, `--print`.
    Node,
    /// deno and bun: node's flags plus the `eval` subcommand.
    DenoBun,
    /// php: `-r`, `-B`, `-R`, `-E`.
    Php,
    /// lua and luajit: `-e`.
    Lua,
    /// Rscript: `-e`.
    Rscript,
    /// osascript: `-e`.
    Osascript,
    /// expect: `-c`.
    Expect,
    /// tclsh and wish: no inline-code flag, but stdin is a program.
    Tcl,
    /// nu, elvish, xonsh: `-c` (and nu's `-e`), looked for in every argument.
    OtherShell,
    /// PowerShell 7 (`pwsh`): `-Command`, `-EncodedCommand`, abbreviations, any case.
    Pwsh,
    /// Windows PowerShell: as pwsh, and a bare argument is a command.
    WindowsPowerShell,
    /// cmd.exe: `/c`, `/k`, `/r`.
    Cmd,
    /// busybox: the first argument is the applet that runs.
    BusyBox,
}

impl Family {
    /// The family of an [`INTERPRETERS`](super::INTERPRETERS) entry.
    pub(super) fn of(base: &str) -> Family {
        match base.to_ascii_lowercase().as_str() {
            "fish" => Family::Fish,
            "python" | "python2" | "python3" | "pypy" | "pypy3" => Family::Python,
            "perl" => Family::Perl,
            "ruby" => Family::Ruby,
            "node" | "nodejs" => Family::Node,
            "deno" | "bun" => Family::DenoBun,
            "php" => Family::Php,
            "lua" | "luajit" => Family::Lua,
            "rscript" => Family::Rscript,
            "osascript" => Family::Osascript,
            "expect" => Family::Expect,
            "tclsh" | "wish" => Family::Tcl,
            "nu" | "elvish" | "xonsh" => Family::OtherShell,
            "pwsh" => Family::Pwsh,
            "powershell" => Family::WindowsPowerShell,
            "cmd" => Family::Cmd,
            "busybox" => Family::BusyBox,
            _ => Family::Shell,
        }
    }
}

/// Where the program text of an interpreter of `family` comes from, given its `args`.
/// `trailing_unknown` says more arguments of unknown text follow (xargs).
pub(super) fn scan(family: Family, args: &[Word], trailing_unknown: bool) -> Scan {
    match family {
        Family::Pwsh => scan_pwsh(args, trailing_unknown, false),
        Family::WindowsPowerShell => scan_pwsh(args, trailing_unknown, true),
        Family::Cmd => scan_cmd(args, trailing_unknown),
        // Busybox is dispatched to its applet before any flag scan.
        Family::BusyBox => Scan::Script,
        _ => Scanner {
            table: table(family),
            args,
            trailing_unknown,
            pos: 0,
            stdin: false,
        }
        .run(),
    }
}

/// The option grammar of one family. Letters are short options; names are long options
/// without their leading `--`.
#[derive(Debug)]
struct Table {
    /// Short letters whose value is program text.
    eval: &'static str,
    /// Short letters taking a value: the rest of the word, else the next word.
    value: &'static str,
    /// Short letters whose value is the whole rest of the word, possibly empty
    /// (`perl -i.bak`, so `-ie` means the backup suffix `e`, not eval).
    attached: &'static str,
    /// Short letters whose value is a few attached characters, after which more switches
    /// may follow (`perl -CSD`, `-Dtls`, `-d:Mod`, `-V:name`): the rest of the word is
    /// scanned for eval letters, failing closed.
    attached_checked: &'static str,
    /// Short letters followed by optional digits (`-l0`, `-0777`, `-W2`) or `:name`.
    digits: &'static str,
    /// Short letters that take the next word while the rest of the cluster is still read
    /// as flags (`bash -o posix`, `bash -oc posix cmd`).
    next_word: &'static str,
    /// Short letters whose value names the program (`python -m mod`, `php -f file`).
    script: &'static str,
    /// Short letters meaning the program is read from stdin (`sh -s`, `python -i`).
    stdin: &'static str,
    /// Short letters known to take no value.
    flags: &'static str,
    /// Unknown short letters take no value (shells never attach values to letters).
    unknown_short_is_flag: bool,
    /// Long options whose value is program text.
    eval_long: &'static [&'static str],
    /// Long options naming the program.
    script_long: &'static [&'static str],
    /// Long options taking the next word as value (unless written `--name=value`).
    value_long: &'static [&'static str],
    /// Long options known to take no value.
    flag_long: &'static [&'static str],
    /// Prefixes of long options that take no value (checked after `value_long`).
    flag_long_prefixes: &'static [&'static str],
    /// Unknown long options take no value (where every option with a value needs `=`).
    unknown_long_is_flag: bool,
    /// Single-dash words taking the next word as value (`tclsh -encoding utf-8`).
    value_words: &'static [&'static str],
    /// Operand words that are inline code (`deno eval`).
    eval_words: &'static [&'static str],
    /// Operand words after which option scanning continues (`deno repl --eval`).
    continue_words: &'static [&'static str],
    /// Options may follow operands, so every argument is scanned.
    scan_all: bool,
    /// `+o`-style options exist (shells).
    plus_options: bool,
}

const EMPTY: Table = Table {
    eval: "",
    value: "",
    attached: "",
    attached_checked: "",
    digits: "",
    next_word: "",
    script: "",
    stdin: "",
    flags: "",
    unknown_short_is_flag: false,
    eval_long: &[],
    script_long: &[],
    value_long: &[],
    flag_long: &[],
    flag_long_prefixes: &[],
    unknown_long_is_flag: false,
    value_words: &[],
    eval_words: &[],
    continue_words: &[],
    scan_all: false,
    plus_options: false,
};

/// bash, sh, dash, zsh, ksh, mksh, csh, tcsh, …: `-c` anywhere in a cluster is eval;
/// `-o`/`-O` take the next word; `-s`/`-i` read commands from stdin.
const SHELL: Table = Table {
    eval: "c",
    next_word: "oO",
    stdin: "si",
    unknown_short_is_flag: true,
    eval_long: &["command"],
    value_long: &["rcfile", "init-file"],
    unknown_long_is_flag: true,
    plus_options: true,
    ..EMPTY
};

/// fish 3: `getopt_long("+hPilNnvc:C:p:d:f:D:o:")`.
const FISH: Table = Table {
    eval: "cC",
    value: "pdfDo",
    stdin: "i",
    flags: "hPlNnv",
    eval_long: &["command", "init-command"],
    value_long: &[
        "profile",
        "profile-startup",
        "debug",
        "debug-output",
        "features",
        "debug-stack-frames",
    ],
    flag_long: &[
        "help",
        "private",
        "interactive",
        "login",
        "no-config",
        "no-execute",
        "version",
        "print-rusage-self",
        "print-debug-categories",
    ],
    ..EMPTY
};

/// CPython 2/3 and PyPy.
const PYTHON: Table = Table {
    eval: "c",
    value: "WXQ",
    script: "m",
    stdin: "i",
    flags: "bBdEhIOPqRsSuvVx3t?",
    value_long: &["check-hash-based-pycs"],
    flag_long: &["help", "version", "help-env", "help-xoptions", "help-all"],
    ..EMPTY
};

/// perl 5 (`perlrun`): `-i`, `-x`, `-F` swallow the rest of their word; `-C`, `-D`,
/// `-d`, `-V` read a short attached value and then more switches may follow.
const PERL: Table = Table {
    eval: "eE",
    value: "IMm",
    attached: "ixF",
    attached_checked: "CDdV",
    digits: "0l",
    flags: "acnpsStTuUvwWXh",
    ..EMPTY
};

/// ruby: `-E` is the encoding, not eval; `-W` takes a level or `:category`.
const RUBY: Table = Table {
    eval: "e",
    value: "CIrE",
    attached: "iFxK",
    digits: "0W",
    flags: "acdhlnpsSvwyU",
    value_long: &[
        "encoding",
        "external-encoding",
        "internal-encoding",
        "enable",
        "disable",
        "dump",
        "backtrace-limit",
        "crash-report",
        "parser",
    ],
    flag_long: &[
        "copyright",
        "version",
        "verbose",
        "help",
        "jit",
        "yjit",
        "rjit",
        "debug",
        "yydebug",
    ],
    flag_long_prefixes: &["disable-", "enable-", "jit-", "yjit-", "rjit-"],
    ..EMPTY
};

/// node: `-e`/`-p`/`--eval`/`--print` (and the `-pe` cluster); `-c` is `--check`.
const NODE: Table = Table {
    eval: "ep",
    value: "rC",
    stdin: "i",
    flags: "chv",
    eval_long: &["eval", "print"],
    value_long: NODE_VALUE_LONG,
    flag_long: &[
        "check",
        "interactive",
        "version",
        "help",
        "test",
        "watch",
        "v8-options",
    ],
    flag_long_prefixes: NODE_FLAG_PREFIXES,
    ..EMPTY
};

const NODE_VALUE_LONG: &[&str] = &[
    "require",
    "import",
    "loader",
    "experimental-loader",
    "conditions",
    "input-type",
    "env-file",
    "env-file-if-exists",
    "title",
    "test-reporter",
    "test-reporter-destination",
    "test-name-pattern",
    "test-skip-pattern",
    "watch-path",
    "diagnostic-dir",
    "cpu-prof-dir",
    "cpu-prof-name",
    "heap-prof-dir",
    "heap-prof-name",
    "redirect-warnings",
    "report-dir",
    "report-directory",
    "report-filename",
    "disable-warning",
    "dns-result-order",
    "icu-data-dir",
    "openssl-config",
    "unhandled-rejections",
    "inspect-port",
    "debug-port",
    "secure-heap",
    "secure-heap-min",
    "heapsnapshot-signal",
    "run",
    "preload",
    "config",
];

const NODE_FLAG_PREFIXES: &[&str] = &[
    "no-",
    "trace-",
    "inspect",
    "experimental-",
    "harmony",
    "expose",
    "enable-",
    "frozen-",
    "pending-",
    "throw-",
    "abort-",
    "preserve-symlinks",
    "cpu-prof",
    "heap-prof",
    "prof",
    "zero-fill",
    "force-",
    "use-",
    "insecure-",
    "jitless",
    "allow-",
    "permission",
    "openssl-",
    "report-",
    "watch",
    "test",
];

/// deno and bun: `-e`/`-p`/`--eval`/`--print` (bun), the `eval` subcommand (deno),
/// `repl --eval`, and `run -` (stdin). Their other short options take no value or are
/// written attached, and every long option with a value is listed or written with `=`.
const DENO_BUN: Table = Table {
    eval: "ep",
    stdin: "i",
    unknown_short_is_flag: true,
    eval_long: &["eval", "print"],
    value_long: &[
        "config",
        "import-map",
        "lock",
        "cert",
        "location",
        "seed",
        "log-level",
        "env-file",
        "preload",
        "require",
        "import",
        "cwd",
        "tsconfig-override",
    ],
    unknown_long_is_flag: true,
    eval_words: &["eval"],
    continue_words: &["repl", "run"],
    ..EMPTY
};

/// php CLI: `-r`/`--run`, and the per-line `-B`/`-R`/`-E` code options.
const PHP: Table = Table {
    eval: "rBRE",
    value: "cdztS",
    script: "fF",
    stdin: "a",
    flags: "hivmnlsqHeCw",
    eval_long: &["run", "process-begin", "process-code", "process-end"],
    script_long: &["file", "process-file"],
    value_long: &[
        "php-ini",
        "define",
        "zend-extension",
        "docroot",
        "server",
        "rf",
        "rc",
        "re",
        "rz",
        "ri",
    ],
    flag_long: &[
        "interactive",
        "no-php-ini",
        "profile-info",
        "info",
        "modules",
        "syntax-check",
        "no-header",
        "hide-args",
        "help",
        "version",
        "strip",
        "ini",
        "syntax-highlight",
        "syntax-highlighting",
        "no-chdir",
    ],
    ..EMPTY
};

/// lua 5.x and luajit.
const LUA: Table = Table {
    eval: "e",
    value: "lj",
    attached: "O",
    stdin: "i",
    flags: "vEWb",
    ..EMPTY
};

/// Rscript: every long option with a value is written `--name=value`.
const RSCRIPT: Table = Table {
    eval: "e",
    unknown_long_is_flag: true,
    ..EMPTY
};

/// osascript.
const OSASCRIPT: Table = Table {
    eval: "e",
    value: "ls",
    stdin: "i",
    ..EMPTY
};

/// expect.
const EXPECT: Table = Table {
    eval: "c",
    script: "fb",
    value: "D",
    stdin: "i",
    flags: "dnNvh",
    ..EMPTY
};

/// tclsh and wish: single-dash words, no inline-code option.
const TCL: Table = Table {
    unknown_short_is_flag: true,
    unknown_long_is_flag: true,
    value_words: &[
        "-encoding",
        "-display",
        "-geometry",
        "-name",
        "-use",
        "-visual",
        "-colormap",
    ],
    ..EMPTY
};

/// nu (`-c`/`--commands`, `-e`/`--execute`), elvish and xonsh (`-c`): argument parsers
/// that accept options after operands, so every argument is scanned.
const OTHER_SHELL: Table = Table {
    eval: "ce",
    stdin: "i",
    eval_long: &["commands", "execute", "command"],
    unknown_short_is_flag: true,
    unknown_long_is_flag: true,
    scan_all: true,
    ..EMPTY
};

fn table(family: Family) -> &'static Table {
    match family {
        Family::Fish => &FISH,
        Family::Python => &PYTHON,
        Family::Perl => &PERL,
        Family::Ruby => &RUBY,
        Family::Node => &NODE,
        Family::DenoBun => &DENO_BUN,
        Family::Php => &PHP,
        Family::Lua => &LUA,
        Family::Rscript => &RSCRIPT,
        Family::Osascript => &OSASCRIPT,
        Family::Expect => &EXPECT,
        Family::Tcl => &TCL,
        Family::OtherShell => &OTHER_SHELL,
        _ => &SHELL,
    }
}

/// What one argument told the scanner.
enum Next {
    /// Keep reading options.
    Continue,
    /// The scan has its answer.
    Done(Scan),
}

struct Scanner<'a> {
    table: &'static Table,
    args: &'a [Word],
    trailing_unknown: bool,
    pos: usize,
    stdin: bool,
}

impl Scanner<'_> {
    fn run(mut self) -> Scan {
        let mut script = false;
        while let Some(word) = self.args.get(self.pos) {
            self.pos += 1;
            let Some(text) = word.text() else {
                return Scan::Unknown { index: word.index };
            };
            match self.word(text, word.index) {
                Next::Continue => {}
                Next::Done(Scan::Script) if self.table.scan_all => script = true,
                Next::Done(scan) => return self.finish(scan),
            }
        }
        if self.trailing_unknown {
            let index = self.args.last().map_or(0, |w| w.index);
            return Scan::Unknown { index };
        }
        self.finish(if script { Scan::Script } else { Scan::Stdin })
    }

    /// A stdin flag (`sh -s`, `python -i`) turns a script result into stdin.
    fn finish(&self, scan: Scan) -> Scan {
        match scan {
            Scan::Script if self.stdin => Scan::Stdin,
            other => other,
        }
    }

    fn word(&mut self, text: &str, index: usize) -> Next {
        let t = self.table;
        if text == "-" {
            return Next::Done(Scan::Stdin);
        }
        if text == "--" {
            return self.after_dashdash();
        }
        if t.value_words.contains(&text) {
            return self.skip_value(false);
        }
        if let Some(body) = text.strip_prefix("--") {
            return self.long(body, index);
        }
        let plus_option = t.plus_options && text.starts_with('+') && text.len() > 1;
        if text.starts_with('-') || plus_option {
            let letters = text.get(1..).unwrap_or_default();
            return self.letters(text, letters, index);
        }
        self.operand(text, index)
    }

    fn after_dashdash(&mut self) -> Next {
        match self.args.get(self.pos) {
            None if self.trailing_unknown => Next::Done(Scan::Unknown {
                index: self.args.last().map_or(0, |w| w.index),
            }),
            None => Next::Done(Scan::Stdin),
            Some(w) if w.text().is_none() => Next::Done(Scan::Unknown { index: w.index }),
            Some(_) => Next::Done(Scan::Script),
        }
    }

    fn operand(&mut self, text: &str, index: usize) -> Next {
        if self.table.eval_words.contains(&text) {
            return Next::Done(Scan::Eval {
                flag: text.to_owned(),
                index,
            });
        }
        if self.table.continue_words.contains(&text) {
            return Next::Continue;
        }
        Next::Done(Scan::Script)
    }

    fn long(&mut self, body: &str, index: usize) -> Next {
        let t = self.table;
        let (name, has_value) = match body.split_once('=') {
            Some((n, _)) => (n, true),
            None => (body, false),
        };
        if t.eval_long.contains(&name) {
            return Next::Done(Scan::Eval {
                flag: format!("--{name}"),
                index,
            });
        }
        if t.script_long.contains(&name) {
            return Next::Done(Scan::Script);
        }
        if has_value {
            return Next::Continue;
        }
        if t.value_long.contains(&name) {
            return self.skip_value(false);
        }
        let known_flag =
            t.flag_long.contains(&name) || t.flag_long_prefixes.iter().any(|p| name.starts_with(p));
        if known_flag || t.unknown_long_is_flag {
            return Next::Continue;
        }
        self.skip_value(true)
    }

    /// Reads the letters of a short-option cluster (`-ec`, `-Ic`, `-pe`, `+o`) one by
    /// one; `text` is the whole argument, for messages.
    fn letters(&mut self, text: &str, letters: &str, index: usize) -> Next {
        let t = self.table;
        for (at, letter) in letters.char_indices() {
            let rest = letters.get(at + letter.len_utf8()..).unwrap_or_default();
            if t.eval.contains(letter) {
                return Next::Done(Scan::Eval {
                    flag: text.to_owned(),
                    index,
                });
            }
            if t.script.contains(letter) {
                return self.script_value(rest);
            }
            if t.value.contains(letter) {
                return if rest.is_empty() {
                    self.skip_value(false)
                } else {
                    Next::Continue
                };
            }
            if t.attached.contains(letter) {
                return Next::Continue;
            }
            if t.attached_checked.contains(letter) {
                return self.eval_in_rest(text, rest, index);
            }
            if t.digits.contains(letter) {
                return self.digits_then(text, letter, rest, index);
            }
            if t.next_word.contains(letter) {
                self.pos += 1;
            } else if t.stdin.contains(letter) {
                self.stdin = true;
            } else if !t.flags.contains(letter) && !t.unknown_short_is_flag {
                return self.unknown_letter(text, rest, index);
            }
        }
        Next::Continue
    }

    /// `-m mod`, `-f file`: the program is named; the scan ends.
    fn script_value(&mut self, rest: &str) -> Next {
        if rest.is_empty() {
            match self.args.get(self.pos) {
                Some(w) if w.text().is_none() => {
                    return Next::Done(Scan::Unknown { index: w.index });
                }
                Some(w) if w.text() == Some("-") => return Next::Done(Scan::Stdin),
                _ => {}
            }
        }
        Next::Done(Scan::Script)
    }

    /// A short attached value followed by more switches we do not parse: any eval
    /// letter in the rest counts.
    fn eval_in_rest(&self, text: &str, rest: &str, index: usize) -> Next {
        if rest.chars().any(|c| self.table.eval.contains(c)) {
            return Next::Done(Scan::Eval {
                flag: text.to_owned(),
                index,
            });
        }
        Next::Continue
    }

    /// `-l0`, `-0777`, `-0x1F`, `-W2`, `-W:deprecated`: skip the value, then keep reading
    /// the cluster's remaining letters as switches (`-lne` is `-l -n -e`).
    fn digits_then(&mut self, text: &str, letter: char, rest: &str, index: usize) -> Next {
        if rest.starts_with(':') {
            return Next::Continue;
        }
        let rest = match rest.strip_prefix(['x', 'X']) {
            Some(hex) if letter == '0' => hex.trim_start_matches(|c: char| c.is_ascii_hexdigit()),
            _ => rest.trim_start_matches(|c: char| c.is_ascii_digit()),
        };
        self.letters(text, rest, index)
    }

    /// A letter the table does not know: assume it takes the rest of the word as its
    /// value, unless that rest holds an eval letter; at the end of the word, assume it
    /// takes the next word unless that word starts with `-`.
    fn unknown_letter(&mut self, text: &str, rest: &str, index: usize) -> Next {
        if rest.chars().any(|c| self.table.eval.contains(c)) {
            return Next::Done(Scan::Eval {
                flag: text.to_owned(),
                index,
            });
        }
        if rest.is_empty() {
            return self.skip_value(true);
        }
        Next::Continue
    }

    /// Skips the next word as an option's value. With `guess`, the option is one we do
    /// not know: a word starting with `-` is left to be read as an option, and an eval
    /// word (`deno --quiet eval`) is still eval.
    fn skip_value(&mut self, guess: bool) -> Next {
        let Some(word) = self.args.get(self.pos) else {
            return Next::Continue;
        };
        let Some(text) = word.text() else {
            return Next::Done(Scan::Unknown { index: word.index });
        };
        if guess && text.starts_with('-') {
            return Next::Continue;
        }
        if guess && self.table.eval_words.contains(&text) {
            return Next::Done(Scan::Eval {
                flag: text.to_owned(),
                index: word.index,
            });
        }
        self.pos += 1;
        Next::Continue
    }
}

/// PowerShell parameters: `-`, `--` or (Windows PowerShell) `/` prefix, any case, any
/// unambiguous abbreviation. Any abbreviation of an inline-code parameter counts as eval,
/// even an ambiguous one (`-co`), failing closed.
fn scan_pwsh(args: &[Word], trailing_unknown: bool, windows: bool) -> Scan {
    const EVAL: &[&str] = &["command", "encodedcommand", "commandwithargs"];
    const EVAL_ALIASES: &[&str] = &["c", "e", "ec", "enc", "cwa"];
    const VALUE: &[&str] = &[
        "executionpolicy",
        "inputformat",
        "outputformat",
        "configurationname",
        "configurationfile",
        "custompipename",
        "settingsfile",
        "workingdirectory",
        "windowstyle",
        "version",
        "encodedarguments",
    ];
    const VALUE_ALIASES: &[&str] = &[
        "ex", "ep", "inp", "if", "o", "of", "config", "settings", "wd", "wo", "w", "v", "ea",
    ];
    let mut pos = 0;
    while let Some(word) = args.get(pos) {
        pos += 1;
        let Some(text) = word.text() else {
            return Scan::Unknown { index: word.index };
        };
        let Some(param) = pwsh_param(text, windows) else {
            return if windows {
                Scan::Eval {
                    flag: text.to_owned(),
                    index: word.index,
                }
            } else {
                Scan::Script
            };
        };
        let abbreviates = |full: &&str| full.starts_with(param.as_str());
        if EVAL_ALIASES.contains(&param.as_str())
            || (param.len() >= 2 && EVAL.iter().any(abbreviates))
        {
            return Scan::Eval {
                flag: text.to_owned(),
                index: word.index,
            };
        }
        if param.is_empty() || "file".starts_with(param.as_str()) {
            return match args.get(pos).map(Word::text) {
                Some(None) => Scan::Unknown {
                    index: args[pos].index,
                },
                Some(Some("-")) | None => Scan::Stdin,
                Some(Some(_)) => Scan::Script,
            };
        }
        if VALUE_ALIASES.contains(&param.as_str())
            || (param.len() >= 3 && VALUE.iter().any(abbreviates))
        {
            if args.get(pos).is_some_and(|w| w.text().is_none()) {
                return Scan::Unknown {
                    index: args[pos].index,
                };
            }
            pos += 1;
        }
    }
    if trailing_unknown {
        return Scan::Unknown {
            index: args.last().map_or(0, |w| w.index),
        };
    }
    Scan::Stdin
}

/// The lowercased parameter name of a PowerShell argument (`-NoProfile:$true` →
/// `noprofile`), or `None` for a positional argument.
fn pwsh_param(text: &str, windows: bool) -> Option<String> {
    let body = text
        .strip_prefix("--")
        .or_else(|| text.strip_prefix('-'))
        .or_else(|| {
            if windows {
                text.strip_prefix('/')
            } else {
                None
            }
        })?;
    let name = body.split(':').next().unwrap_or_default();
    Some(name.to_ascii_lowercase())
}

/// cmd.exe: a switch word containing `/c`, `/k` or `/r` (any case, possibly after other
/// switches such as `/s/c`) runs the rest of the line as a command.
fn scan_cmd(args: &[Word], trailing_unknown: bool) -> Scan {
    for word in args {
        let Some(text) = word.text() else {
            return Scan::Unknown { index: word.index };
        };
        let lower = text.to_ascii_lowercase();
        if !lower.starts_with('/') {
            return Scan::Stdin;
        }
        if lower.split('/').any(|s| s.starts_with(['c', 'k', 'r'])) {
            return Scan::Eval {
                flag: text.to_owned(),
                index: word.index,
            };
        }
    }
    if trailing_unknown {
        return Scan::Unknown {
            index: args.last().map_or(0, |w| w.index),
        };
    }
    Scan::Stdin
}

#[cfg(test)]
#[path = "eval_tests.rs"]
mod tests;
