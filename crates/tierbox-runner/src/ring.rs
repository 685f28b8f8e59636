//! The output of a background process: the most recent bytes of a stream, addressed by
//! absolute byte offset, so a caller can poll "everything since offset N" and learn how
//! much it missed when it polls too rarely. The reader never blocks the process: old
//! bytes are dropped, never the new ones.

use std::collections::VecDeque;

use std::sync::{Arc, Mutex};

use tierbox_redact::Redactor;
use tierbox_redact::stream::StreamRedactor;

use crate::capture::Push;
use crate::supervisor::ChunkSink;

/// Bytes kept per stream of a background process (1 MiB). A chatty server never blocks
/// on a full pipe and never dies of SIGPIPE: the reader drains continuously and keeps the
/// last `RING_BYTES`.
pub const RING_BYTES: usize = 1024 * 1024;

/// One read from a ring.
///
/// The bytes read are carried as `text`, their UTF-8 view, and — only when that view is
/// lossy — `bytes_base64`, the bytes exactly ([`crate::wire`]; [`OutputChunk::bytes`]).
/// A read that stops before the end of what the ring holds never ends inside a UTF-8
/// character (`next_offset` is then before it), so reading on from `next_offset` splits
/// no character; a read from an offset inside one (after `missed_bytes`) starts with
/// its continuation bytes, which only `bytes_base64` carries exactly.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutputChunk {
    /// Absolute offset of the first byte read (the requested offset, or later when the
    /// bytes in between were already dropped).
    pub offset: u64,
    /// The bytes, as text (invalid UTF-8 replaced with U+FFFD).
    pub text: String,
    /// The bytes exactly (standard base64), present exactly when `text` is lossy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_base64: Option<String>,
    /// Offset to ask for next time.
    pub next_offset: u64,
    /// Bytes between the requested offset and `offset` that were dropped from the ring.
    pub missed_bytes: u64,
    /// Every byte the stream has produced so far.
    pub total_bytes: u64,
    /// Why the stream's spill file (`background.spill_bytes`) holds less than asked, or
    /// is missing: reads from offsets that left the ring then miss those bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spill_error: Option<String>,
}

impl OutputChunk {
    /// The bytes read: `bytes_base64` decoded when present, else `text`.
    pub fn bytes(&self) -> Result<std::borrow::Cow<'_, [u8]>, crate::wire::WireError> {
        crate::wire::decode(&self.text, self.bytes_base64.as_deref())
    }

    /// A chunk of `bytes` read at `offset`.
    fn of(offset: u64, bytes: Vec<u8>, missed_bytes: u64, total_bytes: u64) -> Self {
        let next_offset = offset + bytes.len() as u64;
        let w = crate::wire::encode_owned(bytes);
        Self {
            offset,
            text: w.text,
            bytes_base64: w.bytes_base64,
            next_offset,
            missed_bytes,
            total_bytes,
            spill_error: None,
        }
    }
}

/// `bytes` read up to a limit, with more after them: without an incomplete UTF-8
/// character at the end (unless that is all there is), which the next read starts with.
fn without_split_character(mut bytes: Vec<u8>) -> Vec<u8> {
    let keep = bytes.len() - tierbox_redact::stream::incomplete_utf8_suffix(&bytes);
    if keep > 0 {
        bytes.truncate(keep);
    }
    bytes
}

/// A bounded window over a stream.
#[derive(Debug)]
pub struct OutputRing {
    buf: VecDeque<u8>,
    cap: usize,
    /// Absolute offset of `buf[0]`.
    start: u64,
    spill: Option<Spill>,
    /// SHA-256 of every byte pushed (the attestation's raw output digest).
    hasher: sha2::Sha256,
}

/// The first bytes of a stream, kept on disk (offsets `0..written`), or why not.
#[derive(Debug)]
enum Spill {
    /// The file ([`crate::spill`]; removed with the ring).
    On(crate::spill::SpillFile),
    /// It was refused (the cap on spill files): why.
    Refused(String),
}

