use super::*;

fn words(args: &[&str]) -> Vec<Word> {
    args.iter()
        .enumerate()
        .map(|(i, a)| Word::known(*a, i))
        .collect()
}

fn of(name: &str, args: &[&str]) -> Scan {
    let family = Family::of(super::super::interpreter_base_name(name).unwrap());
    scan(family, &words(args), false)
}

fn is_eval(name: &str, args: &[&str]) -> bool {
    matches!(of(name, args), Scan::Eval { .. })
}

#[track_caller]
fn eval_at(name: &str, args: &[&str], flag: &str, index: usize) {
    assert_eq!(
        of(name, args),
        Scan::Eval {
            flag: flag.to_owned(),
            index
        },
        "{name} {args:?}"
    );
}

#[test]
fn shell_eval_flags_including_clusters() {
    eval_at("bash", &["-c", "id"], "-c", 0);
    eval_at("bash", &["-ec", "id"], "-ec", 0);
    eval_at("sh", &["-xc", "id"], "-xc", 0);
    eval_at("bash", &["-lc", "id"], "-lc", 0);
    eval_at("zsh", &["-o", "extglob", "-c", "id"], "-c", 2);
    eval_at("bash", &["+o", "posix", "-c", "id"], "-c", 2);
    eval_at("bash", &["--norc", "--rcfile", "x", "-c", "id"], "-c", 3);
    eval_at("dash", &["-e", "-c", "id"], "-c", 1);
    eval_at("fish", &["--command=id"], "--command", 0);
    eval_at("fish", &["-C", "id", "x.fish"], "-C", 0);
}

#[test]
fn shell_scripts_and_what_follows_them_are_not_flags() {
    assert_eq!(of("bash", &["build.sh", "-c", "x"]), Scan::Script);
    assert_eq!(of("bash", &["--", "-c"]), Scan::Script);
    assert_eq!(of("bash", &["-e", "-x", "run.sh"]), Scan::Script);
    assert_eq!(
        of("bash", &["-o", "-c", "run.sh"]),
        Scan::Script,
        "-o takes the next word"
    );
    assert_eq!(of("fish", &["-d", "3", "x.fish"]), Scan::Script);
}

#[test]
fn shell_reads_stdin_without_a_script_or_with_s_or_i() {
    assert_eq!(of("bash", &[]), Scan::Stdin);
    assert_eq!(of("bash", &["-s", "arg"]), Scan::Stdin);
    assert_eq!(of("bash", &["-i"]), Scan::Stdin);
    assert_eq!(of("sh", &["-"]), Scan::Stdin);
    assert_eq!(of("sh", &["--"]), Scan::Stdin);
}

#[test]
fn python_flags() {
    eval_at("python3", &["-c", "x"], "-c", 0);
    eval_at("python3.11", &["-c", "x"], "-c", 0);
    eval_at("python3", &["-Sc", "x"], "-Sc", 0);
    eval_at("python", &["-Ic", "x"], "-Ic", 0);
    eval_at("python3", &["-uc", "x"], "-uc", 0);
    eval_at("python3", &["-W", "ignore", "-c", "x"], "-c", 2);
    eval_at("pypy3", &["-X", "dev", "-Bc", "x"], "-Bc", 2);
    assert_eq!(
        of("python3", &["-Wc", "x.py"]),
        Scan::Script,
        "-W takes c as its value"
    );
    assert_eq!(
        of("python3", &["-m", "pip", "install", "-c", "req.txt"]),
        Scan::Script
    );
    assert_eq!(of("python3", &["-mpytest", "-c", "x"]), Scan::Script);
    assert_eq!(of("python3", &["script.py", "-c", "x"]), Scan::Script);
    assert_eq!(of("python3", &["-u", "script.py"]), Scan::Script);
    assert_eq!(of("python3", &["-"]), Scan::Stdin);
    assert_eq!(
        of("python3", &["-i", "script.py"]),
        Scan::Stdin,
        "-i reads stdin after the script"
    );
    assert_eq!(of("python3", &["-E", "-s"]), Scan::Stdin);
}

#[test]
fn perl_and_ruby_flags() {
    eval_at("perl", &["-e", "print 1"], "-e", 0);
    eval_at("perl", &["-E", "say 1"], "-E", 0);
    eval_at("perl5.36", &["-lne", "print"], "-lne", 0);
    eval_at("perl", &["-0777", "-ne", "x"], "-ne", 1);
    eval_at("perl", &["-Mstrict", "-we", "x"], "-we", 1);
    eval_at("perl", &["-CSDe", "x"], "-CSDe", 0);
    assert_eq!(
        of("perl", &["-ie", "x.pl"]),
        Scan::Script,
        "-ie is in-place edit with suffix e"
    );
    assert_eq!(of("perl", &["-i.bak", "-p", "s.pl", "-e"]), Scan::Script);
    assert_eq!(
        of("perl", &["-c", "x.pl"]),
        Scan::Script,
        "perl -c is a syntax check"
    );
    assert_eq!(of("perl", &["-I", "lib", "t.pl"]), Scan::Script);
    eval_at("ruby", &["-e", "p 1"], "-e", 0);
    eval_at("ruby3.1", &["-ne", "x"], "-ne", 0);
    eval_at("ruby", &["-We", "x"], "-We", 0);
    assert_eq!(
        of("ruby", &["-E", "UTF-8", "x.rb"]),
        Scan::Script,
        "ruby -E is the encoding"
    );
    assert_eq!(of("ruby", &["-W:no-experimental", "x.rb"]), Scan::Script);
    assert_eq!(
        of("ruby", &["-Ke", "x.rb"]),
        Scan::Script,
        "-Ke is the EUC-JP code page"
    );
}

