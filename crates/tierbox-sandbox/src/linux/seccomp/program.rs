//! The filter program: the rules of a [`SeccompSpec`] laid out as an interval tree.

use super::*;

/// `ioctl` requests denied whatever the fd (matched on the low 32 bits of the request, as
/// the kernel does).
pub const DENIED_IOCTLS: &[(&str, u32, &str)] = &[
    (
        "TIOCSTI",
        libc::TIOCSTI as u32,
        "pushes input into a terminal: commands typed into the user's shell",
    ),
    (
        "TIOCLINUX",
        libc::TIOCLINUX as u32,
        "virtual console control, including TIOCSTI-like selection paste",
    ),
    (
        "FS_IOC_SETFLAGS",
        FS_IOC_SETFLAGS,
        "inode attribute flags (nodump, noatime, sync, …) of any file the run can open; landlock does not mediate them",
    ),
    (
        "FS_IOC32_SETFLAGS",
        FS_IOC32_SETFLAGS,
        "the 32-bit spelling of FS_IOC_SETFLAGS",
    ),
    (
        "FS_IOC_FSSETXATTR",
        FS_IOC_FSSETXATTR,
        "extended inode attributes and project id of any file the run can open",
    ),
];

/// The bits of `socket(2)`'s `type` argument that name the type (`SOCK_TYPE_MASK` in the
/// kernel); the rest are `SOCK_NONBLOCK` and `SOCK_CLOEXEC`.
pub(super) const SOCK_TYPE_MASK: u32 = 0xf;

/// The calls that take `MSG_FASTOPEN`, with the index of their flags argument.
pub(super) const SEND_FLAG_CALLS: &[(&str, libc::c_long, u32)] = &[
    ("sendto", libc::SYS_sendto, 3),
    ("sendmsg", libc::SYS_sendmsg, 2),
    ("sendmmsg", libc::SYS_sendmmsg, 3),
];

/// `_IOW('f', 2, long)`.
pub(super) const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
/// `_IOW('f', 2, int)`.
pub(super) const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;
/// `_IOW('X', 32, struct fsxattr)` (28 bytes).
pub(super) const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;

/// What the filter decides for one interval of syscall numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Action {
    Allow,
    Errno(i32),
    /// `socket`: inspect the address family in `args[0]`.
    InspectSocket,
    /// `socketpair`: only `AF_UNIX` in `args[0]`.
    InspectSocketpair,
    /// `ioctl`: inspect the request in `args[1]`.
    InspectIoctl,
    /// `personality`: inspect the persona in `args[0]`.
    InspectPersonality,
    /// `clone`: inspect the flags in `args[0]` for `CLONE_NEW*`.
    InspectClone,
    /// `sendto`/`sendmsg`/`sendmmsg`: inspect the flags in `args[N]` for `MSG_FASTOPEN`.
    InspectSendFlags(u32),
    /// A [`LEAVE_BEHIND`] call: refuse what its rule refuses, else `Pass`.
    InspectLeaveBehind(LeaveBehind, Pass),
    /// A [`CHOWN_FAMILY`] call under [`SeccompSpec::chown_noop_gid`]: its owner in
    /// `args[.0]` and group in `args[.1]` — root's own: success without running it; else
    /// `EPERM`.
    InspectChown(u32, u32),
    /// Hand the call to the supervisor (`SECCOMP_RET_USER_NOTIF`).
    Notify,
}

/// Where a [`LEAVE_BEHIND`] call its rule does not refuse goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Pass {
    Allow,
    /// A mediated `chmod`: to the supervisor.
    Notify,
}

/// A compiled seccomp filter: classic BPF instructions, ready for
/// `super::sys::seccomp_set_filter`.
#[derive(Debug, Clone)]
pub struct SeccompProgram {
    pub(super) filter: Vec<libc::sock_filter>,
}

