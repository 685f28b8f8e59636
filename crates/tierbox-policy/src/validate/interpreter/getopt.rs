//! A GNU `getopt_long` work-alike, just enough to find where a wrapper's own options end
//! and the program it runs begins.
//!
//! Wrappers (`env`, `timeout`, `xargs`, …) parse their options with `getopt_long`, most
//! with a leading `+` in the option string: parsing stops at the first operand, which is
//! the program. Getting this exactly right is the security property: if we mistook an
//! option's value for the program (or the reverse) we would check one program while the
//! wrapper runs another. So the parser is strict: an option it does not know, an
//! ambiguous long-option prefix, a missing value, or an argument whose text is only known
//! at run time (xargs input) is an error, and the caller turns every error into
//! `exec.wrapper_unresolvable`.
//!
//! Supported: short clusters (`-iv`), attached and separate values (`-uNAME`, `-u NAME`),
//! optional values that must be attached (`-i[R]`, `--replace[=R]`), long options with
//! `=value` or a separate value, unambiguous long prefixes (`--ign` for
//! `--ignore-environment`) unless the spec asks for exact names, `--`, and a lone `-`
//! as an operand. The caller decides whether to stop at the first operand (`+` mode) or
//! keep going (permuting wrappers such as `su`).

use super::Word;

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arg {
    /// No value (`-i`).
    No,
    /// A value, attached or in the next argument (`-uNAME`, `-u NAME`, `--unset=NAME`).
    Required,
    /// A value only when attached (`-i{}`, `--replace={}`); never the next argument.
    Optional,
}

/// An option's identity, whichever way it was spelt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    /// A short option, or a long option that is an alias of one.
    Short(char),
    /// A long option with no short alias.
    Long(&'static str),
}

/// The options a wrapper understands.
#[derive(Debug)]
pub(super) struct Spec {
    /// Short options.
    pub(super) short: &'static [(char, Arg)],
    /// Long options: name, the short option it aliases (if any), and its argument.
    pub(super) long: &'static [(&'static str, Option<char>, Arg)],
    /// Long options must be spelt in full (the table is not the program's complete list,
    /// so a prefix could resolve differently in the real program).
    pub(super) exact_long: bool,
}

/// One parsed option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Opt {
    /// Which option.
    pub(super) key: Key,
    /// Its value, if it has one.
    pub(super) value: Option<Word>,
}

impl Opt {
    /// The value's text, when there is a value and its text is known.
    pub(super) fn value_text(&self) -> Option<&str> {
        self.value.as_ref().and_then(Word::text)
    }
}

/// What the parser found next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// An option.
    Opt(Opt),
    /// An operand (a non-option, `-`, or anything after `--`).
    Operand(Word),
    /// No arguments are left.
    End,
}

/// The remaining letters of a short-option cluster.
#[derive(Debug, Clone)]
struct Cluster {
    text: String,
    at: usize,
    index: usize,
}

/// The parser state over one wrapper's arguments.
#[derive(Debug)]
pub(super) struct Getopt<'s> {
    spec: &'s Spec,
    words: Vec<Word>,
    pos: usize,
    cluster: Option<Cluster>,
    after_dashdash: bool,
    trailing_unknown: bool,
    unknown_from: &'static str,
}

impl<'s> Getopt<'s> {
    /// A parser over `words`. `trailing_unknown` says more arguments, of unknown text,
    /// follow at run time (from `unknown_from`, e.g. xargs): reaching the end is then
    /// an error, because those arguments could be options or the program.
    pub(super) fn new(
        spec: &'s Spec,
        words: Vec<Word>,
        trailing_unknown: bool,
        unknown_from: &'static str,
    ) -> Self {
        Self {
            spec,
            words,
            pos: 0,
            cluster: None,
            after_dashdash: false,
            trailing_unknown,
            unknown_from,
        }
    }

