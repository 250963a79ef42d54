//! The walk cache's packing of a frame's row source.

use super::cache::CacheEntry;
use super::*;

/// The walk cache keeps each frame's row source in three bits beside
/// the row's own: every source comes back as it went in, and the
/// row's bits are untouched by it.
#[test]
fn a_cache_entry_keeps_its_rows_source() {
    let sources = [
        RowSource::Sframe,
        RowSource::EhFrame,
        RowSource::DebugFrame,
        RowSource::GoTable,
        RowSource::Jit,
        RowSource::None,
    ];
    let row = crate::row::UnwindRow {
        size: 4,
        ip_off: 0,
        cfa_off: 16,
        ra_off: X86_64_RA_OFFSET,
        fp_off: -16,
        info: crate::row::ROW_CFA_BASE_SP | crate::row::ROW_MANGLED_RA,
    };
    for source in sources {
        let entry = CacheEntry::new(1, &row, source).unwrap();
        let Lookup::Row(back, back_source) = entry.lookup() else {
            panic!("a row");
        };
        assert_eq!(back_source, source);
        assert_eq!(back.info, row.info);
    }
}
