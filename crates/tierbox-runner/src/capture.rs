//! Output capture under a quota. Guest output is hostile data: it is capped, counted and
//! never allowed to block the child.
//!
//! - `truncate` mode keeps the first half of the quota and the last half, counts every
//!   byte seen and reports how many were omitted in between; reading continues to EOF so
//!   the child never blocks on a full pipe.
//! - `kill` mode keeps the first `max_bytes` and reports the moment the quota is passed,
//!   so the supervisor can terminate the tree; the captured prefix is still returned.
//! - optional spill writes every byte to a file (bounded by the run's file-size limit and
//!   the cap on all spill files: [`crate::spill`]).

use std::collections::VecDeque;
use std::path::PathBuf;

use sha2::{Digest, Sha256};
use tierbox_policy::QuotaMode;

/// Bytes read from a pipe per `read` call. Small enough that quota checks happen as the
/// output arrives (never after exit), large enough to drain a chatty child quickly.
pub const CAPTURE_CHUNK_BYTES: usize = 4 * 1024;

/// What happened when a chunk was pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    /// Keep reading.
    Continue,
    /// `kill` mode: the quota was just passed; terminate the tree.
    QuotaExceeded,
}

/// Bytes reserved for a stream's head at its first chunk (it grows beyond as needed, up
/// to the quota): one allocation for most outputs, without reserving a quota's worth.
const HEAD_RESERVE_BYTES: usize = 64 * 1024;

/// One stream's capture.
#[derive(Debug)]
pub struct StreamCapture {
    mode: QuotaMode,
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    exceeded: bool,
    spill: Spill,
    /// SHA-256 of every byte read, kept or not (the attestation's raw output digest).
    hasher: Sha256,
}

/// Where the stream is spilled, if anywhere.
#[derive(Debug)]
enum Spill {
    /// Not asked for.
    Off,
    /// Being written.
    On(crate::spill::SpillFile),
    /// Asked for and refused (the cap was reached): why.
    Refused(String),
}

/// A finished capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// The first bytes of the stream.
    pub head: Vec<u8>,
    /// The last bytes of the stream (empty unless bytes were omitted or in `truncate` mode
    /// when the stream was larger than the head).
    pub tail: Vec<u8>,
    /// Every byte the child wrote that was read.
    pub total_bytes: u64,
    /// Bytes seen but not kept.
    pub omitted_bytes: u64,
    /// Something was not kept.
    pub truncated: bool,
    /// Where the full stream was spilled, and any spill error.
    pub spill_path: Option<PathBuf>,
    /// Why spilling stopped early, if it did.
    pub spill_error: Option<String>,
    /// Lowercase hex SHA-256 of every byte read (before redaction and truncation).
    pub sha256: String,
}

impl StreamCapture {
    /// A capture keeping `max_bytes` in total under `mode`.
    pub fn new(max_bytes: u64, mode: QuotaMode) -> Self {
        let max = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let (head_cap, tail_cap) = match mode {
            QuotaMode::Truncate => (max - max / 2, max / 2),
            QuotaMode::Kill => (max, 0),
        };
        Self {
            mode,
            head_cap,
            tail_cap,
            // Reserved at the first chunk: most runs print nothing on one stream or both.
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            exceeded: false,
            spill: Spill::Off,
            hasher: Sha256::new(),
        }
    }

    /// Also writes every byte to `spill` (see [`crate::spill`]).
    pub fn with_spill(mut self, spill: crate::spill::SpillFile) -> Self {
        self.spill = Spill::On(spill);
        self
    }

    /// Records that the spill asked for was refused, and why (`spill_error`).
    pub fn with_spill_refused(mut self, why: String) -> Self {
        self.spill = Spill::Refused(why);
        self
    }

