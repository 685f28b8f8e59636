//! The records the sandbox's pid 1 writes to the supervisor on its report pipe.
//!
//! Shared, as one source file, by the supervisor (which decodes them) and by the
//! freestanding `tierbox-init` program (which encodes the final one): `core` only.
//!
//! pid 1 writes one [`ReportTag::Failed`] *or* [`ReportTag::Started`] record once setup
//! is over, then one [`ReportTag::Exited`] record with the program's wait status and
//! [`ReapedUsage`] once it has killed and reaped every other process of the namespace,
//! just before it exits. Each record is one `write` smaller than `PIPE_BUF`, so atomic.

/// Record tags on the report pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ReportTag {
    /// Setup failed: `step`, `errno`, `op_index`, `sub`.
    Failed = 1,
    /// The program was exec'd; `value` carries its pid inside the namespace.
    Started = 2,
    /// The program ended; `value` carries its raw wait status.
    Exited = 3,
}

/// One record on the report pipe ([`REPORT_BYTES`] bytes, atomic on a pipe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Report {
    /// [`ReportTag`] as u32.
    pub tag: u32,
    /// The failed setup step (the supervisor's `Step`) as u32.
    pub step: u32,
    /// errno, pid or wait status (see [`ReportTag`]).
    pub value: i32,
    /// Index of the failed mount op.
    pub op_index: u32,
    /// Sub-call of the failed mount op.
    pub sub: u32,
    /// [`ReportTag::Exited`]: what every process pid 1 reaped used, added up.
    pub usage: ReapedUsage,
}

/// CPU time and peak memory of the processes pid 1 reaped (the program, its descendants
/// and every orphan of the namespace), from the `rusage` of each `wait4`. pid 1's own
/// setup is not in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReapedUsage {
    /// User CPU time in microseconds.
    pub user_us: u64,
    /// System CPU time in microseconds.
    pub sys_us: u64,
    /// Largest peak resident set size of any one of them, in KiB.
    pub max_rss_kib: u64,
}

/// The kernel's `struct timeval` on 64-bit Linux.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Timeval {
    /// Seconds.
    pub sec: i64,
    /// Microseconds.
    pub usec: i64,
}

/// The kernel's `struct rusage` on 64-bit Linux (what `wait4` writes): two timevals and
/// fourteen longs, of which only the CPU times and `ru_maxrss` are read.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Rusage {
    /// `ru_utime`.
    pub utime: Timeval,
    /// `ru_stime`.
    pub stime: Timeval,
    /// `ru_maxrss` (KiB), then `ru_ixrss` … `ru_nivcsw`.
    pub longs: [i64; 14],
}

impl Timeval {
    /// In microseconds (negative fields count as 0; saturating, never panics).
    pub fn micros(self) -> u64 {
        (self.sec.max(0) as u64)
            .saturating_mul(1_000_000)
            .saturating_add(self.usec.max(0) as u64)
    }
}

impl ReapedUsage {
    /// Adds one reaped process (its `rusage` already includes the descendants it reaped).
    pub fn add(&mut self, ru: &Rusage) {
        self.user_us = self.user_us.saturating_add(ru.utime.micros());
        self.sys_us = self.sys_us.saturating_add(ru.stime.micros());
        self.max_rss_kib = self.max_rss_kib.max(ru.longs[0].max(0) as u64);
    }
}

/// Size of one encoded [`Report`]: five 32-bit and three 64-bit fields.
pub const REPORT_BYTES: usize = 5 * 4 + 3 * 8;

impl Report {
    /// The record's bytes on the pipe.
    pub fn encode(&self) -> [u8; REPORT_BYTES] {
        let mut b = [0u8; REPORT_BYTES];
        let u = &self.usage;
        let words = [
            self.tag,
            self.step,
            self.value as u32,
            self.op_index,
            self.sub,
        ];
        let longs = [u.user_us, u.sys_us, u.max_rss_kib];
        let mut at = 0;
        for w in words {
            for byte in w.to_ne_bytes() {
                b[at] = byte;
                at += 1;
            }
        }
        for l in longs {
            for byte in l.to_ne_bytes() {
                b[at] = byte;
                at += 1;
            }
        }
        b
    }

    /// Decodes one record as [`Report::encode`] wrote it.
    pub fn decode(b: &[u8; REPORT_BYTES]) -> Self {
        let word =
            |i: usize| u32::from_ne_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        let long = |i: usize| {
            let s = 20 + 8 * i;
            u64::from_ne_bytes([
                b[s],
                b[s + 1],
                b[s + 2],
                b[s + 3],
                b[s + 4],
                b[s + 5],
                b[s + 6],
                b[s + 7],
            ])
        };
        Self {
            tag: word(0),
            step: word(1),
            value: word(2) as i32,
            op_index: word(3),
            sub: word(4),
            usage: ReapedUsage {
                user_us: long(0),
                sys_us: long(1),
                max_rss_kib: long(2),
            },
        }
    }
}