/// Which of a spec's filters to lay out (see the constructors of [`SeccompProgram`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Variant {
    /// Everything in one filter ([`SeccompProgram::build`]).
    Whole,
    /// Without what the notifier hands off ([`SeccompProgram::build_base`]).
    Base,
    /// Only what is handed off ([`SeccompProgram::notifier`]).
    Notifier,
}

impl SeccompProgram {
    /// Compile the filter for `spec`: arch check, x32 rejection, one load of the syscall
    /// number, a binary search over syscall-number intervals to a shared return (or an
    /// argument-inspecting block for `socket`, `ioctl`, `personality` and `clone`).
    ///
    /// Pure; errors only on a table or builder bug (tested).
    pub fn build(spec: &SeccompSpec) -> Result<Self, SeccompError> {
        Self::assemble(spec, Variant::Whole)
    }

    /// The filter of `spec` without what is handed to the supervisor, to be stacked under
    /// [`SeccompProgram::notifier`]: with `spec.mediate_chmod` the chmod family, and with
    /// `spec.notify_refusals` the argument-inspected calls and `unshare`, are allowed here
    /// and the notifier, attached after this filter, decides them. The kernel runs every
    /// attached filter and keeps the most restrictive answer (kill, then an error, then
    /// the hand-off, then allow), so the pair decides every call exactly as
    /// [`SeccompProgram::build`]`(spec)` does (tested). Without either flag it is
    /// `build(spec)`.
    ///
    /// A Tier B launcher thread attaches this base filter to itself once, so each child
    /// inherits it at `clone` and attaches only the short notifier (see `launch`).
    pub fn build_base(spec: &SeccompSpec) -> Result<Self, SeccompError> {
        Self::assemble(spec, Variant::Base)
    }

    /// The hand-off alone: the chmod family (with `spec.mediate_chmod`) and the refusals
    /// of the argument-inspecting rules and `unshare` (with `spec.notify_refusals`) return
    /// `SECCOMP_RET_USER_NOTIF`, every other native call is allowed, any other
    /// architecture is killed (as in the whole filter). Only meaningful stacked on
    /// [`SeccompProgram::build_base`] of the same spec, and installed with
    /// `SECCOMP_FILTER_FLAG_NEW_LISTENER`.
    pub fn notifier(spec: &SeccompSpec) -> Result<Self, SeccompError> {
        Self::assemble(spec, Variant::Notifier)
    }

    /// Lays out `variant` of `spec`'s filter.
    ///
    /// Three steps: [`rules`] (one action per syscall number that is not plainly
    /// allowed), [`partition`] of all of `u32` into intervals of equal action, and the
    /// layout ([`Layout`]): the architecture check, a binary search over the intervals,
    /// one block per inspected call, the shared returns.
    pub(super) fn assemble(spec: &SeccompSpec, variant: Variant) -> Result<Self, SeccompError> {
        let Some(arch) = NATIVE_AUDIT_ARCH else {
            return Err(SeccompError::UnsupportedArch {
                arch: std::env::consts::ARCH,
            });
        };
        let rules = rules(spec, variant)?;
        // On x86-64 the x32 ABI (and any number past every table, e.g. -1) is one more
        // interval, so rejecting it costs no extra instruction on the path of ordinary
        // calls.
        let mut items: Vec<(u32, u32, Action)> = rules
            .iter()
            .map(|(&nr, &(_, action))| (nr, nr, action))
            .collect();
        if cfg!(target_arch = "x86_64") {
            items.push((X32_SYSCALL_BIT, u32::MAX, Action::Errno(libc::ENOSYS)));
        }
        let intervals = partition(items.into_iter());

        let mut l = Layout::new(spec.notify_refusals && variant != Variant::Base);
        l.asm.load(OFF_ARCH);
        let next = l.asm.label();
        l.asm.jump(JEQ, arch, next, l.kill);
        l.asm.bind(next);
        l.asm.load(OFF_NR);
        let mut targets = Vec::with_capacity(intervals.len());
        for &(lo, hi, action) in &intervals {
            targets.push((lo, hi, l.target_of(action)));
        }
        let root = emit_tree(&mut l.asm, &targets);
        if targets.len() < 2 {
            // A single interval emits no tree (never, with a non-empty table): jump to it.
            l.asm.jump(JEQ, 0, root, root);
        }
        l.socket(spec);
        l.socketpair();
        l.send_flags();
        l.ioctl();
        l.personality();
        l.clone_flags();
        l.leave_behind();
        l.chown(spec.chown_noop_gid);
        l.returns();
        let filter = l.asm.finish()?;
        Ok(Self { filter })
    }

