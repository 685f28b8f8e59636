//! The interval tree's layout and a tiny classic-BPF assembler with forward labels.

use super::*;

/// Merge rules (sorted, non-overlapping `lo..=hi` ranges) into maximal intervals of equal
/// action covering all of `0..=u32::MAX`; gaps are allowed.
pub(super) fn partition(
    rules: impl Iterator<Item = (u32, u32, Action)>,
) -> Vec<(u32, u32, Action)> {
    let mut out: Vec<(u32, u32, Action)> = Vec::new();
    let mut push = |lo: u32, hi: u32, action: Action| match out.last_mut() {
        Some(last) if last.2 == action && last.1.checked_add(1) == Some(lo) => last.1 = hi,
        _ => out.push((lo, hi, action)),
    };
    let mut next = 0u32;
    let mut done = false;
    for (lo, hi, action) in rules {
        if lo > next {
            push(next, lo - 1, Action::Allow);
        }
        push(lo, hi, action);
        match hi.checked_add(1) {
            Some(n) => next = n,
            None => done = true,
        }
    }
    if !done {
        push(next, u32::MAX, Action::Allow);
    }
    out
}

/// Emit a binary search over `intervals` (sorted, contiguous, covering the accumulator's
/// range) and return the label where it starts: either the first emitted instruction or,
/// for a single interval, that interval's target directly.
pub(super) fn emit_tree(asm: &mut Asm, intervals: &[(u32, u32, Label)]) -> Label {
    match intervals {
        [] | [_] => intervals
            .first()
            .map_or_else(|| asm.label(), |&(_, _, t)| t),
        // [A][x][A] with a single-number middle: one JEQ instead of two JGEs.
        [(_, _, outer), (lo, hi, middle), (_, _, outer2)] if lo == hi && outer == outer2 => {
            let start = asm.label();
            asm.bind(start);
            asm.jump(JEQ, *lo, *middle, *outer);
            start
        }
        _ => {
            let mid = weighted_split(intervals);
            let start = asm.label();
            asm.bind(start);
            let node = asm.jump(JGE, intervals[mid].0, start, start);
            let left = emit_tree(asm, &intervals[..mid]);
            let right = emit_tree(asm, &intervals[mid..]);
            asm.patch(node, right, left);
            start
        }
    }
}

/// Syscall numbers weighted when balancing the search tree. The kernel's action cache is
/// built by evaluating the filter once per number in `0..NR_syscalls` (about 470 today)
/// at attach time, so the attach cost is the sum of path lengths over those numbers.
pub(super) const NR_WEIGHT_SPAN: u32 = 512;

/// How many of the cache-evaluated numbers an interval covers (at least 1).
pub(super) fn interval_weight(lo: u32, hi: u32) -> u64 {
    if lo >= NR_WEIGHT_SPAN {
        1
    } else {
        u64::from(hi.min(NR_WEIGHT_SPAN - 1) - lo + 1)
    }
}

/// The split index (1..len) that best balances the intervals' weights, so that wide
/// allowed ranges sit near the root and the summed path length stays small.
pub(super) fn weighted_split(intervals: &[(u32, u32, Label)]) -> usize {
    let total: u64 = intervals
        .iter()
        .map(|&(lo, hi, _)| interval_weight(lo, hi))
        .sum();
    let mut best = (u64::MAX, intervals.len() / 2);
    let mut left = 0u64;
    for (i, &(lo, hi, _)) in intervals.iter().enumerate().take(intervals.len() - 1) {
        left += interval_weight(lo, hi);
        let imbalance = left.abs_diff(total - left);
        if imbalance < best.0 {
            best = (imbalance, i + 1);
        }
    }
    best.1
}

// ---------------------------------------------------------------------------------------
// A tiny classic-BPF assembler with forward labels.
// ---------------------------------------------------------------------------------------

