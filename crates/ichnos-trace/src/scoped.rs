//! The function filters and the depth limit of `ichnos trace` (`-F`,
//! `-N`, `-D`) applied when a whole trace is read ([`Trace::restrict`]:
//! `ichnos replay -F f`, `ichnos report --trace -F f`), as `uftrace
//! replay` applies its own: a [`Visitor`] between a walk and
//! the visitor it feeds, which passes on the calls the same options at
//! record time would have written, at the depths a reader of such a
//! trace would see them. The rules are the runtime's (`ichnos-preload`'s
//! `scope.rs`, docs/function-trace.md): a call is shown when it is inside
//! no `-N` function and, with any `-F` function, inside one; `-D` counts
//! the calls shown, and under `-F` from the innermost open `-F` call (of
//! the 64 outermost, as the runtime keeps them). Named spans are kept
//! always and count in nothing, as the runtime records them.
//!
//! What a whole trace cannot say is not followed: a forked child starts
//! with its parent's place at record time (inside an `-F` call, say) and
//! with none here; so does a flight recorder's ring whose oldest calls
//! were overwritten; and a span that outlives a call it began in ends
//! with that call here, at its own end in a trace recorded with the
//! options. Patterns match the names of every object and process of the
//! trace, demangled, where the runtime took the executable's symbols.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::read::{Call, Trace, Visitor};

/// The options of `ichnos trace` that choose which calls are recorded,
/// for [`Trace::restrict`](crate::Trace::restrict) to apply to a whole
/// trace as it is read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallFilters {
    /// `-F`: only the calls inside the functions these patterns name.
    pub only: Vec<String>,
    /// `-N`: not the functions these patterns name, nor their calls.
    pub not: Vec<String>,
    /// `-D`: calls only this many levels deep (under `-F`, counted from
    /// the innermost call of a `-F` function).
    pub depth: Option<u32>,
}

impl CallFilters {
    /// Whether they keep every call.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.only.is_empty() && self.not.is_empty() && self.depth.is_none()
    }
}

/// Which calls are kept: functions by number.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scope {
    /// `-F`: only the calls inside these (none: every call).
    pub only: FxHashSet<u64>,
    /// `-N`: not these, nor the calls inside them.
    pub not: FxHashSet<u64>,
    /// `-D`: calls deeper than this are not kept.
    pub depth: Option<u32>,
    /// Named spans: kept always, counted in nothing.
    pub spans: FxHashSet<u64>,
}

impl Scope {
    /// Whether it keeps every call.
    pub(crate) fn is_everything(&self) -> bool {
        self.only.is_empty() && self.not.is_empty() && self.depth.is_none()
    }
}

/// Open `-F` calls whose depth the runtime keeps: deeper ones count from
/// the last of these (`ichnos-preload`'s `F_BASES`).
const F_BASES: u32 = 64;

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
    /// The ticks spent in the kept calls it made: its `Call::children`
    /// as a trace recorded so would give it.
    kept_children: u64,
    /// The innermost kept call open below it, by its index among the
    /// thread's places.
    kept_parent: Option<usize>,
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

    /// The place of a call of `function` entered above `below` (the
    /// place at `parent`, if any).
    fn place(scope: &Scope, function: u64, below: Place, parent: Option<usize>) -> Place {
        let kept_parent = if below.is_kept {
            parent
        } else {
            below.kept_parent
        };
        if scope.spans.contains(&function) {
            // A span: recorded whatever the scope, as a call at the depth
            // of the calls written around it, and no part of the scope.
            return Place {
                kept: below.kept + 1,
                is_kept: true,
                kept_depth: below.kept,
                kept_children: 0,
                kept_parent,
                ..below
            };
        }
        let only = scope.only.contains(&function);
        let inside = below.inside + u32::from(only);
        let hidden = below.hidden + u32::from(scope.not.contains(&function));
        let shown = hidden == 0 && (inside > 0 || scope.only.is_empty());
        let depth = below.depth + u32::from(shown);
        let base = if shown && only && inside <= F_BASES {
            depth - 1
        } else {
            below.base
        };
        let is_kept = shown && scope.depth.is_none_or(|max| depth - base <= max);
        Place {
            inside,
            hidden,
            depth,
            base,
            kept: below.kept + usize::from(is_kept),
            is_kept,
            kept_depth: below.kept,
            kept_children: 0,
            kept_parent,
        }
    }

    /// `call`, at the place `at` of the thread's, as its kept self: its
    /// kept depth and children, its time added to its kept caller's.
    fn kept(open: &mut [Place], at: usize, call: &Call) -> Option<Call> {
        let place = *open.get(at)?;
        if !place.is_kept {
            return None;
        }
        if let Some(parent) = place.kept_parent.and_then(|p| open.get_mut(p)) {
            parent.kept_children = parent
                .kept_children
                .saturating_add(call.exit.saturating_sub(call.enter));
        }
        Some(Call {
            depth: place.kept_depth,
            children: place.kept_children,
            ..*call
        })
    }
}