    /// Number of BPF instructions.
    pub fn len(&self) -> usize {
        self.filter.len()
    }

    /// Whether the program is empty (never, for a built program).
    pub fn is_empty(&self) -> bool {
        self.filter.is_empty()
    }

    /// The instructions.
    pub fn instructions(&self) -> &[libc::sock_filter] {
        &self.filter
    }

    /// The program as raw bytes (`struct sock_filter` array, native endianness), the
    /// format `bwrap --seccomp FD` reads.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.filter.len() * 8);
        for insn in &self.filter {
            out.extend_from_slice(&insn.code.to_ne_bytes());
            out.push(insn.jt);
            out.push(insn.jf);
            out.extend_from_slice(&insn.k.to_ne_bytes());
        }
        out
    }

    /// [`Self::build`], once per distinct `spec` in this process: the program depends on
    /// nothing but the spec and the CPU, and building it (the deny table, the interval
    /// search tree) costs more than attaching it. At most 2^6 specs exist, so the cache
    /// is bounded.
    ///
    /// ```
    /// use tierbox_sandbox::linux::seccomp::{SeccompProgram, SeccompSpec};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # if cfg!(not(any(target_arch = "x86_64", target_arch = "aarch64"))) { return Ok(()); }
    /// let a = SeccompProgram::cached(&SeccompSpec::locked_down())?;
    /// let b = SeccompProgram::cached(&SeccompSpec::locked_down())?;
    /// assert!(std::sync::Arc::ptr_eq(&a, &b));
    /// # Ok(())
    /// # }
    /// ```
    pub fn cached(spec: &SeccompSpec) -> Result<Arc<Self>, SeccompError> {
        Self::cached_variant(spec, Variant::Whole)
    }

    /// [`Self::build_base`], once per distinct `spec` in this process (as [`Self::cached`]).
    pub fn cached_base(spec: &SeccompSpec) -> Result<Arc<Self>, SeccompError> {
        Self::cached_variant(spec, Variant::Base)
    }

    /// [`Self::notifier`], once per distinct `spec` in this process (as [`Self::cached`]).
    pub fn cached_notifier(spec: &SeccompSpec) -> Result<Arc<Self>, SeccompError> {
        Self::cached_variant(spec, Variant::Notifier)
    }

    pub(super) fn cached_variant(
        spec: &SeccompSpec,
        variant: Variant,
    ) -> Result<Arc<Self>, SeccompError> {
        type Key = (SeccompSpec, Variant);
        static CACHE: Mutex<Vec<(Key, Arc<SeccompProgram>)>> = Mutex::new(Vec::new());
        let key = (*spec, variant);
        let find = |cache: &[(Key, Arc<SeccompProgram>)]| {
            cache
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, p)| p.clone())
        };
        if let Some(p) = CACHE.lock().ok().and_then(|c| find(&c)) {
            return Ok(p);
        }
        let built = Arc::new(Self::assemble(spec, variant)?);
        if let Ok(mut cache) = CACHE.lock() {
            match find(&cache) {
                Some(p) => return Ok(p),
                None => cache.push((key, built.clone())),
            }
        }
        Ok(built)
    }

    /// What the program answers for native system call `nr` with `args`, as the kernel
    /// would (the program's own instruction subset, interpreted: loads of `seccomp_data`,
    /// `AND`, forward jumps, returns). The supervisor answers a handed-off call with its
    /// spec's [`SeccompSpec::enforcing`] program's verdict, so the hand-off refuses
    /// exactly what the kernel would have. `None` for an instruction outside that subset
    /// or a jump out of the program (a builder bug; the caller refuses).
    ///
    /// ```
    /// use tierbox_sandbox::linux::seccomp::{SeccompProgram, SeccompSpec};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # if cfg!(not(any(target_arch = "x86_64", target_arch = "aarch64"))) { return Ok(()); }
    /// let p = SeccompProgram::build(&SeccompSpec::locked_down())?;
    /// let args = [libc::AF_NETLINK as u64, libc::SOCK_RAW as u64, 0, 0, 0, 0];
    /// let ret = p.evaluate(libc::SYS_socket as u32, &args).unwrap();
    /// assert_eq!(ret, libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32);
    /// # Ok(())
    /// # }
    /// ```
    pub fn evaluate(&self, nr: u32, args: &[u64; 6]) -> Option<u32> {
        let word = |offset: u32| -> Option<u32> {
            match offset {
                OFF_NR => Some(nr),
                OFF_ARCH => NATIVE_AUDIT_ARCH,
                o if (16..64).contains(&o) && o % 4 == 0 => {
                    let arg = args[((o - 16) / 8) as usize];
                    Some(if (o - 16) % 8 == 0 {
                        arg as u32
                    } else {
                        (arg >> 32) as u32
                    })
                }
                _ => None,
            }
        };
        let mut acc = 0u32;
        let mut pc = 0usize;
        loop {
            let insn = self.filter.get(pc)?;
            match insn.code {
                LD_W_ABS => acc = word(insn.k)?,
                ALU_AND_K => acc &= insn.k,
                RET_K => return Some(insn.k),
                JEQ | JGE | JSET => {
                    let taken = match insn.code {
                        JEQ => acc == insn.k,
                        JGE => acc >= insn.k,
                        _ => acc & insn.k != 0,
                    };
                    pc += usize::from(if taken { insn.jt } else { insn.jf });
                }
                _ => return None,
            }
            pc += 1;
        }
    }

    /// The `sock_fprog` for `super::sys::seccomp_set_filter`.
    ///
    /// Lifetime: the returned struct holds a raw pointer into `self`'s instruction buffer;
    /// it is valid only while `self` is alive and not mutated (nothing mutates a built
    /// program). Build it in the supervisor before `clone`, keep `self` alive until the
    /// child has exec'd, and pass it to the child by reference. The kernel copies the
    /// program during the call, so it need not outlive the attach itself.
    pub fn as_fprog(&self) -> libc::sock_fprog {
        libc::sock_fprog {
            // `finish` guarantees len ≤ BPF_MAXINSNS < u16::MAX.
            len: u16::try_from(self.filter.len()).unwrap_or(0),
            filter: self.filter.as_ptr().cast_mut(),
        }
    }
}