    /// Adds a chunk read from the stream.
    pub fn push(&mut self, chunk: &[u8]) -> Push {
        self.total += chunk.len() as u64;
        self.hasher.update(chunk);
        if let Spill::On(spill) = &mut self.spill {
            spill.write(chunk);
        }
        let room = self.head_cap - self.head.len();
        let (to_head, rest) = chunk.split_at(room.min(chunk.len()));
        if self.head.capacity() == 0 && !to_head.is_empty() {
            self.head
                .reserve(self.head_cap.min(HEAD_RESERVE_BYTES).max(to_head.len()));
        }
        self.head.extend_from_slice(to_head);
        match self.mode {
            QuotaMode::Truncate => {
                if !rest.is_empty() && self.tail_cap > 0 {
                    let rest = if rest.len() > self.tail_cap {
                        &rest[rest.len() - self.tail_cap..]
                    } else {
                        rest
                    };
                    let overflow = (self.tail.len() + rest.len()).saturating_sub(self.tail_cap);
                    self.tail.drain(..overflow);
                    self.tail.extend(rest);
                }
                Push::Continue
            }
            QuotaMode::Kill => {
                if !rest.is_empty() && !self.exceeded {
                    self.exceeded = true;
                    return Push::QuotaExceeded;
                }
                Push::Continue
            }
        }
    }

    /// Bytes seen so far.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Ends the capture.
    pub fn finish(self) -> Captured {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let omitted = self.total - kept;
        let (spill_path, spill_error) = match self.spill {
            Spill::On(file) => {
                let (path, error) = file.finish();
                (Some(path), error)
            }
            Spill::Refused(why) => (None, Some(why)),
            Spill::Off => (None, None),
        };
        Captured {
            head: self.head,
            tail: self.tail.into_iter().collect(),
            total_bytes: self.total,
            omitted_bytes: omitted,
            truncated: omitted > 0,
            spill_path,
            spill_error,
            sha256: tierbox_attest::jcs::hex(&self.hasher.finalize()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut c = StreamCapture::new(16, QuotaMode::Truncate);
        assert_eq!(c.push(b"hello"), Push::Continue);
        let out = c.finish();
        assert_eq!(out.head, b"hello");
        assert!(out.tail.is_empty());
        assert!(!out.truncated);
        assert_eq!(out.total_bytes, 5);
    }

    #[test]
    fn truncate_keeps_head_and_tail_and_counts_the_rest() {
        let mut c = StreamCapture::new(10, QuotaMode::Truncate);
        for chunk in [&b"0123456789"[..], b"abcdefghij", b"KLMNOPQRST"] {
            assert_eq!(c.push(chunk), Push::Continue);
        }
        let out = c.finish();
        assert_eq!(out.head, b"01234");
        assert_eq!(out.tail, b"PQRST");
        assert_eq!(out.total_bytes, 30);
        assert_eq!(out.omitted_bytes, 20);
        assert!(out.truncated);
    }

    #[test]
    fn truncate_tail_survives_many_small_chunks() {
        let mut c = StreamCapture::new(8, QuotaMode::Truncate);
        for b in 0u8..100 {
            c.push(&[b]);
        }
        let out = c.finish();
        assert_eq!(out.head, [0, 1, 2, 3]);
        assert_eq!(out.tail, [96, 97, 98, 99]);
        assert_eq!(out.omitted_bytes, 92);
    }

    #[test]
    fn kill_mode_reports_once_and_keeps_the_prefix() {
        let mut c = StreamCapture::new(4, QuotaMode::Kill);
        assert_eq!(c.push(b"abc"), Push::Continue);
        assert_eq!(c.push(b"defg"), Push::QuotaExceeded);
        assert_eq!(c.push(b"more"), Push::Continue);
        let out = c.finish();
        assert_eq!(out.head, b"abcd");
        assert_eq!(out.omitted_bytes, 7);
        assert!(out.truncated);
    }

    #[test]
    fn spill_writes_everything_up_to_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let spill = crate::spill::SpillDir::open(dir.path()).unwrap();
        let file = spill
            .create("run.stdout", 10, "limits.file_size_bytes", 1 << 20)
            .unwrap();
        let path = file.path().to_path_buf();
        let mut c = StreamCapture::new(4, QuotaMode::Truncate).with_spill(file);
        c.push(b"0123456789abc");
        let out = c.finish();
        assert_eq!(std::fs::read(&path).unwrap(), b"0123456789");
        let e = out.spill_error.unwrap();
        assert!(
            e.contains("first 10 bytes") && e.contains("limits.file_size_bytes"),
            "{e}"
        );
        assert_eq!(out.spill_path, Some(path));
    }
}
