//! The function filters and the depth limit of `ichnos trace` (`-F`,
//! `-N`, `-D`) applied when a whole trace is read (`ichnos replay -F f`),
//! as `uftrace replay` applies its own: a [`Visitor`] between a walk and
//! the visitor it feeds, which passes on the calls the same options at
//! record time would have written, at the depths a reader of such a
//! trace would see them. The rules are the runtime's (`ichnos-preload`'s
//! `scope.rs`, docs/function-trace.md): a call is shown when it is inside
//! no `-N` function and, with any `-F` function, inside one; `-D` counts
//! the calls shown, and under `-F` from the innermost open `-F` call.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::read::{Call, Trace, Visitor};

/// Which calls are kept: functions by number.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scope {
    /// `-F`: only the calls inside these (none: every call).
    pub only: FxHashSet<u64>,
    /// `-N`: not these, nor the calls inside them.
    pub not: FxHashSet<u64>,
    /// `-D`: calls deeper than this are not kept.
    pub depth: Option<u32>,
}

impl Scope {
    /// Whether it keeps every call.
    pub(crate) fn is_everything(&self) -> bool {
        self.only.is_empty() && self.not.is_empty() && self.depth.is_none()
    }
}

/// Where a thread is once a call is entered, and what became of it.
#[derive(Clone, Copy, Debug, Default)]
struct Place {
    /// Open `-F` calls.
    inside: u32,
    /// Open `-N` calls.
    hidden: u32,
    /// Open calls the filters let through.
    depth: u32,
    /// The depth `-D` counts from (the filters' depth before the
    /// innermost open `-F` call).
    base: u32,
    /// Open calls kept.
    kept: usize,
    /// This call is kept.
    is_kept: bool,
    /// Its depth as kept (the kept calls below it).
    kept_depth: usize,
}

/// `inner`, fed only the calls `scope` keeps.
pub(crate) struct Scoped<'a, V: Visitor + ?Sized> {
    scope: &'a Scope,
    inner: &'a mut V,
    /// Per thread, its open calls' places, outermost first.
    threads: FxHashMap<(u32, u32), Vec<Place>>,
}

impl<'a, V: Visitor + ?Sized> Scoped<'a, V> {
    pub(crate) fn new(scope: &'a Scope, inner: &'a mut V) -> Self {
        Scoped {
            scope,
            inner,
            threads: FxHashMap::default(),
        }
    }
}

impl<V: Visitor + ?Sized> Visitor for Scoped<'_, V> {
    fn enter(&mut self, pid: u32, tid: u32, function: u64, ticks: u64, depth: usize, index: u64) {
        let open = self.threads.entry((pid, tid)).or_default();
        // The walk's depth is the count of open calls below this one.
        open.truncate(depth);
        let below = open.last().copied().unwrap_or_default();
        let only = self.scope.only.contains(&function);
        let inside = below.inside + u32::from(only);
        let hidden = below.hidden + u32::from(self.scope.not.contains(&function));
        let shown = hidden == 0 && (inside > 0 || self.scope.only.is_empty());
        let filtered_depth = below.depth + u32::from(shown);
        let base = if shown && only {
            filtered_depth - 1
        } else {
            below.base
        };
        let is_kept = shown
            && self
                .scope
                .depth
                .is_none_or(|max| filtered_depth - base <= max);
        let place = Place {
            inside,
            hidden,
            depth: filtered_depth,
            base,
            kept: below.kept + usize::from(is_kept),
            is_kept,
            kept_depth: below.kept,
        };
        open.push(place);
        if is_kept {
            self.inner
                .enter(pid, tid, function, ticks, place.kept_depth, index);
        }
    }

    fn exit(&mut self, pid: u32, tid: u32, call: &Call) {
        let Some(open) = self.threads.get_mut(&(pid, tid)) else {
            return;
        };
        // Exits come innermost first: this call is the one at its depth.
        let Some(place) = open.get(call.depth).copied() else {
            return;
        };
        open.truncate(call.depth);
        if place.is_kept {
            self.inner.exit(
                pid,
                tid,
                &Call {
                    depth: place.kept_depth,
                    ..*call
                },
            );
        }
    }

    fn probe(&mut self, pid: u32, tid: u32, ticks: u64, id: u64, value: u64) {
        self.inner.probe(pid, tid, ticks, id, value);
    }

    fn lost(&mut self, pid: u32, tid: u32, ticks: u64, count: u64) {
        self.inner.lost(pid, tid, ticks, count);
    }

    fn abandon(&mut self, pid: u32, tid: u32, _: usize, ticks: u64) {
        let kept = self
            .threads
            .remove(&(pid, tid))
            .and_then(|open| open.last().map(|p| p.kept))
            .unwrap_or(0);
        if kept > 0 {
            self.inner.abandon(pid, tid, kept, ticks);
        }
    }

    fn unfinished(&mut self, pid: u32, tid: u32, call: &Call) {
        let place = self
            .threads
            .get(&(pid, tid))
            .and_then(|open| open.get(call.depth).copied());
        if let Some(place) = place.filter(|p| p.is_kept) {
            self.inner.unfinished(
                pid,
                tid,
                &Call {
                    depth: place.kept_depth,
                    ..*call
                },
            );
        }
    }
}