/// Step 1 of [`SeccompProgram::assemble`]: one action per syscall number that is not
/// plainly allowed (a number named twice is an error), for `variant` of `spec`'s filter.
pub(super) fn rules(
    spec: &SeccompSpec,
    variant: Variant,
) -> Result<BTreeMap<u32, (&'static str, Action)>, SeccompError> {
    let mut rules: BTreeMap<u32, (&'static str, Action)> = BTreeMap::new();
    let mut add = |nr: u32, name: &'static str, action: Action| match rules.get(&nr) {
        Some(&(first, _)) => Err(SeccompError::DuplicateSyscall {
            nr,
            first,
            second: name,
        }),
        None => {
            rules.insert(nr, (name, action));
            Ok(())
        }
    };
    // Where the argument rules (and `unshare`, whose flags are its argument) live: in
    // the whole filter always; with `notify_refusals` in the notifier, not the base.
    let argument_rules = match variant {
        Variant::Whole => true,
        Variant::Base => !spec.notify_refusals,
        Variant::Notifier => spec.notify_refusals,
    };
    for d in DENY_TABLE {
        if !d.when.applies(spec) {
            continue;
        }
        let chown = CHOWN_FAMILY
            .iter()
            .find(|&&(_, nr, _, _)| nr as u32 == d.nr)
            .filter(|_| spec.chown_noop_gid.is_some());
        let action = if d.nr == libc::SYS_unshare as u32 && spec.notify_refusals {
            argument_rules.then_some(Action::Notify)
        } else if let Some(&(_, _, owner, group)) = chown {
            // An argument rule: with `notify_refusals` in the notifier, which hands both
            // outcomes to the supervisor; it answers with the enforcing filter's verdict
            // (0 or `EPERM`). So the kernel's audit log, which records an `ERRNO` action
            // without its errno, never lists a no-op as a refusal.
            argument_rules.then_some(Action::InspectChown(owner, group))
        } else {
            (variant != Variant::Notifier).then_some(Action::Errno(d.errno))
        };
        if let Some(action) = action {
            add(d.nr, d.name, action)?;
        }
    }
    // The chmod family: handed off (mediated), denied (`deny_file_metadata`), or allowed;
    // in each case a setuid or setgid mode is refused first (the `LEAVE_BEHIND` rule, an
    // argument rule: in the notifier when refusals are handed off — for a mediated call
    // the supervisor refuses it, as the notifier hands it every chmod).
    for &(name, nr) in CHMOD_FAMILY {
        let inspect = |pass| {
            leave_behind_rule(nr as u32).map(|(_, rule)| Action::InspectLeaveBehind(rule, pass))
        };
        let action = match (variant, spec.mediate_chmod, spec.deny_file_metadata) {
            (Variant::Whole, true, _) => inspect(Pass::Notify),
            (Variant::Notifier, true, _) => Some(Action::Notify),
            (Variant::Base, true, _) => argument_rules.then(|| inspect(Pass::Allow)).flatten(),
            // Denied in the base filter.
            (Variant::Notifier, false, true) => None,
            (_, false, true) => Some(Action::Errno(libc::EPERM)),
            (_, false, false) => argument_rules.then(|| inspect(Pass::Allow)).flatten(),
        };
        if let Some(action) = action {
            add(nr as u32, name, action)?;
        }
    }
    if argument_rules {
        for &(name, nr, rule) in LEAVE_BEHIND {
            if !CHMOD_FAMILY.iter().any(|&(_, n)| n == nr) {
                add(
                    nr as u32,
                    name,
                    Action::InspectLeaveBehind(rule, Pass::Allow),
                )?;
            }
        }
    }
    if argument_rules {
        add(libc::SYS_socket as u32, "socket", Action::InspectSocket)?;
        add(
            libc::SYS_socketpair as u32,
            "socketpair",
            Action::InspectSocketpair,
        )?;
        add(libc::SYS_ioctl as u32, "ioctl", Action::InspectIoctl)?;
        add(
            libc::SYS_personality as u32,
            "personality",
            Action::InspectPersonality,
        )?;
        if spec.deny_namespaces {
            add(libc::SYS_clone as u32, "clone", Action::InspectClone)?;
        }
        if spec.inet == InetSockets::TcpOnly {
            for &(name, nr, flags_arg) in SEND_FLAG_CALLS {
                add(nr as u32, name, Action::InspectSendFlags(flags_arg))?;
            }
        }
    }
    if spec.inet == InetSockets::TcpOnly && variant != Variant::Notifier {
        add(
            libc::SYS_listen as u32,
            "listen",
            Action::Errno(libc::EPERM),
        )?;
    }
    Ok(rules)
}