impl OutputRing {
    /// A ring keeping the last `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            buf: VecDeque::with_capacity(cap.min(64 * 1024)),
            cap,
            start: 0,
            spill: None,
            hasher: sha2::Sha256::default(),
        }
    }

    /// Also keeps the first bytes of the stream in `spill` (as many as it takes: its
    /// limit is `background.spill_bytes`), so reads from offsets that have left the ring
    /// still succeed. The file goes with the ring.
    pub fn with_spill(mut self, spill: crate::spill::SpillFile) -> Self {
        self.spill = Some(Spill::On(spill.remove_on_drop()));
        self
    }

    /// Records that the spill asked for was refused, and why (each read's `spill_error`).
    pub fn with_spill_refused(mut self, why: String) -> Self {
        self.spill = Some(Spill::Refused(why));
        self
    }

    /// Appends a chunk, dropping the oldest bytes past the capacity.
    pub fn push(&mut self, chunk: &[u8]) {
        self.hash(chunk);
        self.store(chunk);
    }

    /// Adds the stream's raw bytes to its digest ([`OutputRing::sha256`]) without keeping
    /// them: with [`OutputRing::store`], for a stream whose reads show it redacted.
    pub fn hash(&mut self, raw: &[u8]) {
        sha2::Digest::update(&mut self.hasher, raw);
    }

    /// Keeps `shown` (the spilled head and the ring), dropping the oldest bytes past the
    /// capacity; offsets count these bytes.
    pub fn store(&mut self, shown: &[u8]) {
        if let Some(Spill::On(sp)) = &mut self.spill {
            // Up to its limit and the cap; a full disk ends the spill, never the process.
            sp.write(shown);
        }
        let keep = if shown.len() > self.cap {
            self.start += (self.buf.len() + shown.len() - self.cap) as u64;
            self.buf.clear();
            &shown[shown.len() - self.cap..]
        } else {
            let overflow = (self.buf.len() + shown.len()).saturating_sub(self.cap);
            self.buf.drain(..overflow);
            self.start += overflow as u64;
            shown
        };
        self.buf.extend(keep);
    }

    /// Deletes the spill file now (reads from offsets before the ring then report them
    /// as missed). Called when the record is dropped, so the file never outlives it even
    /// while a task still holds the ring.
    pub fn discard_spill(&mut self) {
        self.spill = None;
    }

    /// Lowercase hex SHA-256 of every byte pushed (or hashed) so far.
    pub fn sha256(&self) -> String {
        tierbox_attest::jcs::hex(&sha2::Digest::finalize(self.hasher.clone()))
    }

    /// The bytes still in the ring.
    pub fn retained(&self) -> Vec<u8> {
        let (a, b) = self.buf.as_slices();
        [a, b].concat()
    }

    /// Every byte pushed so far.
    pub fn total(&self) -> u64 {
        self.start + self.buf.len() as u64
    }

    /// Up to `max` bytes from absolute `offset` on: from the ring, or from the spill file
    /// for offsets that have left the ring but are within the spilled head.
    pub fn read(&self, offset: u64, max: usize) -> OutputChunk {
        let total = self.total();
        let spill_error = match &self.spill {
            Some(Spill::On(sp)) => sp.error().map(str::to_owned),
            Some(Spill::Refused(why)) => Some(why.clone()),
            None => None,
        };
        if let Some(Spill::On(sp)) = &self.spill
            && offset < self.start
            && offset < sp.written()
        {
            let len = usize::try_from((sp.written() - offset).min(max as u64)).unwrap_or(max);
            let mut bytes = vec![0u8; len];
            if sp.read_exact_at(&mut bytes, offset).is_ok() {
                if offset + (len as u64) < total {
                    bytes = without_split_character(bytes);
                }
                return OutputChunk {
                    spill_error,
                    ..OutputChunk::of(offset, bytes, 0, total)
                };
            }
        }
        let from = offset.clamp(self.start, total);
        let skip = usize::try_from(from - self.start).unwrap_or(usize::MAX);
        let mut bytes: Vec<u8> = self.buf.iter().skip(skip).take(max).copied().collect();
        if from + (bytes.len() as u64) < total {
            bytes = without_split_character(bytes);
        }
        OutputChunk {
            spill_error,
            ..OutputChunk::of(from, bytes, from.saturating_sub(offset.min(total)), total)
        }
    }
}

/// A background stream as its reads show it: every byte goes into the ring's digest, and
/// the output — redacted piece by piece with the run's rules ([`StreamRedactor`]) when the run
/// redacts — into the ring. A read at any offset, of any size, then returns only redacted
/// text, and the spill file on disk holds no secret. Without redaction the bytes are kept
/// as they come.
pub(crate) struct ShownRing {
    ring: Arc<Mutex<OutputRing>>,
    redaction: Option<(Redactor, Mutex<StreamRedactor>)>,
}

impl ShownRing {
    pub(crate) fn new(ring: Arc<Mutex<OutputRing>>, redactor: Option<Redactor>) -> Self {
        Self {
            ring,
            redaction: redactor.map(|r| (r, Mutex::new(StreamRedactor::default()))),
        }
    }

    /// The stream has ended: keeps what is left of its last piece.
    pub(crate) fn finish(&self) {
        self.store_with(|pieces, redactor| pieces.finish(Some(redactor)));
    }

