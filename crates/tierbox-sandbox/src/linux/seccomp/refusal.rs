//! Naming a refused call for a denial report: its rule and its arguments.

use super::*;

/// A system call the filter refused, named for a denial report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusedCall {
    /// The system call's name.
    pub name: &'static str,
    /// The rule that refuses it: the deny table's reason, or what the argument rule
    /// inspects (an audit record does not carry the arguments; [`describe_refusal`] names
    /// them for a call handed to the supervisor).
    pub rule: &'static str,
}

/// The refusal the filter makes for native system call `nr`, or `None` when its answer
/// is not a refusal of the program's intent: `ENOSYS` for `clone3` and the x32 ABI makes
/// libc fall back to the call that is inspected, and the chmod family is handed to the
/// supervisor when mediated.
///
/// ```
/// use tierbox_sandbox::linux::seccomp::refused_call;
///
/// let ptrace = refused_call(libc::SYS_ptrace as u32).unwrap();
/// assert_eq!(ptrace.name, "ptrace");
/// assert!(refused_call(libc::SYS_clone3 as u32).is_none());
/// ```
pub fn refused_call(nr: u32) -> Option<RefusedCall> {
    if nr >= X32_SYSCALL_BIT {
        return None;
    }
    if let Some(d) = DENY_TABLE.iter().find(|d| d.nr == nr) {
        return (d.errno != libc::ENOSYS).then_some(RefusedCall {
            name: d.name,
            rule: d.reason,
        });
    }
    if let Some(&(name, _)) = CHMOD_FAMILY.iter().find(|(_, n)| *n as u32 == nr) {
        return Some(RefusedCall {
            name,
            rule: "a setuid or setgid mode, or a mode change outside the run's writable grants (uid 0 owns every root-owned file; landlock does not mediate metadata)",
        });
    }
    if let Some((name, _)) = leave_behind_rule(nr) {
        return Some(RefusedCall {
            name,
            rule: LEAVE_BEHIND_RULE,
        });
    }
    INSPECTED
        .iter()
        .find(|(n, ..)| *n as u32 == nr)
        .map(|&(_, name, rule)| RefusedCall { name, rule })
}

/// The rule that refuses system call `name` (see `refused_call`), by name.
///
/// ```
/// use tierbox_sandbox::linux::seccomp::refusal_rule;
///
/// assert!(refusal_rule("unshare").unwrap().contains("namespaces"));
/// assert!(refusal_rule("read").is_none());
/// ```
pub fn refusal_rule(name: &str) -> Option<&'static str> {
    DENY_TABLE
        .iter()
        .find(|d| d.name == name)
        .map(|d| d.reason)
        .or_else(|| {
            INSPECTED
                .iter()
                .find(|(_, n, _)| *n == name)
                .map(|&(.., rule)| rule)
        })
        .or_else(|| {
            LEAVE_BEHIND
                .iter()
                .any(|(n, ..)| *n == name)
                .then_some(LEAVE_BEHIND_RULE)
        })
}

/// The argument-inspected calls: number, name, and what the rule refuses.
pub(super) const INSPECTED: &[(libc::c_long, &str, &str)] = &[
    (
        libc::SYS_socket,
        "socket",
        "a socket family or type the run's network mode does not allow (only AF_UNIX, and AF_INET/AF_INET6 TCP when egress is open)",
    ),
    (
        libc::SYS_socketpair,
        "socketpair",
        "a family other than AF_UNIX",
    ),
    (
        libc::SYS_ioctl,
        "ioctl",
        "a denied request: TIOCSTI, TIOCLINUX, FS_IOC_SETFLAGS or FS_IOC_FSSETXATTR",
    ),
    (
        libc::SYS_personality,
        "personality",
        "a persona other than PER_LINUX",
    ),
    (
        libc::SYS_clone,
        "clone",
        "CLONE_NEW* flags: no nested namespaces (a user namespace exposes root-only kernel surface)",
    ),
    (
        libc::SYS_sendto,
        "sendto",
        "MSG_FASTOPEN: a connection without connect, past the egress proxy",
    ),
    (
        libc::SYS_sendmsg,
        "sendmsg",
        "MSG_FASTOPEN: a connection without connect, past the egress proxy",
    ),
    (
        libc::SYS_sendmmsg,
        "sendmmsg",
        "MSG_FASTOPEN: a connection without connect, past the egress proxy",
    ),
    (
        libc::SYS_listen,
        "listen",
        "listening sockets: the run's network is outbound TCP through the egress proxy",
    ),
];

