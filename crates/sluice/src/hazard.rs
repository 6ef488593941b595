//! Hazard tracking: decides where a global memory barrier is needed between dispatches.
//!
//! Every dispatch declares its [`Access`]es: a buffer id, that buffer's
//! [`ResourceClass`], a half-open byte range `[offset, offset + len)` and whether the
//! dispatch reads or writes it (a `read_write` binding counts as a write).
//!
//! The encoder keeps an *open concurrent group*: the dispatches recorded since the last
//! global memory barrier, which the GPU may run in any order or at the same time. A new
//! dispatch may join the group iff none of its accesses conflicts with an access already
//! in the group. Two accesses conflict when they name the same buffer, their byte ranges
//! overlap (a zero-length range overlaps nothing; ranges that merely touch do not
//! overlap) and at least one of them writes: read-after-write, write-after-read or
//! write-after-write. Read-after-read never conflicts.
//!
//! A dispatch never conflicts with itself: a kernel may read and write the same bytes.
//! Accesses to a [`ResourceClass::ReadOnlyWeight`] buffer never conflict, because a
//! weight is never written by the GPU after upload; declaring a write to one is an
//! [`Error::WriteToReadOnlyWeight`].
//!
//! When a dispatch conflicts, the caller emits one global barrier before it and the group
//! restarts with exactly that dispatch. This greedy rule is minimal for the given order:
//! every barrier separates a dispatch from an earlier one it really depends on.
//!
//! The module knows nothing about Vulkan; it is pure bookkeeping on integers. The group
//! is stored as a flat list of byte spans that is reused across groups (no allocation
//! per dispatch once warm); weight accesses are not stored, and a new span is merged into
//! an existing same-buffer, same-kind span it touches or overlaps, or dropped when an
//! existing span already implies every conflict it could cause.

use crate::class::ResourceClass;
use crate::error::{Error, Result};

/// Whether a dispatch reads or writes a range. A `read_write` binding is declared as
/// [`AccessKind::Write`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// The dispatch only reads the range.
    Read,
    /// The dispatch may write (and read) the range.
    Write,
}

/// One byte range of one buffer that a dispatch reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    /// The buffer's id (unique per buffer for the runtime's lifetime).
    pub buffer: u64,
    /// The buffer's class, fixed when the buffer was made.
    pub class: ResourceClass,
    /// First byte of the range.
    pub offset: u64,
    /// Length of the range in bytes; a zero-length range touches nothing.
    pub len: u64,
    /// Read or write.
    pub kind: AccessKind,
}

impl Access {
    /// A read of `len` bytes at `offset` of buffer `buffer`.
    pub const fn read(buffer: u64, class: ResourceClass, offset: u64, len: u64) -> Self {
        Access {
            buffer,
            class,
            offset,
            len,
            kind: AccessKind::Read,
        }
    }

    /// A write (or read-write) of `len` bytes at `offset` of buffer `buffer`.
    pub const fn write(buffer: u64, class: ResourceClass, offset: u64, len: u64) -> Self {
        Access {
            buffer,
            class,
            offset,
            len,
            kind: AccessKind::Write,
        }
    }

    /// Whether the two accesses name the same buffer and share at least one byte,
    /// whatever their kinds and classes.
    pub fn overlaps(&self, other: &Access) -> bool {
        self.buffer == other.buffer
            && ranges_overlap(self.offset, self.len, other.offset, other.len)
    }

    fn is_write(&self) -> bool {
        self.kind == AccessKind::Write
    }

    fn is_weight(&self) -> bool {
        self.class == ResourceClass::ReadOnlyWeight
    }
}

/// Why two accesses must be separated by a barrier, named from the later access's view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HazardKind {
    /// The later access reads bytes the earlier one writes.
    ReadAfterWrite,
    /// The later access writes bytes the earlier one reads.
    WriteAfterRead,
    /// Both write the same bytes.
    WriteAfterWrite,
}