/// The program being laid out: the shared return labels, and one label per inspected
/// call's block.
pub(super) struct Layout {
    asm: Asm,
    kill: Label,
    allow: Label,
    errno_labels: BTreeMap<i32, Label>,
    socket_block: Label,
    socketpair_block: Label,
    ioctl_block: Label,
    personality_block: Label,
    clone_block: Label,
    notify: Label,
    send_blocks: BTreeMap<u32, Label>,
    leave_behind_blocks: BTreeMap<(LeaveBehind, Pass), Label>,
    chown_blocks: BTreeMap<(u32, u32), Label>,
    /// Where an argument rule's `EPERM` refusal goes: the `EPERM` return, or `notify` when the
    /// refusals are handed to the supervisor.
    refuse_eperm: Label,
    /// The same for an `EAFNOSUPPORT` refusal.
    refuse_eafnosupport: Label,
}

impl Layout {
    /// `notify_refusals`: the argument rules' refusals return `SECCOMP_RET_USER_NOTIF`.
    pub(super) fn new(notify_refusals: bool) -> Self {
        let mut asm = Asm::default();
        let kill = asm.label();
        let allow = asm.label();
        let eperm = asm.label();
        let enosys = asm.label();
        let eafnosupport = asm.label();
        let errno_labels = BTreeMap::from([
            (libc::EPERM, eperm),
            (libc::ENOSYS, enosys),
            (libc::EAFNOSUPPORT, eafnosupport),
        ]);
        let socket_block = asm.label();
        let socketpair_block = asm.label();
        let ioctl_block = asm.label();
        let personality_block = asm.label();
        let clone_block = asm.label();
        let notify = asm.label();
        let (refuse_eperm, refuse_eafnosupport) = if notify_refusals {
            (notify, notify)
        } else {
            (eperm, eafnosupport)
        };
        Self {
            asm,
            kill,
            allow,
            errno_labels,
            socket_block,
            socketpair_block,
            ioctl_block,
            personality_block,
            clone_block,
            notify,
            send_blocks: BTreeMap::new(),
            leave_behind_blocks: BTreeMap::new(),
            chown_blocks: BTreeMap::new(),
            refuse_eperm,
            refuse_eafnosupport,
        }
    }

