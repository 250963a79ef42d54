//! Marker planning: where the producer must stop and where it must notify
//! the consumer (the Linux driver's `pt_buffer_reset_markers`, as a pure
//! function of positions).
//!
//! The hardware keeps markers as STOP and INT bits on ToPA entries; here
//! they are two absolute positions, `stop_at` and `notify_at`, which a
//! software producer compares its head against and which
//! [`TopaLayout::apply_markers`](super::TopaLayout::apply_markers) can still
//! render as bits.

use super::table::{RegionTable, MAX_POSITION};

/// Where a marker may be placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Granularity {
    /// Only at region ends, like the hardware's STOP and INT bits: cheaper
    /// (one check per region) and usable as a test double for real ToPA
    /// back-ends, but may leave up to a region of free space unused.
    Region,
    /// At any byte.
    Byte,
}

/// Marker positions for one producer run, as absolute positions.
///
/// A successful plan always satisfies
/// `head < notify_at <= stop_at <= tail + capacity`
/// for the `head` and `tail` it was planned from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkerPlan {
    /// The producer must not write the byte at this position (or any later
    /// one) until the markers are planned again: it is the first byte that
    /// is still unread (byte granularity) or the end of the last region that
    /// can be filled without touching unread data (region granularity).
    pub stop_at: u64,
    /// The producer calls the notifier when its head reaches this position.
    pub notify_at: u64,
}

/// Why no markers can be planned.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
#[non_exhaustive]
pub enum MarkerError {
    /// The producer cannot make progress without overwriting unread data:
    /// the buffer is full (byte granularity), or not even the current region
    /// can be finished (region granularity). This is the kernel's TRUNCATED
    /// case: the producer stays stopped until the consumer frees space.
    #[error(
        "no room: head {head}, tail {tail}; free space ends at {free_end}, \
         no {granularity:?}-granular stop point lies after the head"
    )]
    NoRoom {
        /// The producer position.
        head: u64,
        /// The consumer position.
        tail: u64,
        /// `tail + capacity`: the first position that holds unread data.
        free_end: u64,
        /// The stop granularity that was asked for.
        granularity: Granularity,
    },
    /// The positions are inconsistent: `tail > head`, `head - tail >
    /// capacity`, or `head` is outside the domain (`>= 2^63`).
    #[error("bad positions: head {head}, tail {tail}, capacity {capacity}")]
    BadPositions {
        /// The producer position.
        head: u64,
        /// The consumer position.
        tail: u64,
        /// The buffer capacity.
        capacity: u64,
    },
}

