//! Audit records, as the kernel sends them on the netlink socket: `audit(TIME:SERIAL):
//! key=value …`. Only the records a denial report needs are read; everything else is
//! `None`.

/// `AUDIT_SYSCALL`: the system-call record closing an event.
const AUDIT_SYSCALL: u16 = 1300;
/// `AUDIT_PATH`: a path a system call named (file refusals only).
const AUDIT_PATH: u16 = 1302;
/// `AUDIT_CWD`: the working directory of the calling process (file refusals only).
const AUDIT_CWD: u16 = 1307;
/// `AUDIT_EOE`: the end of a multi-record event.
const AUDIT_EOE: u16 = 1320;
/// `AUDIT_SECCOMP`: a seccomp action other than allow.
const AUDIT_SECCOMP: u16 = 1326;
/// `AUDIT_LANDLOCK_ACCESS`: a landlock denial.
const AUDIT_LANDLOCK_ACCESS: u16 = 1423;

/// Every record type [`parse_record`] reads; the reader's socket drops the others.
pub(super) const RECORD_TYPES: [u16; 7] = [
    AUDIT_SECCOMP,
    AUDIT_LANDLOCK_ACCESS,
    AUDIT_SYSCALL,
    AUDIT_PATH,
    AUDIT_CWD,
    AUDIT_EOE,
    super::AUDIT_TRUSTED_APP,
];

/// `SECCOMP_RET_ACTION_FULL`.
const SECCOMP_ACTION_MASK: u32 = 0xffff_0000;

/// One record a denial report reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A system call the seccomp filter refused (error, trap or kill; not the calls it
    /// hands to the supervisor).
    Seccomp {
        /// The audit session of the calling process.
        ses: u32,
        /// The system call's number.
        syscall: u32,
        /// Made with the native architecture (else the number is another ABI's).
        native: bool,
    },
    /// A landlock denial; its session is in the event's [`Record::Syscall`].
    Landlock {
        /// The event it belongs to.
        serial: u64,
        /// The refused access rights without their `fs.`/`net.`/`scope.` prefix.
        access: String,
        /// The path, port, address or process it was refused on.
        object: String,
    },
    /// The system-call record of an event.
    Syscall {
        /// The event.
        serial: u64,
        /// The audit session of the calling process.
        ses: u32,
        /// The call, when it failed and was made with the native architecture.
        failed: Option<FailedCall>,
    },
    /// The working directory of an event's process.
    Cwd {
        /// The event.
        serial: u64,
        /// The directory.
        cwd: String,
    },
    /// A path an event's system call named.
    Path {
        /// The event.
        serial: u64,
        /// The name as given (or the directory part of it, for a `PARENT` record).
        name: String,
        /// `NORMAL`, `PARENT`, `CREATE`, `DELETE`, `UNKNOWN`.
        nametype: String,
    },
    /// The end of an event.
    EndOfEvent {
        /// The event.
        serial: u64,
    },
    /// A barrier record (`AUDIT_TRUSTED_APP`, `tierbox-barrier=ORIGIN-N`).
    Barrier {
        /// The sending process's random tag: only this process's own barriers count
        /// (other supervisors on the host number theirs from 1 too; a pid would not do,
        /// since the kernel writes the sender's pid as the initial pid namespace sees it).
        origin: u64,
        /// Its number.
        number: u64,
    },
}

/// A failed system call, from its `SYSCALL` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailedCall {
    /// The system call's number (native architecture).
    pub syscall: u32,
    /// The error it returned, positive (`ENOENT` is 2).
    pub errno: i32,
    /// Its first three arguments.
    pub args: [u64; 3],
}