    /// Where the search tree sends a call with `action`.
    pub(super) fn target_of(&mut self, action: Action) -> Label {
        match action {
            Action::Allow => self.allow,
            Action::Errno(e) => {
                let asm = &mut self.asm;
                *self.errno_labels.entry(e).or_insert_with(|| asm.label())
            }
            Action::InspectSocket => self.socket_block,
            Action::InspectSocketpair => self.socketpair_block,
            Action::InspectIoctl => self.ioctl_block,
            Action::InspectPersonality => self.personality_block,
            Action::InspectClone => self.clone_block,
            Action::InspectSendFlags(arg) => {
                let asm = &mut self.asm;
                *self.send_blocks.entry(arg).or_insert_with(|| asm.label())
            }
            Action::InspectLeaveBehind(rule, pass) => {
                let asm = &mut self.asm;
                *self
                    .leave_behind_blocks
                    .entry((rule, pass))
                    .or_insert_with(|| asm.label())
            }
            Action::InspectChown(owner, group) => {
                let asm = &mut self.asm;
                *self
                    .chown_blocks
                    .entry((owner, group))
                    .or_insert_with(|| asm.label())
            }
            Action::Notify => self.notify,
        }
    }

    /// The [`CHOWN_FAMILY`] under [`SeccompSpec::chown_noop_gid`]: owner `-1` or `0` and
    /// group `-1`, `0` or `gid` return 0 without running the call; anything else `EPERM`;
    /// both handed to the supervisor when refusals are. Low 32 bits: the kernel reads
    /// `uid_t`/`gid_t`.
    pub(super) fn chown(&mut self, gid: Option<u32>) {
        let Some(gid) = gid else {
            return;
        };
        let blocks: Vec<((u32, u32), Label)> =
            self.chown_blocks.iter().map(|(&k, &v)| (k, v)).collect();
        let handed_off = self.refuse_eperm == self.notify;
        for ((owner, group), label) in blocks {
            let (noop, eperm) = if handed_off {
                (self.notify, self.notify)
            } else {
                (
                    self.target_of(Action::Errno(0)),
                    self.target_of(Action::Errno(libc::EPERM)),
                )
            };
            let asm = &mut self.asm;
            asm.bind(label);
            let (owner_root, check_group, group_root, group_own) =
                (asm.label(), asm.label(), asm.label(), asm.label());
            asm.load(off_arg_lo(owner));
            asm.jump(JEQ, u32::MAX, check_group, owner_root);
            asm.bind(owner_root);
            asm.jump(JEQ, 0, check_group, eperm);
            asm.bind(check_group);
            asm.load(off_arg_lo(group));
            asm.jump(JEQ, u32::MAX, noop, group_root);
            asm.bind(group_root);
            asm.jump(JEQ, 0, noop, group_own);
            asm.bind(group_own);
            asm.jump(JEQ, gid, noop, eperm);
        }
    }