/// Plans the STOP and notify positions for a producer at `head` and a
/// consumer at `tail`.
///
/// All positions are absolute (monotonic) and must satisfy `tail <= head <=
/// tail + capacity` and `head < 2^63`, otherwise
/// [`MarkerError::BadPositions`].
///
/// **Stop** (`stop_at`):
/// * [`Granularity::Byte`]: `stop_at = tail + capacity`, all free space.
///   [`MarkerError::NoRoom`] if that equals `head` (the buffer is full).
/// * [`Granularity::Region`]: `stop_at =
///   table.region_end_at_or_before(tail + capacity)`, the end of the last
///   region that can be filled completely without touching unread data.
///   [`MarkerError::NoRoom`] if `stop_at <= head`: the current region
///   cannot be finished (the kernel's "`output_off + free` < region size"
///   TRUNCATED check).
///
/// **Notify** (`notify_at`), with `target = min(wakeup, stop_at)`; `wakeup`
/// is the absolute position at which the consumer wants to be woken
/// (`aux_wakeup + aux_watermark` in perf terms):
/// * [`Granularity::Byte`]: `notify_at = target` clamped into `head + 1
///   ..= stop_at`. A wakeup at or before `head` therefore means "as soon as
///   the next byte is written".
/// * [`Granularity::Region`]: `notify_at =
///   table.region_end_at_or_before(target)`, the last region end that does
///   not overshoot the wakeup; if that is `<= head` (the wakeup lies in the
///   current region, or was already passed), the first region end after
///   `head` instead; in either case at most `stop_at`. With byte-granular
///   stop, `notify_at` may thus equal a `stop_at` that is not a region end.
///
/// Reaching `stop_at` should always notify as well (the kernel sets INT on
/// the STOP entry), so a wakeup beyond the stop point needs no separate
/// notify position: it yields `notify_at == stop_at` (with region-granular
/// notify and byte-granular stop, the last region end before `stop_at` if
/// one lies after `head`). The kernel differs here: it caps the INT page at
/// "stop page − 1", which, when free space ends exactly at a region end,
/// puts INT one region *before* the STOP region as an early warning. This
/// plan does not; a consumer wanting earlier wakeups passes a smaller
/// `wakeup`.
///
/// Worked example (reference §2.4): 64 KiB in regions 16K, 16K, 8K, 8K and
/// four of 4K; tail 40K, head 84K, wakeup 96K. Free space ends at 104K, the
/// start of R3 in lap 1, so `stop_at = 104K` (the end of R2), and
/// `notify_at = 96K` (the end of R1).
pub fn plan_markers(
    table: &RegionTable,
    head: u64,
    tail: u64,
    wakeup: u64,
    stop: Granularity,
    notify: Granularity,
) -> Result<MarkerPlan, MarkerError> {
    let capacity = table.capacity();
    if tail > head || head - tail > capacity || head >= MAX_POSITION {
        return Err(MarkerError::BadPositions {
            head,
            tail,
            capacity,
        });
    }
    // In the domain: tail + capacity <= head + 2^62 < 2^64.
    let free_end = tail + capacity;
    let stop_at = match stop {
        Granularity::Byte => free_end,
        Granularity::Region => table.region_end_at_or_before(free_end),
    };
    if stop_at <= head {
        return Err(MarkerError::NoRoom {
            head,
            tail,
            free_end,
            granularity: stop,
        });
    }
    let target = wakeup.min(stop_at);
    let notify_at = match notify {
        Granularity::Byte => target.clamp(head + 1, stop_at),
        Granularity::Region => {
            let at_or_before = table.region_end_at_or_before(target);
            let end = if at_or_before > head {
                at_or_before
            } else {
                table.region_end_after(head)
            };
            end.min(stop_at)
        }
    };
    Ok(MarkerPlan { stop_at, notify_at })
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;

    fn worked_example_table() -> RegionTable {
        RegionTable::new(&[16 * K, 16 * K, 8 * K, 8 * K, 4 * K, 4 * K, 4 * K, 4 * K]).unwrap()
    }

    #[test]
    fn kernel_worked_example() {
        let t = worked_example_table();
        assert_eq!(t.capacity(), 64 * K);
        let plan = plan_markers(
            &t,
            84 * K,
            40 * K,
            96 * K,
            Granularity::Region,
            Granularity::Region,
        )
        .unwrap();
        // STOP on R2 (ends at 104K == lap 1 + 40K), INT on R1 (ends at 96K).
        assert_eq!(plan.stop_at, 104 * K);
        assert_eq!(plan.notify_at, 96 * K);
        let stop_region = t.locate(plan.stop_at - 1).region;
        let int_region = t.locate(plan.notify_at - 1).region;
        assert_eq!((stop_region, int_region), (2, 1));
        // The hardware can write the remaining 12K of R1 and the 8K of R2:
        // exactly the 20K that are free.
        assert_eq!(plan.stop_at - 84 * K, 20 * K);
    }

    #[test]
    fn kernel_worked_example_truncated() {
        // Only 8K free with the head at R0 + 2K: 2K + 8K < 16K.
        let t = worked_example_table();
        let head = 64 * K + 2 * K;
        let tail = head + 8 * K - 64 * K;
        assert_eq!(
            plan_markers(
                &t,
                head,
                tail,
                head,
                Granularity::Region,
                Granularity::Region
            ),
            Err(MarkerError::NoRoom {
                head,
                tail,
                free_end: head + 8 * K,
                granularity: Granularity::Region,
            })
        );
        // Byte granularity can still use those 8K.
        let plan =
            plan_markers(&t, head, tail, head, Granularity::Byte, Granularity::Byte).unwrap();
        assert_eq!(plan.stop_at, head + 8 * K);
        assert_eq!(plan.notify_at, head + 1);
    }

    #[test]
    fn full_and_bad_positions() {
        let t = worked_example_table();
        // Exactly full: head == tail + capacity.
        assert!(matches!(
            plan_markers(&t, 64 * K, 0, 0, Granularity::Byte, Granularity::Byte),
            Err(MarkerError::NoRoom { .. })
        ));
        assert!(matches!(
            plan_markers(&t, 1, 2, 0, Granularity::Byte, Granularity::Byte),
            Err(MarkerError::BadPositions { .. })
        ));
        assert!(matches!(
            plan_markers(&t, 64 * K + 1, 0, 0, Granularity::Byte, Granularity::Byte),
            Err(MarkerError::BadPositions { .. })
        ));
        assert!(matches!(
            plan_markers(
                &t,
                MAX_POSITION,
                MAX_POSITION,
                0,
                Granularity::Byte,
                Granularity::Byte
            ),
            Err(MarkerError::BadPositions { .. })
        ));
    }

    #[test]
    fn region_notify_with_byte_stop_is_clipped() {
        // One 64K region, byte stop: the head is in the lap where free space
        // ends, so the next region end (128K) lies beyond the stop point and
        // notify falls back to the stop point.
        let t = RegionTable::new(&[64 * K]).unwrap();
        let plan =
            plan_markers(&t, 64 * K + 1, 5, 0, Granularity::Byte, Granularity::Region).unwrap();
        assert_eq!(
            plan,
            MarkerPlan {
                stop_at: 64 * K + 5,
                notify_at: 64 * K + 5
            }
        );
        // Head in the previous lap: the region end at 64K comes first.
        let plan = plan_markers(&t, 10, 5, 0, Granularity::Byte, Granularity::Region).unwrap();
        assert_eq!(
            plan,
            MarkerPlan {
                stop_at: 64 * K + 5,
                notify_at: 64 * K
            }
        );
    }
}