/// Why a scope could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScopeError {
    /// A pattern names no function of the trace.
    #[error("{flag} {pattern}: no function of the trace is named so")]
    NoMatch {
        /// `-F` or `-N`.
        flag: &'static str,
        /// The pattern.
        pattern: String,
    },
}

/// The functions of `trace` that each of `patterns` names (as `ichnos
/// trace -F` takes a pattern: the name, or the name without its
/// parameters, whole or from a scope on, `*` for any characters); every
/// pattern must name one at least.
pub(crate) fn functions_named(
    trace: &Trace,
    flag: &'static str,
    patterns: &[String],
) -> Result<FxHashSet<u64>, ScopeError> {
    let mut out = FxHashSet::default();
    for pattern in patterns {
        let named: Vec<u64> = trace
            .functions()
            .filter(|(_, f)| crate::filter::names_by(&f.name, Some(&f.name), pattern))
            .map(|(id, _)| id)
            .collect();
        if named.is_empty() {
            return Err(ScopeError::NoMatch {
                flag,
                pattern: pattern.clone(),
            });
        }
        out.extend(named);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the inner visitor saw, as text.
    #[derive(Default)]
    struct Seen(Vec<String>);

    impl Visitor for Seen {
        fn enter(&mut self, _: u32, _: u32, function: u64, _: u64, depth: usize, _: u64) {
            self.0.push(format!("enter {function} at {depth}"));
        }
        fn exit(&mut self, _: u32, _: u32, call: &Call) {
            self.0
                .push(format!("exit {} at {}", call.function, call.depth));
        }
        fn abandon(&mut self, _: u32, _: u32, open: usize, _: u64) {
            self.0.push(format!("abandon {open}"));
        }
        fn unfinished(&mut self, _: u32, _: u32, call: &Call) {
            self.0
                .push(format!("unfinished {} at {}", call.function, call.depth));
        }
    }

    fn call(function: u64, depth: usize) -> Call {
        Call {
            function,
            enter: 0,
            exit: 1,
            depth,
            children: 0,
            index: 0,
        }
    }

    #[test]
    fn calls_left_open_are_passed_on_at_their_kept_depths() {
        // main (1) calls f (2), which calls g (3) and f again; -F f -D 1.
        let scope = Scope {
            only: [2].into_iter().collect(),
            not: FxHashSet::default(),
            depth: Some(1),
        };
        let mut seen = Seen::default();
        let mut scoped = Scoped::new(&scope, &mut seen);
        scoped.enter(1, 1, 1, 0, 0, 0);
        scoped.enter(1, 1, 2, 0, 1, 1);
        scoped.enter(1, 1, 3, 0, 2, 2);
        scoped.exit(1, 1, &call(3, 2));
        scoped.enter(1, 1, 2, 0, 2, 3);
        // The thread ends inside both calls of f and main.
        scoped.unfinished(1, 1, &call(2, 2));
        scoped.unfinished(1, 1, &call(2, 1));
        scoped.unfinished(1, 1, &call(1, 0));
        scoped.abandon(1, 1, 3, 9);
        assert_eq!(
            seen.0,
            [
                "enter 2 at 0",
                "enter 2 at 1",
                "unfinished 2 at 1",
                "unfinished 2 at 0",
                "abandon 2",
            ]
        );
    }
}