    /// The [`LEAVE_BEHIND`] rules: a setuid/setgid mode, a device node, a whiteout.
    pub(super) fn leave_behind(&mut self) {
        for (&(rule, pass), &label) in &self.leave_behind_blocks {
            let refuse = self.refuse_eperm;
            let pass = match pass {
                Pass::Allow => self.allow,
                Pass::Notify => self.notify,
            };
            let asm = &mut self.asm;
            asm.bind(label);
            match rule {
                LeaveBehind::Mode(arg) => {
                    asm.load(off_arg_lo(arg));
                    asm.jump(JSET, SETID_BITS, refuse, pass);
                }
                LeaveBehind::CreateMode { flags, mode } => {
                    let creates = asm.label();
                    asm.load(off_arg_lo(flags));
                    asm.jump(JSET, OPEN_CREATE_FLAGS, creates, pass);
                    asm.bind(creates);
                    asm.load(off_arg_lo(mode));
                    asm.jump(JSET, SETID_BITS, refuse, pass);
                }
                LeaveBehind::Node(arg) => {
                    // One test: S_IFCHR's bit is set in S_IFCHR and S_IFBLK (and in
                    // S_IFLNK and invalid types, which mknod refuses anyway) and in no
                    // type mknod makes otherwise (regular, FIFO, socket).
                    asm.load(off_arg_lo(arg));
                    asm.jump(JSET, SETID_BITS | NODE_DEVICE_BIT, refuse, pass);
                }
                LeaveBehind::RenameFlags(arg) => {
                    asm.load(off_arg_lo(arg));
                    asm.jump(JSET, RENAME_WHITEOUT, refuse, pass);
                }
            }
        }
    }

    /// socket(domain, ...): unix and inet families per spec, anything else unsupported.
    pub(super) fn socket(&mut self, spec: &SeccompSpec) {
        if !self.asm.is_used(self.socket_block) {
            return;
        }
        let (asm, allow, eperm) = (&mut self.asm, self.allow, self.refuse_eperm);
        asm.bind(self.socket_block);
        asm.load(off_arg_lo(0));
        let unix = if spec.allow_unix_sockets {
            allow
        } else {
            eperm
        };
        let inet_type = asm.label();
        let inet = match spec.inet {
            InetSockets::TcpOnly => inet_type,
            InetSockets::Any => allow,
            InetSockets::Deny => eperm,
        };
        let (n1, n2) = (asm.label(), asm.label());
        asm.jump(JEQ, libc::AF_UNIX as u32, unix, n1);
        asm.bind(n1);
        asm.jump(JEQ, libc::AF_INET as u32, inet, n2);
        asm.bind(n2);
        asm.jump(JEQ, libc::AF_INET6 as u32, inet, self.refuse_eafnosupport);
        if inet == inet_type {
            // socket(AF_INET*, type, protocol): the type without SOCK_NONBLOCK /
            // SOCK_CLOEXEC must be SOCK_STREAM, the protocol 0 or IPPROTO_TCP (all 64 bits:
            // the kernel reads an int, but a protocol with high bits set is refused too).
            asm.bind(inet_type);
            asm.load(off_arg_lo(1));
            asm.and(SOCK_TYPE_MASK);
            let (stream, protocol_lo, not_zero) = (asm.label(), asm.label(), asm.label());
            asm.jump(JEQ, libc::SOCK_STREAM as u32, stream, eperm);
            asm.bind(stream);
            asm.load(off_arg_hi(2));
            asm.jump(JEQ, 0, protocol_lo, eperm);
            asm.bind(protocol_lo);
            asm.load(off_arg_lo(2));
            asm.jump(JEQ, 0, allow, not_zero);
            asm.bind(not_zero);
            asm.jump(JEQ, libc::IPPROTO_TCP as u32, allow, eperm);
        }
    }