    /// The producer has nothing more for now (a terminal waiting for input): what is
    /// pending is kept up to its last whitespace ([`StreamRedactor::settle`]), so a
    /// prompt without a newline is shown while a word still being written, which could be
    /// the start of a secret, waits for its end or for [`Self::release`]. Whether such a
    /// word is held back.
    pub(crate) fn settle(&self) -> bool {
        self.store_with(|pieces, redactor| pieces.settle(Some(redactor)));
        self.holding()
    }

    /// The producer stayed quiet with a word held back (`crate::term::TERM_HOLD`): the
    /// word is redacted as it stands and kept. Whether anything was kept.
    pub(crate) fn release(&self) -> bool {
        let held = self.holding();
        self.store_with(|pieces, redactor| pieces.finish(Some(redactor)));
        held
    }

    /// Whether bytes are pending in the redactor.
    fn holding(&self) -> bool {
        self.redaction
            .as_ref()
            .and_then(|(_, pieces)| pieces.lock().ok().map(|p| p.pending() > 0))
            .unwrap_or(false)
    }

    /// Keeps the piece `take` cuts from the pending bytes, when the run redacts.
    fn store_with(&self, take: impl FnOnce(&mut StreamRedactor, &Redactor) -> Option<Vec<u8>>) {
        if let Some((redactor, pieces)) = &self.redaction
            && let Ok(mut pieces) = pieces.lock()
            && let Some(bytes) = take(&mut pieces, redactor)
            && let Ok(mut ring) = self.ring.lock()
        {
            ring.store(&bytes);
        }
    }
}

impl ChunkSink for ShownRing {
    fn push_chunk(&self, chunk: &[u8]) -> Push {
        match &self.redaction {
            None => self.ring.push_chunk(chunk),
            Some((redactor, pieces)) => {
                let Ok(mut pieces) = pieces.lock() else {
                    return Push::Continue;
                };
                let piece = pieces.push(chunk, false, Some(redactor));
                if let Ok(mut ring) = self.ring.lock() {
                    ring.hash(chunk);
                    if let Some(bytes) = piece {
                        ring.store(&bytes);
                    }
                }
                Push::Continue
            }
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
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_spill_file_serves_offsets_that_left_the_ring() {
        let dir = tempfile::tempdir().unwrap();
        let spill = crate::spill::SpillDir::open(dir.path()).unwrap();
        let file = spill
            .create("bg.stdout", 6, "background.spill_bytes", 1 << 20)
            .unwrap();
        let path = file.path().to_path_buf();
        let mut r = OutputRing::new(4).with_spill(file);
        r.push(b"abcdefghij");
        // 0..6 from the spill, 6 is neither spilled nor in the ring (6..10 is), 6..10 ring.
        let c = r.read(0, 4);
        assert_eq!(
            (c.text.as_str(), c.next_offset, c.missed_bytes),
            ("abcd", 4, 0)
        );
        let c = r.read(c.next_offset, 100);
        assert_eq!((c.text.as_str(), c.next_offset), ("ef", 6));
        let c = r.read(c.next_offset, 100);
        assert_eq!((c.offset, c.text.as_str(), c.missed_bytes), (6, "ghij", 0));
        r.push(b"KLM");
        let c = r.read(6, 100);
        assert_eq!((c.offset, c.text.as_str(), c.missed_bytes), (9, "jKLM", 3));
        assert_eq!(std::fs::read(&path).unwrap(), b"abcdef");
        let e = c.spill_error.unwrap();
        assert!(
            e.contains("first 6 bytes") && e.contains("background.spill_bytes"),
            "{e}"
        );
        // Exclusive creation: an existing file (or a planted symlink) is never reused.
        assert!(
            spill
                .create("bg.stdout", 6, "background.spill_bytes", 1 << 20)
                .is_err()
        );
        drop(r);
        assert!(!path.exists(), "the spill file goes with the ring");
    }

    /// Regression: a read was the lossy text of its bytes, so a background process's
    /// binary output came back with U+FFFD for every invalid byte, and a read that ended
    /// inside a character showed it as two replacement characters.
    #[test]
    fn reads_are_byte_exact_and_never_end_inside_a_character() {
        let mut r = OutputRing::new(64);
        r.push(b"\xff\x00caf\xc3\xa9!");
        let c = r.read(0, 6);
        assert_eq!(c.bytes().unwrap().as_ref(), b"\xff\x00caf");
        assert_eq!((c.next_offset, c.bytes_base64.is_some()), (5, true));
        let c = r.read(c.next_offset, 100);
        assert_eq!((c.text.as_str(), c.bytes_base64.as_deref()), ("é!", None));
        assert_eq!(r.retained(), b"\xff\x00caf\xc3\xa9!");
    }

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