/// A handed-off refusal ([`SeccompSpec::notify_refusals`]) in words: the system call's
/// name and its refused argument (`AF_NETLINK, SOCK_RAW`; `TIOCSTI`;
/// `CLONE_NEWUSER|CLONE_NEWNS`; `MSG_FASTOPEN`; `persona 0x8`), or `None` for a call the
/// hand-off never carries.
///
/// ```
/// use tierbox_sandbox::linux::seccomp::describe_refusal;
///
/// let args = [0x1000_0000 | 0x2_0000, 0, 0, 0, 0, 0];
/// let (name, target) = describe_refusal(libc::SYS_unshare as u32, &args).unwrap();
/// assert_eq!((name, target.as_str()), ("unshare", "CLONE_NEWNS|CLONE_NEWUSER"));
/// ```
pub fn describe_refusal(nr: u32, args: &[u64; 6]) -> Option<(&'static str, String)> {
    let nr = libc::c_long::from(nr);
    let lo = |i: usize| args[i] as u32;
    Some(match nr {
        libc::SYS_socket => (
            "socket",
            format!(
                "{}, {}{}",
                socket_family(lo(0)),
                socket_type(lo(1)),
                match args[2] {
                    0 => String::new(),
                    p => format!(", protocol {}", protocol_name(p)),
                }
            ),
        ),
        libc::SYS_socketpair => ("socketpair", socket_family(lo(0))),
        libc::SYS_ioctl => (
            "ioctl",
            DENIED_IOCTLS
                .iter()
                .find(|(_, request, _)| *request == lo(1))
                .map_or_else(
                    || format!("request {:#x}", lo(1)),
                    |(name, ..)| (*name).to_owned(),
                ),
        ),
        libc::SYS_personality => ("personality", format!("persona {:#x}", lo(0))),
        libc::SYS_clone => ("clone", namespace_flags(lo(0) & CLONE_NEW_FLAGS)),
        libc::SYS_unshare => ("unshare", namespace_flags(lo(0))),
        _ => {
            if let Some(&(name, _, owner, group)) =
                CHOWN_FAMILY.iter().find(|&&(_, n, _, _)| n == nr)
            {
                let id = |i: u32| match lo(i as usize) {
                    u32::MAX => "unchanged".to_owned(),
                    v => v.to_string(),
                };
                return Some((name, format!("owner {}, group {}", id(owner), id(group))));
            }
            if let Some((name, rule)) = leave_behind_rule(nr as u32) {
                return Some((name, describe_left_behind(rule, args)));
            }
            let &(name, _, _) = SEND_FLAG_CALLS.iter().find(|(_, n, _)| *n == nr)?;
            (name, "MSG_FASTOPEN".to_owned())
        }
    })
}

/// The refused argument of a [`LEAVE_BEHIND`] call: `mode 04755 (setuid)`,
/// `character device 0:0`, `RENAME_WHITEOUT`.
pub(super) fn describe_left_behind(rule: LeaveBehind, args: &[u64; 6]) -> String {
    let lo = |i: u32| args[i as usize] as u32;
    let mode = |m: u32| {
        let bits: Vec<&str> = [(libc::S_ISUID, "setuid"), (libc::S_ISGID, "setgid")]
            .iter()
            .filter(|&&(bit, _)| m & bit != 0)
            .map(|&(_, name)| name)
            .collect();
        format!("mode 0{:04o} ({})", m & 0o7777, bits.join(", "))
    };
    match rule {
        LeaveBehind::Mode(i) | LeaveBehind::CreateMode { mode: i, .. } => mode(lo(i)),
        LeaveBehind::Node(i) => match lo(i) & S_IFMT {
            t if t == libc::S_IFCHR || t == libc::S_IFBLK => {
                let dev = args[i as usize + 1];
                format!(
                    "{} device {}:{}",
                    if t == libc::S_IFCHR {
                        "character"
                    } else {
                        "block"
                    },
                    libc::major(dev),
                    libc::minor(dev)
                )
            }
            _ => mode(lo(i)),
        },
        LeaveBehind::RenameFlags(_) => "RENAME_WHITEOUT".to_owned(),
    }
}