    /// socketpair(domain, ...): AF_UNIX only, as the kernel has no other family a
    /// sandboxed program needs (AF_TIPC and friends would load kernel modules).
    pub(super) fn socketpair(&mut self) {
        if !self.asm.is_used(self.socketpair_block) {
            return;
        }
        self.asm.bind(self.socketpair_block);
        self.asm.load(off_arg_lo(0));
        self.asm.jump(
            JEQ,
            libc::AF_UNIX as u32,
            self.allow,
            self.refuse_eafnosupport,
        );
    }

    /// sendto / sendmsg / sendmmsg: no MSG_FASTOPEN (an implicit connect).
    pub(super) fn send_flags(&mut self) {
        for (&arg, &label) in &self.send_blocks {
            self.asm.bind(label);
            self.asm.load(off_arg_lo(arg));
            self.asm.jump(
                JSET,
                libc::MSG_FASTOPEN as u32,
                self.refuse_eperm,
                self.allow,
            );
        }
    }

    /// ioctl(fd, request, ...): the terminal-injection requests.
    pub(super) fn ioctl(&mut self) {
        if !self.asm.is_used(self.ioctl_block) {
            return;
        }
        let (asm, allow, eperm) = (&mut self.asm, self.allow, self.refuse_eperm);
        asm.bind(self.ioctl_block);
        asm.load(off_arg_lo(1));
        for (i, &(_, request, _)) in DENIED_IOCTLS.iter().enumerate() {
            let otherwise = if i + 1 == DENIED_IOCTLS.len() {
                allow
            } else {
                asm.label()
            };
            asm.jump(JEQ, request, eperm, otherwise);
            if otherwise != allow {
                asm.bind(otherwise);
            }
        }
    }

    /// personality(persona): only PER_LINUX and the query.
    pub(super) fn personality(&mut self) {
        if !self.asm.is_used(self.personality_block) {
            return;
        }
        let asm = &mut self.asm;
        asm.bind(self.personality_block);
        asm.load(off_arg_lo(0));
        let n = asm.label();
        asm.jump(JEQ, PER_LINUX, self.allow, n);
        asm.bind(n);
        asm.jump(JEQ, PERSONALITY_QUERY, self.allow, self.refuse_eperm);
    }

    /// clone(flags, ...): no new namespaces (inspected only with `deny_namespaces`).
    pub(super) fn clone_flags(&mut self) {
        if !self.asm.is_used(self.clone_block) {
            return;
        }
        self.asm.bind(self.clone_block);
        self.asm.load(off_arg_lo(0));
        self.asm
            .jump(JSET, CLONE_NEW_FLAGS, self.refuse_eperm, self.allow);
    }

    /// Shared returns; only the referenced ones are emitted.
    pub(super) fn returns(&mut self) {
        self.asm.ret_if_used(self.allow, libc::SECCOMP_RET_ALLOW);
        for (&errno, &label) in &self.errno_labels {
            self.asm.ret_if_used(label, ret_errno(errno));
        }
        self.asm
            .ret_if_used(self.kill, libc::SECCOMP_RET_KILL_PROCESS);
        self.asm
            .ret_if_used(self.notify, libc::SECCOMP_RET_USER_NOTIF);
    }
}