#[test]
fn node_deno_bun_flags() {
    eval_at("node", &["-e", "x"], "-e", 0);
    eval_at("node", &["-p", "x"], "-p", 0);
    eval_at("node20", &["-pe", "x"], "-pe", 0);
    eval_at("nodejs", &["--eval=x"], "--eval", 0);
    eval_at("node", &["--print", "x"], "--print", 0);
    eval_at("node", &["--require", "m", "-e", "x"], "-e", 2);
    eval_at("node", &["--unknown-thing", "-e", "x"], "-e", 1);
    assert_eq!(
        of("node", &["-c", "x.js"]),
        Scan::Script,
        "node -c is --check"
    );
    assert_eq!(
        of("node", &["-r", "ts-node/register", "x.ts", "-e"]),
        Scan::Script
    );
    assert_eq!(
        of("node", &["--inspect", "--no-warnings", "x.js"]),
        Scan::Script
    );
    eval_at("deno", &["eval", "x"], "eval", 0);
    eval_at("deno", &["--quiet", "eval", "x"], "eval", 1);
    eval_at("deno", &["repl", "--eval", "x"], "--eval", 1);
    eval_at("bun", &["-e", "x"], "-e", 0);
    eval_at("bun", &["--print", "x"], "--print", 0);
    assert_eq!(
        of("deno", &["run", "-A", "main.ts", "-p", "80"]),
        Scan::Script
    );
    assert_eq!(of("deno", &["run", "-"]), Scan::Stdin);
    assert_eq!(of("bun", &["run", "dev"]), Scan::Script);
}

#[test]
fn php_lua_and_others() {
    eval_at("php", &["-r", "x"], "-r", 0);
    eval_at("php8.2", &["-d", "a=1", "-R", "x"], "-R", 2);
    eval_at("php", &["--run", "x"], "--run", 0);
    assert_eq!(
        of("php", &["-e", "x.php"]),
        Scan::Script,
        "php -e is extended debug info"
    );
    assert_eq!(of("php", &["-f", "x.php"]), Scan::Script);
    assert_eq!(of("php", &["-a"]), Scan::Stdin);
    eval_at("lua5.4", &["-e", "x"], "-e", 0);
    eval_at("luajit", &["-estat"], "-estat", 0);
    assert_eq!(of("lua", &["-l", "socket", "x.lua"]), Scan::Script);
    eval_at("Rscript", &["-e", "x"], "-e", 0);
    assert_eq!(of("rscript", &["--vanilla", "x.R"]), Scan::Script);
    eval_at("osascript", &["-e", "x"], "-e", 0);
    eval_at("expect", &["-c", "x"], "-c", 0);
    assert_eq!(of("tclsh", &["-encoding", "utf-8", "x.tcl"]), Scan::Script);
    assert_eq!(of("tclsh8.6", &[]), Scan::Stdin);
    eval_at("nu", &["script.nu", "-c", "x"], "-c", 1);
    eval_at("nu", &["--commands", "x"], "--commands", 0);
}

#[test]
fn powershell_parameters_any_case_and_abbreviation() {
    for flag in [
        "-Command",
        "-c",
        "-command",
        "--command",
        "-Com",
        "-EncodedCommand",
        "-enc",
        "-ec",
        "-e",
        "-EncodedC",
        "-CommandWithArgs",
        "-cwa",
    ] {
        assert!(is_eval("pwsh", &[flag, "x"]), "{flag}");
    }
    assert!(is_eval(
        "pwsh",
        &["-NoProfile", "-NonInteractive", "-Command", "x"]
    ));
    assert!(is_eval("pwsh", &["-ExecutionPolicy", "Bypass", "-c", "x"]));
    assert_eq!(
        of("pwsh", &["-ex", "Bypass", "-File", "x.ps1", "-c"]),
        Scan::Script
    );
    assert_eq!(of("pwsh", &["-NoLogo", "x.ps1", "-Command"]), Scan::Script);
    assert_eq!(of("pwsh", &["-File", "-"]), Scan::Stdin);
    assert!(
        is_eval("powershell.exe", &["Get-Process"]),
        "Windows PowerShell runs a bare argument as a command"
    );
    assert!(is_eval("cmd", &["/c", "dir"]));
    assert!(is_eval("cmd.exe", &["/S", "/C", "dir"]));
    assert!(is_eval("cmd", &["/s/k", "x"]));
}

#[test]
fn unknown_arguments_cannot_be_ruled_out() {
    let args = vec![Word::known("-u", 0), Word::unknown(1)];
    assert_eq!(
        scan(Family::Python, &args, false),
        Scan::Unknown { index: 1 }
    );
    assert_eq!(
        scan(Family::Shell, &words(&["-e"]), true),
        Scan::Unknown { index: 0 }
    );
    assert_eq!(scan(Family::Shell, &words(&["x.sh"]), true), Scan::Script);
    assert_eq!(
        scan(Family::Pwsh, &[Word::unknown(3)], false),
        Scan::Unknown { index: 3 }
    );
}

#[test]
fn unknown_letters_fail_closed() {
    // `-Z` is unknown to the python table: its "value" must not hide a later `c`.
    eval_at("python3", &["-Zc", "x"], "-Zc", 0);
    // An unknown option at the end of its word takes a non-dash word, never a flag.
    eval_at("python3", &["-Z", "-c", "x"], "-c", 1);
    assert_eq!(of("python3", &["--frobnicate", "x.py"]), Scan::Stdin);
}