/// `BPF_JMP | BPF_JEQ | BPF_K`.
pub(super) const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
/// `BPF_JMP | BPF_JGE | BPF_K`.
pub(super) const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
/// `BPF_JMP | BPF_JSET | BPF_K`.
pub(super) const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
/// `BPF_LD | BPF_W | BPF_ABS`.
pub(super) const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
/// `BPF_ALU | BPF_AND | BPF_K`.
pub(super) const ALU_AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;

/// `BPF_RET | BPF_K`.
pub(super) const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// A forward jump target, bound to an instruction index later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Label(usize);

/// An instruction whose jump targets are still labels.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingInsn {
    code: u16,
    k: u32,
    jt: Option<Label>,
    jf: Option<Label>,
}

#[derive(Debug, Default)]
pub(super) struct Asm {
    insns: Vec<PendingInsn>,
    /// Instruction index of each label, once bound.
    bound: Vec<Option<usize>>,
    /// Whether a jump references each label.
    used: Vec<bool>,
}

impl Asm {
    pub(super) fn label(&mut self) -> Label {
        self.bound.push(None);
        self.used.push(false);
        Label(self.bound.len() - 1)
    }

    /// Bind `label` to the next instruction.
    pub(super) fn bind(&mut self, label: Label) {
        if let Some(slot) = self.bound.get_mut(label.0) {
            *slot = Some(self.insns.len());
        }
    }

    pub(super) fn load(&mut self, offset: u32) {
        self.insns.push(PendingInsn {
            code: LD_W_ABS,
            k: offset,
            jt: None,
            jf: None,
        });
    }

    /// `A &= k`.
    pub(super) fn and(&mut self, k: u32) {
        self.insns.push(PendingInsn {
            code: ALU_AND_K,
            k,
            jt: None,
            jf: None,
        });
    }

    /// A conditional jump; returns its index for [`Asm::patch`].
    pub(super) fn jump(&mut self, code: u16, k: u32, jt: Label, jf: Label) -> usize {
        self.mark(jt);
        self.mark(jf);
        self.insns.push(PendingInsn {
            code,
            k,
            jt: Some(jt),
            jf: Some(jf),
        });
        self.insns.len() - 1
    }

    pub(super) fn patch(&mut self, index: usize, jt: Label, jf: Label) {
        self.mark(jt);
        self.mark(jf);
        if let Some(insn) = self.insns.get_mut(index) {
            insn.jt = Some(jt);
            insn.jf = Some(jf);
        }
    }

    pub(super) fn mark(&mut self, label: Label) {
        if let Some(u) = self.used.get_mut(label.0) {
            *u = true;
        }
    }

    /// Whether a jump references `label`.
    pub(super) fn is_used(&self, label: Label) -> bool {
        self.used.get(label.0).copied().unwrap_or(false)
    }

    /// Emit `RET k` bound to `label` if any jump targets it.
    pub(super) fn ret_if_used(&mut self, label: Label, k: u32) {
        if self.is_used(label) {
            self.bind(label);
            self.insns.push(PendingInsn {
                code: RET_K,
                k,
                jt: None,
                jf: None,
            });
        }
    }

    /// Resolve labels into relative offsets.
    pub(super) fn finish(self) -> Result<Vec<libc::sock_filter>, SeccompError> {
        if self.insns.len() > BPF_MAXINSNS {
            return Err(SeccompError::TooLong {
                len: self.insns.len(),
            });
        }
        let resolve = |from: usize, label: Option<Label>| -> Result<u8, SeccompError> {
            let Some(label) = label else { return Ok(0) };
            let to = self
                .bound
                .get(label.0)
                .copied()
                .flatten()
                .unwrap_or(usize::MAX);
            to.checked_sub(from + 1)
                .and_then(|off| u8::try_from(off).ok())
                .ok_or(SeccompError::JumpTooFar { from, to })
        };
        self.insns
            .iter()
            .enumerate()
            .map(|(i, insn)| {
                Ok(libc::sock_filter {
                    code: insn.code,
                    jt: resolve(i, insn.jt)?,
                    jf: resolve(i, insn.jf)?,
                    k: insn.k,
                })
            })
            .collect()
    }
}