    /// The next option or operand.
    pub(super) fn next(&mut self) -> Result<Step, GetoptError> {
        if let Some(cluster) = self.cluster.take() {
            return self.short(cluster);
        }
        let Some(word) = self.words.get(self.pos).cloned() else {
            return self.end();
        };
        let Some(text) = word.text().map(str::to_owned) else {
            return Err(unknown_word(&word, self.unknown_from));
        };
        self.pos += 1;
        if self.after_dashdash || text == "-" || !text.starts_with('-') {
            return Ok(Step::Operand(word));
        }
        if text == "--" {
            self.after_dashdash = true;
            return self.next();
        }
        if let Some(body) = text.strip_prefix("--") {
            return self.long(body, word.index);
        }
        self.short(Cluster {
            text,
            at: 1,
            index: word.index,
        })
    }

    /// The arguments not yet consumed (after the operand `next` just returned).
    pub(super) fn rest(&self) -> Vec<Word> {
        self.words
            .get(self.pos..)
            .map(<[Word]>::to_vec)
            .unwrap_or_default()
    }

    /// Whether `--` has been seen.
    pub(super) fn after_dashdash(&self) -> bool {
        self.after_dashdash
    }

    /// The next argument's text when the parser stands at the start of an argument that
    /// could be an option (for wrappers with extra syntax, such as `nice -5`).
    pub(super) fn peek_option_word(&self) -> Option<&str> {
        if self.cluster.is_some() || self.after_dashdash {
            return None;
        }
        self.words.get(self.pos).and_then(Word::text)
    }

    /// Skips the argument `peek_option_word` returned.
    pub(super) fn skip(&mut self) {
        self.pos += 1;
    }

    /// Inserts arguments at the current position (`env -S` splits its value into
    /// arguments that are parsed again).
    pub(super) fn insert(&mut self, words: Vec<Word>) {
        let at = self.pos.min(self.words.len());
        self.words.splice(at..at, words);
    }

    fn end(&self) -> Result<Step, GetoptError> {
        if self.trailing_unknown {
            return Err(GetoptError::RestFromInput {
                from: self.unknown_from,
            });
        }
        Ok(Step::End)
    }

    fn short(&mut self, cluster: Cluster) -> Result<Step, GetoptError> {
        let Some(letter) = cluster
            .text
            .get(cluster.at..)
            .and_then(|s| s.chars().next())
        else {
            return self.next();
        };
        let after = cluster.at + letter.len_utf8();
        let rest = cluster.text.get(after..).unwrap_or_default().to_owned();
        let Some(arg) = self
            .spec
            .short
            .iter()
            .find(|(c, _)| *c == letter)
            .map(|(_, a)| *a)
        else {
            return Err(GetoptError::UnknownShort {
                letter,
                index: cluster.index,
            });
        };
        let attached = (!rest.is_empty()).then(|| Word::known(rest.clone(), cluster.index));
        let value = match arg {
            Arg::No => {
                if !rest.is_empty() {
                    self.cluster = Some(Cluster {
                        at: after,
                        ..cluster
                    });
                }
                None
            }
            Arg::Optional => attached,
            Arg::Required => match attached {
                Some(v) => Some(v),
                None => Some(self.take_value(&format!("-{letter}"))?),
            },
        };
        Ok(Step::Opt(Opt {
            key: Key::Short(letter),
            value,
        }))
    }

    fn long(&mut self, body: &str, index: usize) -> Result<Step, GetoptError> {
        let (name, attached) = match body.split_once('=') {
            Some((n, v)) => (n, Some(Word::known(v, index))),
            None => (body, None),
        };
        let (full, alias, arg) = self.lookup_long(name, index)?;
        let key = alias.map_or(Key::Long(full), Key::Short);
        let value = match (arg, attached) {
            (Arg::No, Some(_)) => {
                return Err(GetoptError::TakesNoValue { name: full, index });
            }
            (Arg::No, None) => None,
            (Arg::Optional, v) => v,
            (Arg::Required, Some(v)) => Some(v),
            (Arg::Required, None) => Some(self.take_value(&format!("--{full}"))?),
        };
        Ok(Step::Opt(Opt { key, value }))
    }

