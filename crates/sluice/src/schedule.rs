//! Scheduling of a captured stream (pure Rust, no Vulkan): the dependency DAG from
//! declared accesses, and a barrier-minimal order.
//!
//! Node `j` depends on an earlier node `i` when any access of `j` conflicts with one of
//! `i` (RAW, WAR or WAW on overlapping bytes of one buffer; see [`crate::hazard`]).
//! [`schedule`] does level scheduling: each group holds every not-yet-scheduled node all
//! of whose predecessors are in earlier groups, looking at most `lookahead` nodes past the
//! first unscheduled one; one global barrier separates consecutive groups. With an
//! unbounded window the number of barriers is the DAG's longest path minus one, which no
//! schedule with global barriers can beat.

use crate::hazard::{conflict, Access};

/// Predecessor lists: `deps[j]` holds every `i < j` that `j` must follow.
pub fn dependencies(nodes: &[Vec<Access>]) -> Vec<Vec<usize>> {
    let mut deps = vec![Vec::new(); nodes.len()];
    for j in 0..nodes.len() {
        for i in 0..j {
            let hit = nodes[i]
                .iter()
                .any(|a| nodes[j].iter().any(|b| conflict(a, b).is_some()));
            if hit {
                deps[j].push(i);
            }
        }
    }
    deps
}

/// An execution order split into concurrent groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Node indices, each inner Vec one concurrent group; a barrier sits between groups.
    pub groups: Vec<Vec<usize>>,
}

impl Schedule {
    /// Global barriers between groups.
    pub fn barriers(&self) -> usize {
        self.groups.len().saturating_sub(1)
    }

    /// The nodes in execution order.
    pub fn order(&self) -> Vec<usize> {
        self.groups.iter().flatten().copied().collect()
    }
}

/// Level scheduling with a lookahead window (`usize::MAX` for unbounded; 1 keeps the
/// captured order and, like the in-order tracker, only merges runs of independent nodes).
pub fn schedule(deps: &[Vec<usize>], lookahead: usize) -> Schedule {
    let n = deps.len();
    let mut group_of = vec![usize::MAX; n];
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut first = 0; // first unscheduled node
    while first < n {
        let g = groups.len();
        let mut group = Vec::new();
        let window_end = first.saturating_add(lookahead.max(1)).min(n);
        // Inside the window any ready node joins; past it only while the captured order
        // is unbroken (what the in-order tracker would do).
        let mut unbroken = true;
        for j in first..n {
            if group_of[j] != usize::MAX {
                continue;
            }
            // Ready: every predecessor in an earlier group.
            let ready = deps[j].iter().all(|&i| group_of[i] < g);
            if ready && (j < window_end || unbroken) {
                group_of[j] = g;
                group.push(j);
            } else {
                unbroken = false;
                if j >= window_end {
                    break;
                }
            }
        }
        groups.push(group);
        while first < n && group_of[first] != usize::MAX {
            first += 1;
        }
    }
    Schedule { groups }
}

/// Checks that `s` runs every node exactly once, each after all its predecessors with a
/// barrier between (predecessor in a strictly earlier group). Used by tests.
pub fn is_valid(deps: &[Vec<usize>], s: &Schedule) -> bool {
    let mut group_of = vec![usize::MAX; deps.len()];
    for (g, nodes) in s.groups.iter().enumerate() {
        for &j in nodes {
            if j >= deps.len() || group_of[j] != usize::MAX {
                return false;
            }
            group_of[j] = g;
        }
    }
    group_of.iter().all(|&g| g != usize::MAX)
        && deps
            .iter()
            .enumerate()
            .all(|(j, ps)| ps.iter().all(|&i| group_of[i] < group_of[j]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::ResourceClass;
    use crate::hazard::AccessKind;
    use proptest::prelude::*;

    fn longest_path(deps: &[Vec<usize>]) -> usize {
        let mut depth = vec![0usize; deps.len()];
        for j in 0..deps.len() {
            depth[j] = deps[j].iter().map(|&i| depth[i] + 1).max().unwrap_or(0);
        }
        depth.iter().max().map(|d| d + 1).unwrap_or(0)
    }

    /// Barriers the in-order greedy tracker would emit (the Auto encoder).
    fn in_order_barriers(nodes: &[Vec<Access>]) -> usize {
        let mut group: Vec<&Access> = Vec::new();
        let mut barriers = 0;
        for (k, n) in nodes.iter().enumerate() {
            let hit = group
                .iter()
                .any(|a| n.iter().any(|b| conflict(a, b).is_some()));
            if hit && k > 0 {
                barriers += 1;
                group.clear();
            }
            group.extend(n.iter());
        }
        barriers
    }

    fn access() -> impl Strategy<Value = Access> {
        (0u64..4, 0u64..8, 1u64..4, prop::bool::ANY).prop_map(|(b, off, len, w)| Access {
            buffer: b,
            class: ResourceClass::Generic,
            offset: off * 16,
            len: len * 16,
            kind: if w {
                AccessKind::Write
            } else {
                AccessKind::Read
            },
        })
    }

    proptest! {
        #[test]
        fn schedule_is_valid_and_barrier_minimal(nodes in prop::collection::vec(prop::collection::vec(access(), 1..4), 0..40), window in 1usize..80) {
            let deps = dependencies(&nodes);
            // Brute-force check of the DAG itself.
            for j in 0..nodes.len() {
                for i in 0..j {
                    let naive = nodes[i].iter().any(|a| nodes[j].iter().any(|b| a.buffer == b.buffer
                        && a.offset < b.offset + b.len && b.offset < a.offset + a.len
                        && (a.kind == AccessKind::Write || b.kind == AccessKind::Write)));
                    prop_assert_eq!(naive, deps[j].contains(&i));
                }
            }
            let unbounded = schedule(&deps, usize::MAX);
            prop_assert!(is_valid(&deps, &unbounded));
            prop_assert_eq!(unbounded.groups.len(), longest_path(&deps));
            let windowed = schedule(&deps, window);
            prop_assert!(is_valid(&deps, &windowed));
            prop_assert!(windowed.barriers() >= unbounded.barriers());
            prop_assert!(windowed.barriers() <= in_order_barriers(&nodes) || nodes.is_empty());
        }
    }
}
