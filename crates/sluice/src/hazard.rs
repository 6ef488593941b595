//! Placeholder until the full tracker lands (same API).
use crate::class::ResourceClass;
use crate::error::{Error, Result};
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind { Read, Write }
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access { pub buffer: u64, pub class: ResourceClass, pub offset: u64, pub len: u64, pub kind: AccessKind }
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement { JoinGroup, BarrierBefore }
#[derive(Default)]
pub struct HazardTracker { group: Vec<Access>, n: usize }
impl HazardTracker {
    pub fn new() -> Self { Self::default() }
    pub fn place(&mut self, kernel: &str, accesses: &[Access]) -> Result<Placement> {
        for a in accesses { if a.kind == AccessKind::Write && a.class == ResourceClass::ReadOnlyWeight { return Err(Error::WriteToReadOnlyWeight { kernel: kernel.into(), buffer: a.buffer }); } }
        let c = accesses.iter().any(|a| self.group.iter().any(|g| g.buffer == a.buffer && g.len > 0 && a.len > 0 && g.offset < a.offset + a.len && a.offset < g.offset + g.len && (g.kind == AccessKind::Write || a.kind == AccessKind::Write)));
        if c { self.group.clear(); self.n = 0; }
        self.group.extend(accesses.iter().filter(|a| a.class != ResourceClass::ReadOnlyWeight)); self.n += 1;
        Ok(if c { Placement::BarrierBefore } else { Placement::JoinGroup })
    }
    pub fn barrier(&mut self) { self.group.clear(); self.n = 0; }
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HazardKind { ReadAfterWrite, WriteAfterRead, WriteAfterWrite }
pub fn conflict(earlier: &Access, later: &Access) -> Option<HazardKind> {
    if earlier.buffer != later.buffer || earlier.class == ResourceClass::ReadOnlyWeight || earlier.len == 0 || later.len == 0 { return None; }
    if !(earlier.offset < later.offset + later.len && later.offset < earlier.offset + earlier.len) { return None; }
    match (earlier.kind, later.kind) { (AccessKind::Write, AccessKind::Read) => Some(HazardKind::ReadAfterWrite), (AccessKind::Read, AccessKind::Write) => Some(HazardKind::WriteAfterRead), (AccessKind::Write, AccessKind::Write) => Some(HazardKind::WriteAfterWrite), _ => None }
}