/// An address family's name (`AF_NETLINK`), or `family N`.
pub(super) fn socket_family(family: u32) -> String {
    const NAMES: &[(u32, &str)] = &[
        (1, "AF_UNIX"),
        (2, "AF_INET"),
        (3, "AF_AX25"),
        (4, "AF_IPX"),
        (5, "AF_APPLETALK"),
        (7, "AF_BRIDGE"),
        (9, "AF_X25"),
        (10, "AF_INET6"),
        (15, "AF_KEY"),
        (16, "AF_NETLINK"),
        (17, "AF_PACKET"),
        (21, "AF_RDS"),
        (24, "AF_PPPOX"),
        (26, "AF_LLC"),
        (29, "AF_CAN"),
        (30, "AF_TIPC"),
        (31, "AF_BLUETOOTH"),
        (33, "AF_RXRPC"),
        (38, "AF_ALG"),
        (40, "AF_VSOCK"),
        (41, "AF_KCM"),
        (42, "AF_QIPCRTR"),
        (43, "AF_SMC"),
        (44, "AF_XDP"),
        (45, "AF_MCTP"),
    ];
    NAMES.iter().find(|(n, _)| *n == family).map_or_else(
        || format!("family {family}"),
        |(_, name)| (*name).to_owned(),
    )
}

/// A socket type's name without `SOCK_NONBLOCK`/`SOCK_CLOEXEC` (`SOCK_RAW`), or `type N`.
pub(super) fn socket_type(ty: u32) -> String {
    match ty & SOCK_TYPE_MASK {
        1 => "SOCK_STREAM".to_owned(),
        2 => "SOCK_DGRAM".to_owned(),
        3 => "SOCK_RAW".to_owned(),
        4 => "SOCK_RDM".to_owned(),
        5 => "SOCK_SEQPACKET".to_owned(),
        6 => "SOCK_DCCP".to_owned(),
        10 => "SOCK_PACKET".to_owned(),
        other => format!("type {other}"),
    }
}

/// An inet protocol number with its name where it is one the rules single out.
pub(super) fn protocol_name(protocol: u64) -> String {
    match protocol {
        6 => "6 (TCP)".to_owned(),
        17 => "17 (UDP)".to_owned(),
        132 => "132 (SCTP)".to_owned(),
        262 => "262 (MPTCP)".to_owned(),
        p => p.to_string(),
    }
}

/// The `CLONE_NEW*` flags set in `flags`, `|`-joined (`none` when there are none).
pub(super) fn namespace_flags(flags: u32) -> String {
    const NAMES: &[(i32, &str)] = &[
        (0x80, "CLONE_NEWTIME"),
        (libc::CLONE_NEWNS, "CLONE_NEWNS"),
        (libc::CLONE_NEWCGROUP, "CLONE_NEWCGROUP"),
        (libc::CLONE_NEWUTS, "CLONE_NEWUTS"),
        (libc::CLONE_NEWIPC, "CLONE_NEWIPC"),
        (libc::CLONE_NEWUSER, "CLONE_NEWUSER"),
        (libc::CLONE_NEWPID, "CLONE_NEWPID"),
        (libc::CLONE_NEWNET, "CLONE_NEWNET"),
    ];
    let set: Vec<&str> = NAMES
        .iter()
        .filter(|&&(bit, _)| flags & bit as u32 != 0)
        .map(|&(_, name)| name)
        .collect();
    if set.is_empty() {
        "no namespace flag".to_owned()
    } else {
        set.join("|")
    }
}