impl<V: Visitor + ?Sized> Visitor for Scoped<'_, V> {
    fn enter(&mut self, pid: u32, tid: u32, function: u64, ticks: u64, depth: usize, index: u64) {
        let open = self.threads.entry((pid, tid)).or_default();
        // The walk's depth is the count of open calls below this one.
        open.truncate(depth);
        let below = open.last().copied().unwrap_or_default();
        let place = Self::place(self.scope, function, below, open.len().checked_sub(1));
        open.push(place);
        if place.is_kept {
            self.inner
                .enter(pid, tid, function, ticks, place.kept_depth, index);
        }
    }

    fn exit(&mut self, pid: u32, tid: u32, call: &Call) {
        let Some(open) = self.threads.get_mut(&(pid, tid)) else {
            return;
        };
        // Exits come innermost first: this call is the one at its depth.
        let kept = Self::kept(open, call.depth, call);
        open.truncate(call.depth);
        if let Some(kept) = kept {
            self.inner.exit(pid, tid, &kept);
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
        // Innermost first: each one's kept children are all in when it
        // comes (the kept calls above it returned, or came before it).
        let Some(open) = self.threads.get_mut(&(pid, tid)) else {
            return;
        };
        if let Some(kept) = Self::kept(open, call.depth, call) {
            self.inner.unfinished(pid, tid, &kept);
        }
    }
}

/// Why a scope could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScopeError {
    /// An `-F` pattern names no function called in the trace.
    #[error("{flag} {pattern}: no function called in the trace is named so")]
    NoMatch {
        /// The option (`-F`).
        flag: &'static str,
        /// The pattern.
        pattern: String,
    },
}

impl Scope {
    /// The scope of `-F` patterns `only`, `-N` patterns `not` and `-D`
    /// `depth` over `trace`'s functions (named spans aside, which the
    /// runtime never filters). A pattern is taken as `ichnos trace -F`
    /// takes one: the name, or the name without its parameters, whole or
    /// from a scope on, `*` for any characters. An `-F` pattern that names
    /// no function called in the trace is refused (nothing would be
    /// kept); an `-N` one hides nothing, and is returned for a warning.
    pub(crate) fn of(
        trace: &Trace,
        filters: &CallFilters,
    ) -> Result<(Scope, Vec<String>), ScopeError> {
        let CallFilters { only, not, depth } = filters;
        let depth = *depth;
        let spans: FxHashSet<u64> = trace
            .functions()
            .filter(|(_, f)| &*f.object == ichnos_profile::report::SPAN_OBJECT)
            .map(|(id, _)| id)
            .collect();
        let named = |pattern: &str| -> Vec<u64> {
            trace
                .functions()
                .filter(|(id, f)| {
                    !spans.contains(id) && crate::filter::names_by(&f.name, Some(&f.name), pattern)
                })
                .map(|(id, _)| id)
                .collect()
        };
        let mut scope = Scope {
            depth,
            ..Scope::default()
        };
        for pattern in only {
            let functions = named(pattern);
            if functions.is_empty() {
                return Err(ScopeError::NoMatch {
                    flag: "-F",
                    pattern: pattern.clone(),
                });
            }
            scope.only.extend(functions);
        }
        let mut unmatched = Vec::new();
        for pattern in not {
            let functions = named(pattern);
            if functions.is_empty() {
                unmatched.push(pattern.clone());
            }
            scope.not.extend(functions);
        }
        scope.spans = spans;
        Ok((scope, unmatched))
    }
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
            depth: Some(1),
            ..Scope::default()
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