/// Parses one netlink audit message of type `ty`.
///
/// ```
/// use tierbox_sandbox::linux::audit::{Record, parse_record};
///
/// let text = br#"audit(1795819326.661:114): domain=13719b2cf blockers=fs.read_file path="/etc/hostname" dev="vda" ino=611"#;
/// assert_eq!(
///     parse_record(1423, text),
///     Some(Record::Landlock {
///         serial: 114,
///         access: "read_file".to_owned(),
///         object: "/etc/hostname".to_owned(),
///     })
/// );
/// ```
pub fn parse_record(ty: u16, payload: &[u8]) -> Option<Record> {
    // Every record on the host arrives here: the others are skipped unread.
    if !matches!(
        ty,
        AUDIT_SECCOMP
            | AUDIT_LANDLOCK_ACCESS
            | AUDIT_SYSCALL
            | AUDIT_PATH
            | AUDIT_CWD
            | AUDIT_EOE
            | super::AUDIT_TRUSTED_APP
    ) {
        return None;
    }
    let text = std::str::from_utf8(payload).ok()?;
    let text = text.trim_end_matches(['\0', '\n']);
    let (serial, body) = header(text)?;
    match ty {
        AUDIT_SECCOMP => {
            let action = u32::from_str_radix(field(body, "code")?.trim_start_matches("0x"), 16)
                .ok()?
                & SECCOMP_ACTION_MASK;
            let refused = matches!(
                action,
                // KILL_THREAD, TRAP, ERRNO, KILL_PROCESS.
                0 | 0x0003_0000 | 0x0005_0000 | 0x8000_0000
            );
            if !refused {
                return None;
            }
            let arch = u32::from_str_radix(field(body, "arch")?, 16).ok()?;
            Some(Record::Seccomp {
                ses: field(body, "ses")?.parse().ok()?,
                syscall: field(body, "syscall")?.parse().ok()?,
                native: crate::linux::seccomp::NATIVE_AUDIT_ARCH == Some(arch),
            })
        }
        AUDIT_LANDLOCK_ACCESS => {
            let blockers = field(body, "blockers")?;
            let access = blockers
                .split(',')
                .map(|b| b.split_once('.').map_or(b, |(_, right)| right))
                .collect::<Vec<_>>()
                .join(",");
            Some(Record::Landlock {
                serial,
                access,
                object: object(body),
            })
        }
        AUDIT_SYSCALL => Some(Record::Syscall {
            serial,
            ses: field(body, "ses")?.parse().ok()?,
            failed: failed_call(body),
        }),
        AUDIT_CWD => Some(Record::Cwd {
            serial,
            cwd: string_value(field(body, "cwd")?),
        }),
        AUDIT_PATH => Some(Record::Path {
            serial,
            name: string_value(field(body, "name")?),
            nametype: field(body, "nametype").unwrap_or("UNKNOWN").to_owned(),
        }),
        AUDIT_EOE => Some(Record::EndOfEvent { serial }),
        super::AUDIT_TRUSTED_APP => {
            let at = body.find(super::BARRIER_TAG)? + super::BARRIER_TAG.len();
            let rest = body.get(at..)?;
            let (origin, rest) = rest.split_once('-')?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            Some(Record::Barrier {
                origin: u64::from_str_radix(origin, 16).ok()?,
                number: digits.parse().ok()?,
            })
        }
        _ => None,
    }
}

/// The failed call a `SYSCALL` record describes (`success=no`, the native architecture).
fn failed_call(body: &str) -> Option<FailedCall> {
    if field(body, "success")? != "no" {
        return None;
    }
    let arch = u32::from_str_radix(field(body, "arch")?, 16).ok()?;
    if crate::linux::seccomp::NATIVE_AUDIT_ARCH != Some(arch) {
        return None;
    }
    let exit: i64 = field(body, "exit")?.parse().ok()?;
    let arg = |k: &str| u64::from_str_radix(field(body, k)?, 16).ok();
    Some(FailedCall {
        syscall: field(body, "syscall")?.parse().ok()?,
        errno: i32::try_from(exit.checked_neg()?).ok()?,
        args: [arg("a0")?, arg("a1")?, arg("a2")?],
    })
}

/// `audit(TIME:SERIAL): BODY` → `(SERIAL, BODY)`.
fn header(text: &str) -> Option<(u64, &str)> {
    let rest = text.strip_prefix("audit(")?;
    let (stamp, body) = rest.split_once("): ")?;
    let serial = stamp.rsplit_once(':')?.1.parse().ok()?;
    Some((serial, body))
}

/// The raw value of `key=` in `body` (values never contain blanks: the kernel
/// hex-encodes strings that would).
fn field<'a>(body: &'a str, key: &str) -> Option<&'a str> {
    body.split(' ')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// A string value: quoted as is, or hex-encoded (the kernel's form for strings with
/// blanks, quotes or control characters).
fn string_value(raw: &str) -> String {
    if let Some(quoted) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        return quoted.to_owned();
    }
    if raw.len().is_multiple_of(2) && raw.bytes().all(|b| b.is_ascii_hexdigit()) {
        let bytes: Option<Vec<u8>> = (0..raw.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&raw[i..i + 2], 16).ok())
            .collect();
        if let Some(bytes) = bytes {
            return String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    raw.to_owned()
}

/// What a landlock record was refused on.
fn object(body: &str) -> String {
    if let Some(path) = field(body, "path") {
        let mut p = string_value(path);
        if let Some(name) = field(body, "name") {
            p = format!("{}/{}", p.trim_end_matches('/'), string_value(name));
        }
        return p;
    }
    if let Some(port) = field(body, "dest") {
        return match field(body, "daddr") {
            Some(addr) if addr.contains(':') => format!("[{addr}]:{port}"),
            Some(addr) => format!("{addr}:{port}"),
            None => format!("port {port}"),
        };
    }
    if let Some(port) = field(body, "src").or_else(|| field(body, "lport")) {
        return format!("port {port}");
    }
    if let Some(pid) = field(body, "opid") {
        return match field(body, "ocomm") {
            Some(comm) => format!("pid {pid} ({})", string_value(comm)),
            None => format!("pid {pid}"),
        };
    }
    // Whatever else the kernel says after the access rights.
    body.split(' ')
        .filter(|kv| !kv.starts_with("domain=") && !kv.starts_with("blockers="))
        .collect::<Vec<_>>()
        .join(" ")
}