/// The hazard between `earlier` (already in the group) and `later` (the new access), or
/// `None` when they may run concurrently: different buffers, disjoint ranges, both reads,
/// or either one on a [`ResourceClass::ReadOnlyWeight`] buffer.
pub fn conflict(earlier: &Access, later: &Access) -> Option<HazardKind> {
    if earlier.is_weight() || later.is_weight() || !earlier.overlaps(later) {
        return None;
    }
    hazard_kind(earlier.is_write(), later.is_write())
}

/// Where a dispatch goes relative to the open concurrent group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// No conflict: the dispatch joins the open group, no barrier is needed.
    JoinGroup,
    /// A conflict: the caller emits one global memory barrier before the dispatch, which
    /// then starts a new group on its own.
    BarrierBefore,
}

/// The open concurrent group of an encoder: what the dispatches since the last global
/// barrier access, and how many there are.
#[derive(Clone, Debug, Default)]
pub struct HazardTracker {
    /// Non-weight, non-empty spans accessed by the group (possibly merged).
    spans: Vec<Span>,
    /// Dispatches in the group.
    dispatches: usize,
}

/// A stored span of the group; `len > 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    buffer: u64,
    offset: u64,
    len: u64,
    write: bool,
}

impl HazardTracker {
    /// An empty group.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decides where the dispatch `kernel` with `accesses` goes and records it in the
    /// group (which restarts with it on [`Placement::BarrierBefore`]). A write declared
    /// on a [`ResourceClass::ReadOnlyWeight`] buffer is an
    /// [`Error::WriteToReadOnlyWeight`], and then nothing is recorded.
    pub fn place(&mut self, kernel: &str, accesses: &[Access]) -> Result<Placement> {
        if let Some(a) = accesses.iter().find(|a| a.is_weight() && a.is_write()) {
            return Err(Error::WriteToReadOnlyWeight {
                kernel: kernel.to_string(),
                buffer: a.buffer,
            });
        }
        let placement = if self.conflicts_with_group(accesses).is_some() {
            self.spans.clear();
            self.dispatches = 0;
            Placement::BarrierBefore
        } else {
            Placement::JoinGroup
        };
        for a in accesses {
            self.record(a);
        }
        self.dispatches += 1;
        Ok(placement)
    }

    /// The first hazard between `accesses` and the open group, or `None` when a
    /// dispatch with these accesses could join it. Records nothing.
    pub fn conflicts_with_group(&self, accesses: &[Access]) -> Option<HazardKind> {
        if self.spans.is_empty() {
            return None;
        }
        for a in accesses {
            if a.len == 0 || a.is_weight() {
                continue;
            }
            let later_write = a.is_write();
            for s in &self.spans {
                if s.buffer == a.buffer
                    && (s.write || later_write)
                    && ranges_overlap(s.offset, s.len, a.offset, a.len)
                {
                    return hazard_kind(s.write, later_write);
                }
            }
        }
        None
    }

    /// Records that the caller emitted a global barrier for another reason (a transfer,
    /// a submit): the group becomes empty.
    pub fn barrier(&mut self) {
        self.spans.clear();
        self.dispatches = 0;
    }

    /// How many dispatches the open group holds.
    pub fn group_dispatches(&self) -> usize {
        self.dispatches
    }

    /// Adds one access of a dispatch that joins the group.
    fn record(&mut self, a: &Access) {
        if a.len == 0 || a.is_weight() {
            return;
        }
        let write = a.is_write();
        for s in self.spans.iter_mut() {
            if s.buffer != a.buffer {
                continue;
            }
            // Redundant: any later access conflicting with `a` also conflicts with `s`.
            if (s.write || !write) && contains(s.offset, s.len, a.offset, a.len) {
                return;
            }
            if s.write == write {
                if let Some((offset, len)) = union_if_adjacent(s.offset, s.len, a.offset, a.len) {
                    s.offset = offset;
                    s.len = len;
                    return;
                }
            }
        }
        self.spans.push(Span {
            buffer: a.buffer,
            offset: a.offset,
            len: a.len,
            write,
        });
    }
}