    fn lookup_long(
        &self,
        name: &str,
        index: usize,
    ) -> Result<(&'static str, Option<char>, Arg), GetoptError> {
        let table = self.spec.long;
        if let Some(entry) = table.iter().find(|(n, _, _)| *n == name) {
            return Ok(*entry);
        }
        let matches: Vec<_> = if self.spec.exact_long || name.is_empty() {
            Vec::new()
        } else {
            table
                .iter()
                .filter(|(n, _, _)| n.starts_with(name))
                .collect()
        };
        match matches.as_slice() {
            [] => Err(GetoptError::UnknownLong {
                name: name.to_owned(),
                index,
            }),
            [first, others @ ..] if others.iter().all(|o| (o.1, o.2) == (first.1, first.2)) => {
                Ok(**first)
            }
            _ => Err(GetoptError::Ambiguous {
                name: name.to_owned(),
                index,
            }),
        }
    }

    fn take_value(&mut self, option: &str) -> Result<Word, GetoptError> {
        let Some(word) = self.words.get(self.pos).cloned() else {
            if self.trailing_unknown {
                return Err(GetoptError::ValueFromInput {
                    option: option.to_owned(),
                    from: self.unknown_from,
                });
            }
            return Err(GetoptError::NoValue {
                option: option.to_owned(),
            });
        };
        if word.text().is_none() {
            return Err(unknown_word(&word, self.unknown_from));
        }
        self.pos += 1;
        Ok(word)
    }
}

fn unknown_word(word: &Word, from: &'static str) -> GetoptError {
    GetoptError::ArgFromInput {
        index: word.index,
        from,
    }
}

