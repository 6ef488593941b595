//! Resource classes: what a buffer is for, fixed when it is made.
//!
//! The class is used in two places: the hazard tracker (a `ReadOnlyWeight` is never
//! written by the GPU after upload, so it never conflicts) and host access (reading a
//! weight never waits; reading anything else waits only for its last GPU writer).

use serde::Serialize;

/// What a buffer holds; decides hazard tracking, memory placement and host-wait rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum ResourceClass {
    /// Model weights: written once by upload, read-only on the GPU afterwards.
    ReadOnlyWeight,
    /// KV cache: each token appends a new range; old ranges are only read.
    AppendOnlyKv,
    /// Per-token intermediates, overwritten every token.
    TokenScratch,
    /// Results the host reads back (logits, next token).
    PersistentOutput,
    /// Anything else.
    Generic,
}

impl ResourceClass {
    /// All classes, in declaration order.
    pub const ALL: [ResourceClass; 5] = [
        ResourceClass::ReadOnlyWeight,
        ResourceClass::AppendOnlyKv,
        ResourceClass::TokenScratch,
        ResourceClass::PersistentOutput,
        ResourceClass::Generic,
    ];

    /// Whether GPU writes to a buffer of this class are forbidden.
    pub fn is_gpu_read_only(self) -> bool {
        matches!(self, ResourceClass::ReadOnlyWeight)
    }
}