/// The hazard kind for an earlier and a later access to shared bytes.
fn hazard_kind(earlier_write: bool, later_write: bool) -> Option<HazardKind> {
    match (earlier_write, later_write) {
        (true, false) => Some(HazardKind::ReadAfterWrite),
        (false, true) => Some(HazardKind::WriteAfterRead),
        (true, true) => Some(HazardKind::WriteAfterWrite),
        (false, false) => None,
    }
}

/// Whether `[ao, ao+al)` and `[bo, bo+bl)` share a byte; exact for all u64 values.
#[inline]
fn ranges_overlap(ao: u64, al: u64, bo: u64, bl: u64) -> bool {
    if al == 0 || bl == 0 {
        return false;
    }
    if ao >= bo {
        ao - bo < bl
    } else {
        bo - ao < al
    }
}

/// Whether `[o, o+l)` lies inside `[oo, oo+ol)`; exact for all u64 values.
#[inline]
fn contains(oo: u64, ol: u64, o: u64, l: u64) -> bool {
    o >= oo && o - oo <= ol && l <= ol - (o - oo)
}

/// The union of two ranges that overlap or touch, as (offset, len); `None` when they are
/// apart or the union's end does not fit in u64.
#[inline]
fn union_if_adjacent(ao: u64, al: u64, bo: u64, bl: u64) -> Option<(u64, u64)> {
    let adjacent = if ao >= bo {
        ao - bo <= bl
    } else {
        bo - ao <= al
    };
    if !adjacent {
        return None;
    }
    let start = ao.min(bo);
    let end = ao.checked_add(al)?.max(bo.checked_add(bl)?);
    Some((start, end - start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const G: ResourceClass = ResourceClass::Generic;
    const W: ResourceClass = ResourceClass::ReadOnlyWeight;

    fn place(t: &mut HazardTracker, acc: &[Access]) -> Placement {
        t.place("k", acc).expect("valid dispatch")
    }

    #[test]
    fn raw_detected() {
        let mut t = HazardTracker::new();
        assert_eq!(
            place(&mut t, &[Access::write(1, G, 0, 64)]),
            Placement::JoinGroup
        );
        let next = [Access::read(1, G, 32, 64)];
        assert_eq!(
            t.conflicts_with_group(&next),
            Some(HazardKind::ReadAfterWrite)
        );
        assert_eq!(place(&mut t, &next), Placement::BarrierBefore);
        assert_eq!(t.group_dispatches(), 1);
    }

    #[test]
    fn war_detected() {
        let mut t = HazardTracker::new();
        place(&mut t, &[Access::read(1, G, 0, 64)]);
        let next = [Access::write(1, G, 63, 1)];
        assert_eq!(
            t.conflicts_with_group(&next),
            Some(HazardKind::WriteAfterRead)
        );
        assert_eq!(place(&mut t, &next), Placement::BarrierBefore);
    }

    #[test]
    fn waw_detected() {
        let mut t = HazardTracker::new();
        place(&mut t, &[Access::write(1, G, 16, 16)]);
        let next = [Access::write(1, G, 0, 17)];
        assert_eq!(
            t.conflicts_with_group(&next),
            Some(HazardKind::WriteAfterWrite)
        );
        assert_eq!(place(&mut t, &next), Placement::BarrierBefore);
    }

    #[test]
    fn conflict_names_the_kind() {
        let r = Access::read(1, G, 0, 8);
        let w = Access::write(1, G, 4, 8);
        assert_eq!(conflict(&w, &r), Some(HazardKind::ReadAfterWrite));
        assert_eq!(conflict(&r, &w), Some(HazardKind::WriteAfterRead));
        assert_eq!(conflict(&w, &w), Some(HazardKind::WriteAfterWrite));
        assert_eq!(conflict(&r, &r), None);
        assert_eq!(conflict(&w, &Access::write(2, G, 4, 8)), None);
    }

    #[test]
    fn read_after_read_joins() {
        let mut t = HazardTracker::new();
        place(&mut t, &[Access::read(1, G, 0, 64)]);
        assert_eq!(
            place(&mut t, &[Access::read(1, G, 0, 64)]),
            Placement::JoinGroup
        );
        assert_eq!(
            place(&mut t, &[Access::read(1, G, 8, 8)]),
            Placement::JoinGroup
        );
        assert_eq!(t.group_dispatches(), 3);
    }

    #[test]
    fn disjoint_ranges_of_one_buffer_join() {
        let mut t = HazardTracker::new();
        place(&mut t, &[Access::write(1, G, 0, 16)]);
        assert_eq!(
            place(&mut t, &[Access::write(1, G, 32, 16)]),
            Placement::JoinGroup
        );
        assert_eq!(
            place(&mut t, &[Access::read(1, G, 100, 16)]),
            Placement::JoinGroup
        );
        assert_eq!(
            place(&mut t, &[Access::write(2, G, 0, 16)]),
            Placement::JoinGroup
        );
        assert_eq!(t.group_dispatches(), 4);
    }

    #[test]
    fn touching_ranges_join() {
        let mut t = HazardTracker::new();
        place(&mut t, &[Access::write(1, G, 16, 16)]);
        assert_eq!(
            place(&mut t, &[Access::write(1, G, 32, 16)]),
            Placement::JoinGroup
        );
        assert_eq!(
            place(&mut t, &[Access::read(1, G, 0, 16)]),
            Placement::JoinGroup
        );
        assert_eq!(
            place(&mut t, &[Access::read(1, G, 48, 1)]),
            Placement::JoinGroup
        );
        // The merged write span [16, 48) still conflicts inside.
        assert_eq!(
            place(&mut t, &[Access::read(1, G, 47, 1)]),
            Placement::BarrierBefore
        );
    }

    #[test]
    fn zero_length_never_conflicts() {
        let mut t = HazardTracker::new();
        place(&mut t, &[Access::write(1, G, 0, 64)]);
        assert_eq!(
            place(&mut t, &[Access::write(1, G, 8, 0)]),
            Placement::JoinGroup
        );
        place(&mut t, &[Access::write(2, G, 8, 0)]);
        assert_eq!(
            place(&mut t, &[Access::write(2, G, 0, 64)]),
            Placement::JoinGroup
        );
        assert!(!Access::read(1, G, 8, 0).overlaps(&Access::read(1, G, 8, 0)));
        assert_eq!(
            conflict(&Access::write(1, G, 0, 64), &Access::write(1, G, 8, 0)),
            None
        );
    }

    #[test]
    fn weight_read_never_conflicts() {
        let mut t = HazardTracker::new();
        for _ in 0..5 {
            let acc = [Access::read(7, W, 0, 1 << 20), Access::write(1, G, 0, 64)];
            assert_eq!(t.place("matvec", &acc).unwrap(), Placement::JoinGroup);
            t.barrier();
        }
        // Even after a rejected write to the weight, and alongside writes elsewhere.
        assert!(t.place("bad", &[Access::write(7, W, 0, 4)]).is_err());
        place(
            &mut t,
            &[Access::write(1, G, 0, 64), Access::read(7, W, 0, 64)],
        );
        assert_eq!(
            place(
                &mut t,
                &[Access::read(7, W, 0, 64), Access::write(2, G, 0, 8)]
            ),
            Placement::JoinGroup
        );
        assert_eq!(
            conflict(&Access::read(7, W, 0, 8), &Access::write(7, G, 0, 8)),
            None
        );
        assert_eq!(
            conflict(&Access::write(7, G, 0, 8), &Access::read(7, W, 0, 8)),
            None
        );
    }

    #[test]
    fn write_to_weight_is_an_error_naming_the_buffer() {
        let mut t = HazardTracker::new();
        place(&mut t, &[Access::write(1, G, 0, 8)]);
        let err = t
            .place(
                "rmsnorm",
                &[Access::read(1, G, 0, 8), Access::write(42, W, 0, 8)],
            )
            .unwrap_err();
        assert!(err.to_string().contains("#42"), "{err}");
        match err {
            Error::WriteToReadOnlyWeight { kernel, buffer } => {
                assert_eq!(kernel, "rmsnorm");
                assert_eq!(buffer, 42);
            }
            other => panic!("unexpected error {other:?}"),
        }
        // A zero-length write to a weight is still an error.
        assert!(t.place("x", &[Access::write(42, W, 0, 0)]).is_err());
        // Nothing was recorded.
        assert_eq!(t.group_dispatches(), 1);
        assert_eq!(
            place(&mut t, &[Access::write(1, G, 8, 8)]),
            Placement::JoinGroup
        );
    }

    #[test]
    fn same_dispatch_read_write_joins_empty_group() {
        let mut t = HazardTracker::new();
        let acc = [
            Access::read(1, G, 0, 64),
            Access::write(1, G, 0, 64),
            Access::write(1, G, 32, 64),
        ];
        assert_eq!(t.conflicts_with_group(&acc), None);
        assert_eq!(place(&mut t, &acc), Placement::JoinGroup);
        assert_eq!(t.group_dispatches(), 1);
        // And after a barrier, a dispatch starts its group alone.
        assert_eq!(place(&mut t, &acc), Placement::BarrierBefore);
        assert_eq!(t.group_dispatches(), 1);
    }

    #[test]
    fn barrier_empties_group() {
        let mut t = HazardTracker::new();
        place(&mut t, &[Access::write(1, G, 0, 64)]);
        t.barrier();
        assert_eq!(t.group_dispatches(), 0);
        assert_eq!(
            place(&mut t, &[Access::read(1, G, 0, 64)]),
            Placement::JoinGroup
        );
    }

    #[test]
    fn ranges_at_the_end_of_u64() {
        let m = u64::MAX;
        let a = Access::write(1, G, m - 1, 1);
        let b = Access::read(1, G, m - 1, 100); // end past u64::MAX
        let c = Access::read(1, G, m, 1);
        assert!(a.overlaps(&b) && b.overlaps(&a));
        assert!(!a.overlaps(&c) && !c.overlaps(&a));
        assert!(b.overlaps(&c));
        let mut t = HazardTracker::new();
        place(&mut t, &[Access::write(1, G, m - 10, 5)]);
        place(&mut t, &[Access::write(1, G, m - 5, 20)]); // touches, union overflows: kept apart
        assert_eq!(
            place(&mut t, &[Access::read(1, G, m, 3)]),
            Placement::BarrierBefore
        );
    }

    #[test]
    fn group_storage_is_reused() {
        let mut t = HazardTracker::new();
        let token = |t: &mut HazardTracker| {
            for i in 0..10u64 {
                let acc = [
                    Access::read(100, G, 0, 64),
                    Access::write(i, G, 0, 64),
                    Access::read(1000 + i, W, 0, 8),
                ];
                t.place("k", &acc).unwrap();
            }
            // Weights are not stored; the ten reads of buffer 100 are one span.
            assert_eq!(t.spans.len(), 11);
            t.barrier();
        };
        token(&mut t);
        let cap = t.spans.capacity();
        for _ in 0..100 {
            token(&mut t);
            assert_eq!(t.spans.capacity(), cap);
        }
    }

    #[test]
    fn adjacent_same_kind_spans_merge() {
        let mut t = HazardTracker::new();
        for i in 0..8u64 {
            place(
                &mut t,
                &[
                    Access::write(1, G, i * 16, 16),
                    Access::read(2, G, i * 16, 32),
                ],
            );
        }
        assert_eq!(t.group_dispatches(), 8);
        assert_eq!(t.spans.len(), 2);
        assert_eq!(
            t.spans[0],
            Span {
                buffer: 1,
                offset: 0,
                len: 128,
                write: true
            }
        );
        assert_eq!(
            t.spans[1],
            Span {
                buffer: 2,
                offset: 0,
                len: 144,
                write: false
            }
        );
    }

    // ---- Brute-force oracle ------------------------------------------------------------

    /// Naive, independent overlap arithmetic (u128, no shared helpers).
    fn naive_overlap(a: &Access, b: &Access) -> bool {
        let (a0, a1) = (a.offset as u128, a.offset as u128 + a.len as u128);
        let (b0, b1) = (b.offset as u128, b.offset as u128 + b.len as u128);
        a.buffer == b.buffer && a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1
    }

    fn naive_kind(earlier: &Access, later: &Access) -> Option<HazardKind> {
        if earlier.class == ResourceClass::ReadOnlyWeight
            || later.class == ResourceClass::ReadOnlyWeight
        {
            return None;
        }
        if !naive_overlap(earlier, later) {
            return None;
        }
        match (earlier.kind, later.kind) {
            (AccessKind::Read, AccessKind::Read) => None,
            (AccessKind::Write, AccessKind::Read) => Some(HazardKind::ReadAfterWrite),
            (AccessKind::Read, AccessKind::Write) => Some(HazardKind::WriteAfterRead),
            (AccessKind::Write, AccessKind::Write) => Some(HazardKind::WriteAfterWrite),
        }
    }

    fn naive_dispatch_kinds(earlier: &[Access], later: &[Access]) -> Vec<HazardKind> {
        let mut out = Vec::new();
        for e in earlier {
            for l in later {
                if let Some(k) = naive_kind(e, l) {
                    out.push(k);
                }
            }
        }
        out
    }

    fn writes_weight(acc: &[Access]) -> bool {
        acc.iter()
            .any(|a| a.class == ResourceClass::ReadOnlyWeight && a.kind == AccessKind::Write)
    }

    /// Keeps every dispatch since the last barrier and checks every pair.
    #[derive(Default)]
    struct Oracle {
        group: Vec<Vec<Access>>,
    }

    impl Oracle {
        fn kinds(&self, acc: &[Access]) -> Vec<HazardKind> {
            self.group
                .iter()
                .flat_map(|d| naive_dispatch_kinds(d, acc))
                .collect()
        }

        fn place(&mut self, acc: &[Access]) -> Option<Placement> {
            if writes_weight(acc) {
                return None;
            }
            if self.kinds(acc).is_empty() {
                self.group.push(acc.to_vec());
                Some(Placement::JoinGroup)
            } else {
                self.group = vec![acc.to_vec()];
                Some(Placement::BarrierBefore)
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Dispatch(Vec<Access>),
        Barrier,
    }

    /// 1-4 buffers of random classes; up to 60 ops (mostly dispatches of 1-4 accesses)
    /// with small offsets and lengths, based at 0 or near the end of u64.
    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let classes =
            prop::collection::vec(prop::sample::select(ResourceClass::ALL.to_vec()), 1..=4);
        (classes, prop::bool::weighted(0.2)).prop_flat_map(|(classes, high)| {
            let base = if high { u64::MAX - 20 } else { 0 };
            let n = classes.len();
            let access =
                (0..n, 0u64..16, 0u64..8, prop::bool::ANY).prop_map(move |(b, off, len, w)| {
                    Access {
                        buffer: b as u64 + 1,
                        class: classes[b],
                        offset: base + off,
                        len,
                        kind: if w {
                            AccessKind::Write
                        } else {
                            AccessKind::Read
                        },
                    }
                });
            let op = prop_oneof![
                1 => Just(Op::Barrier),
                15 => prop::collection::vec(access, 1..=4).prop_map(Op::Dispatch),
            ];
            prop::collection::vec(op, 0..=60)
        })
    }

    /// Runs the tracker over `ops`: per successful dispatch, its accesses, its placement
    /// and the index of the group it landed in.
    fn schedule(ops: &[Op]) -> Vec<(Vec<Access>, Placement, usize)> {
        let mut t = HazardTracker::new();
        let mut group = 0usize;
        let mut out = Vec::new();
        for op in ops {
            match op {
                Op::Barrier => {
                    t.barrier();
                    group += 1;
                }
                Op::Dispatch(acc) => {
                    if let Ok(p) = t.place("k", acc) {
                        if p == Placement::BarrierBefore {
                            group += 1;
                        }
                        out.push((acc.clone(), p, group));
                    }
                }
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn tracker_matches_oracle(ops in ops()) {
            let mut t = HazardTracker::new();
            let mut o = Oracle::default();
            for op in &ops {
                match op {
                    Op::Barrier => {
                        t.barrier();
                        o.group.clear();
                    }
                    Op::Dispatch(acc) => {
                        let kinds = o.kinds(acc);
                        match t.conflicts_with_group(acc) {
                            None => prop_assert!(kinds.is_empty(), "missed {kinds:?} for {acc:?}"),
                            Some(k) => prop_assert!(kinds.contains(&k), "{k:?} not in {kinds:?} for {acc:?}"),
                        }
                        let got = t.place("k", acc);
                        match o.place(acc) {
                            None => {
                                let Err(Error::WriteToReadOnlyWeight { buffer, .. }) = got else {
                                    return Err(TestCaseError::fail(format!("expected weight-write error, got {got:?}")));
                                };
                                prop_assert!(acc.iter().any(|a| a.buffer == buffer
                                    && a.class == ResourceClass::ReadOnlyWeight && a.kind == AccessKind::Write));
                            }
                            Some(want) => prop_assert_eq!(got.ok(), Some(want), "dispatch {:?}", acc),
                        }
                    }
                }
                prop_assert_eq!(t.group_dispatches(), o.group.len());
            }
        }

        #[test]
        fn schedule_is_sound_and_minimal(ops in ops()) {
            let s = schedule(&ops);
            for j in 0..s.len() {
                let (acc_j, p, g) = &s[j];
                // Soundness: nothing in the same group conflicts.
                for (acc_i, _, gi) in &s[..j] {
                    if gi == g {
                        let k = naive_dispatch_kinds(acc_i, acc_j);
                        prop_assert!(k.is_empty(), "{acc_i:?} and {acc_j:?} share group {g} but {k:?}");
                    }
                }
                // Minimality: a barrier is placed only when the group it could not join
                // holds a conflicting dispatch.
                if *p == Placement::BarrierBefore {
                    let needed = s[..j].iter().any(|(acc_i, _, gi)| *gi == g - 1
                        && !naive_dispatch_kinds(acc_i, acc_j).is_empty());
                    prop_assert!(needed, "unnecessary barrier before {acc_j:?}");
                }
            }
        }

        #[test]
        fn conflict_matches_naive(
            b in (0u64..2, 0u64..2),
            o in (any::<u64>(), any::<u64>()),
            l in (prop_oneof![0u64..4, any::<u64>()], prop_oneof![0u64..4, any::<u64>()]),
            near in any::<bool>(),
            k in (any::<bool>(), any::<bool>()),
            c in (prop::sample::select(ResourceClass::ALL.to_vec()), prop::sample::select(ResourceClass::ALL.to_vec())),
        ) {
            let o1 = if near { o.0.wrapping_add(o.1 % 8) } else { o.1 };
            let kind = |w: bool| if w { AccessKind::Write } else { AccessKind::Read };
            let a = Access { buffer: b.0, class: c.0, offset: o.0, len: l.0, kind: kind(k.0) };
            let z = Access { buffer: b.1, class: c.1, offset: o1, len: l.1, kind: kind(k.1) };
            prop_assert_eq!(a.overlaps(&z), naive_overlap(&a, &z));
            prop_assert_eq!(conflict(&a, &z), naive_kind(&a, &z));
            prop_assert_eq!(conflict(&z, &a), naive_kind(&z, &a));
        }
    }
}
