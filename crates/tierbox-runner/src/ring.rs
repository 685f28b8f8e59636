//! The output of a background process: the most recent bytes of a stream, addressed by
//! absolute byte offset, so a caller can poll "everything since offset N" and learn how
//! much it missed when it polls too rarely. The reader never blocks the process: old
//! bytes are dropped, never the new ones.

use std::collections::VecDeque;

use crate::capture::Push;
use crate::supervisor::ChunkSink;

/// Bytes kept per stream of a background process (1 MiB). A chatty server never blocks
/// on a full pipe and never dies of SIGPIPE: the reader drains continuously and keeps the
/// last `RING_BYTES`.
pub const RING_BYTES: usize = 1024 * 1024;

/// One read from a ring.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutputChunk {
    /// Absolute offset of the first byte of `data` (the requested offset, or later when
    /// the bytes in between were already dropped).
    pub offset: u64,
    /// The bytes, as text (invalid UTF-8 replaced with U+FFFD).
    pub text: String,
    /// Offset to ask for next time.
    pub next_offset: u64,
    /// Bytes between the requested offset and `offset` that were dropped from the ring.
    pub missed_bytes: u64,
    /// Every byte the stream has produced so far.
    pub total_bytes: u64,
}

/// A bounded window over a stream.
#[derive(Debug)]
pub struct OutputRing {
    buf: VecDeque<u8>,
    cap: usize,
    /// Absolute offset of `buf[0]`.
    start: u64,
}

impl OutputRing {
    /// A ring keeping the last `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            buf: VecDeque::with_capacity(cap.min(64 * 1024)),
            cap,
            start: 0,
        }
    }

    /// Appends a chunk, dropping the oldest bytes past the capacity.
    pub fn push(&mut self, chunk: &[u8]) {
        let keep = if chunk.len() > self.cap {
            self.start += (self.buf.len() + chunk.len() - self.cap) as u64;
            self.buf.clear();
            &chunk[chunk.len() - self.cap..]
        } else {
            let overflow = (self.buf.len() + chunk.len()).saturating_sub(self.cap);
            self.buf.drain(..overflow);
            self.start += overflow as u64;
            chunk
        };
        self.buf.extend(keep);
    }

    /// Every byte pushed so far.
    pub fn total(&self) -> u64 {
        self.start + self.buf.len() as u64
    }

    /// Up to `max` bytes from absolute `offset` on.
    pub fn read(&self, offset: u64, max: usize) -> OutputChunk {
        let total = self.total();
        let from = offset.clamp(self.start, total);
        let skip = usize::try_from(from - self.start).unwrap_or(usize::MAX);
        let bytes: Vec<u8> = self.buf.iter().skip(skip).take(max).copied().collect();
        let next = from + bytes.len() as u64;
        OutputChunk {
            offset: from,
            text: String::from_utf8_lossy(&bytes).into_owned(),
            next_offset: next,
            missed_bytes: from.saturating_sub(offset.min(total)),
            total_bytes: total,
        }
    }
}

impl ChunkSink for std::sync::Mutex<OutputRing> {
    fn push_chunk(&self, chunk: &[u8]) -> Push {
        if let Ok(mut ring) = self.lock() {
            ring.push(chunk);
        }
        Push::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_by_offset_and_reports_what_was_dropped() {
        let mut r = OutputRing::new(8);
        r.push(b"abcdef");
        let c = r.read(0, 100);
        assert_eq!(
            (c.offset, c.text.as_str(), c.next_offset, c.missed_bytes),
            (0, "abcdef", 6, 0)
        );
        r.push(b"ghijk");
        assert_eq!(r.total(), 11);
        let c = r.read(0, 100);
        assert_eq!(
            (c.offset, c.text.as_str(), c.missed_bytes),
            (3, "defghijk", 3)
        );
        let c = r.read(9, 1);
        assert_eq!((c.offset, c.text.as_str(), c.next_offset), (9, "j", 10));
        let c = r.read(11, 10);
        assert_eq!(
            (c.text.as_str(), c.next_offset, c.missed_bytes),
            ("", 11, 0)
        );
        r.push(b"0123456789XYZ");
        let c = r.read(11, 100);
        assert_eq!(
            (c.offset, c.text.as_str(), c.missed_bytes, c.total_bytes),
            (16, "56789XYZ", 5, 24)
        );
        let c = r.read(100, 10);
        assert_eq!((c.offset, c.text.as_str(), c.next_offset), (24, "", 24));
    }
}