/// Why an argument list could not be parsed as its program would: the rule broken and
/// where (the messages become part of a rejection's text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum GetoptError {
    /// A short option the program does not have.
    #[error("unknown option -{letter} at args[{index}]")]
    UnknownShort { letter: char, index: usize },
    /// A long option the program does not have.
    #[error("unknown option --{name} at args[{index}]")]
    UnknownLong { name: String, index: usize },
    /// A long-option prefix that names several options.
    #[error("ambiguous option --{name} at args[{index}]")]
    Ambiguous { name: String, index: usize },
    /// `--name=value` for an option without a value.
    #[error("option --{name} at args[{index}] takes no value")]
    TakesNoValue { name: &'static str, index: usize },
    /// An option whose value is missing.
    #[error("option {option} has no value")]
    NoValue { option: String },
    /// An option whose value is not known before the program runs.
    #[error("the value of {option} comes from {from}'s input")]
    ValueFromInput { option: String, from: &'static str },
    /// An argument not known before the program runs.
    #[error("args[{index}] is filled in from {from}'s input")]
    ArgFromInput { index: usize, from: &'static str },
    /// The remaining arguments are not known before the program runs.
    #[error("its remaining arguments come from {from}'s input")]
    RestFromInput { from: &'static str },
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: Spec = Spec {
        short: &[
            ('i', Arg::No),
            ('u', Arg::Required),
            ('r', Arg::Optional),
            ('v', Arg::No),
        ],
        long: &[
            ("ignore-environment", Some('i'), Arg::No),
            ("unset", Some('u'), Arg::Required),
            ("replace", Some('r'), Arg::Optional),
            ("unbuffered", None, Arg::No),
            ("version", Some('v'), Arg::No),
            ("verbose", Some('v'), Arg::No),
        ],
        exact_long: false,
    };

    fn words(args: &[&str]) -> Vec<Word> {
        args.iter()
            .enumerate()
            .map(|(i, a)| Word::known(*a, i))
            .collect()
    }

    fn all(args: &[&str]) -> Result<Vec<Step>, GetoptError> {
        let mut g = Getopt::new(&SPEC, words(args), false, "xargs");
        let mut out = Vec::new();
        loop {
            match g.next()? {
                Step::End => return Ok(out),
                step => out.push(step),
            }
        }
    }

    fn opt(c: char, value: Option<(&str, usize)>) -> Step {
        Step::Opt(Opt {
            key: Key::Short(c),
            value: value.map(|(t, i)| Word::known(t, i)),
        })
    }

    #[test]
    fn clusters_and_values() {
        let got = all(&["-iuNAME", "-u", "X", "-r", "-rR", "p"]).unwrap();
        assert_eq!(
            got,
            vec![
                opt('i', None),
                opt('u', Some(("NAME", 0))),
                opt('u', Some(("X", 2))),
                opt('r', None),
                opt('r', Some(("R", 4))),
                Step::Operand(Word::known("p", 5)),
            ]
        );
    }

    #[test]
    fn long_options_prefixes_and_aliases() {
        let got = all(&[
            "--ign",
            "--unset=A",
            "--uns",
            "B",
            "--repl",
            "--ver",
            "--",
            "-i",
        ])
        .unwrap();
        assert_eq!(
            got,
            vec![
                opt('i', None),
                opt('u', Some(("A", 1))),
                opt('u', Some(("B", 3))),
                opt('r', None),
                opt('v', None),
                Step::Operand(Word::known("-i", 7)),
            ]
        );
        assert!(
            all(&["--un"])
                .unwrap_err()
                .to_string()
                .contains("ambiguous")
        );
        assert!(
            all(&["--bogus"])
                .unwrap_err()
                .to_string()
                .contains("unknown option --bogus")
        );
        assert!(
            all(&["--ignore-environment=1"])
                .unwrap_err()
                .to_string()
                .contains("takes no value")
        );
    }

    #[test]
    fn exact_long_refuses_prefixes() {
        const EXACT: Spec = Spec {
            short: &[],
            long: &[("output", None, Arg::Required)],
            exact_long: true,
        };
        let mut g = Getopt::new(&EXACT, words(&["--out", "f"]), false, "xargs");
        assert!(g.next().is_err());
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(
            all(&["-x"])
                .unwrap_err()
                .to_string()
                .contains("unknown option -x at args[0]")
        );
        assert!(
            all(&["-u"])
                .unwrap_err()
                .to_string()
                .contains("has no value")
        );
        let mut g = Getopt::new(&SPEC, vec![Word::unknown(0)], false, "xargs");
        assert!(
            g.next()
                .unwrap_err()
                .to_string()
                .contains("filled in from xargs's input")
        );
        let mut g = Getopt::new(&SPEC, words(&["-i"]), true, "xargs");
        assert!(matches!(g.next(), Ok(Step::Opt(_))));
        assert!(
            g.next()
                .unwrap_err()
                .to_string()
                .contains("come from xargs's input")
        );
    }

    #[test]
    fn lone_dash_is_an_operand_and_rest_follows_it() {
        let mut g = Getopt::new(&SPEC, words(&["-", "a", "-i"]), false, "xargs");
        assert_eq!(g.next().unwrap(), Step::Operand(Word::known("-", 0)));
        assert_eq!(g.rest(), words(&["-", "a", "-i"])[1..].to_vec());
    }

    #[test]
    fn insert_splices_at_the_current_position() {
        let mut g = Getopt::new(&SPEC, words(&["-i", "p"]), false, "xargs");
        assert!(matches!(g.next(), Ok(Step::Opt(_))));
        g.insert(vec![Word::known("-v", 0), Word::known("q", 0)]);
        assert_eq!(g.next().unwrap(), opt('v', None));
        assert_eq!(g.next().unwrap(), Step::Operand(Word::known("q", 0)));
    }
}
