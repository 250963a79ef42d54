//! Profiles in the formats of the viewers people use: the Firefox
//! Profiler's processed format, pprof (`go tool pprof`, Parca,
//! Pyroscope), speedscope, and flame graph SVGs (inferno).
//! docs/export-formats.md says what each file holds.
//!
//! Every export but the Firefox one is made from the aggregated stacks
//! ([`Weighted`]: one per distinct stack and thread), never from the
//! samples one by one, so its memory is bounded by the distinct stacks
//! however long the recording. The Firefox format is a timeline of every
//! sample: its sample tables are streamed from further reads of the
//! recording, within a fixed budget of memory.
//! Frames are named when the file is written: an exported profile stays
//! symbolized wherever it is opened.

mod firefox;
mod flamegraph;
mod pprof;
pub mod profile_proto;
mod speedscope;

use std::collections::HashMap;
use std::sync::Arc;

pub use firefox::{write_firefox, FirefoxError, SAMPLE_TEXT_BUDGET};
pub(crate) use flamegraph::{keeping_io_kind, write_empty_flamegraph};
pub use flamegraph::{write_flamegraph, write_folded_flamegraph, FlamegraphOptions};
pub use pprof::{pprof_profile, write_pprof, PprofOptions};
pub use speedscope::write_speedscope;

use super::load::Profile;
#[cfg(doc)]
use super::Weighted;

/// Where an object named in frames came from: the path it was mapped
/// from and its build id in hex.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ObjectFile {
    path: String,
    build_id: String,
}

/// The mapped files of `profile` by the short name frames give their
/// objects (the file name). Two files of one name in different
/// directories: the first mapped is named.
fn object_files(profile: &Profile) -> HashMap<Arc<str>, ObjectFile> {
    let mut files = HashMap::new();
    for m in &profile.mappings {
        if !crate::mapping::is_file(&m.path) {
            continue;
        }
        let path = String::from_utf8_lossy(&m.path).into_owned();
        let short: Arc<str> = Arc::from(path.rsplit('/').next().unwrap_or(&path));
        files.entry(short).or_insert_with(|| ObjectFile {
            build_id: m.build_id.iter().fold(String::new(), |mut hex, b| {
                use std::fmt::Write;
                let _ = write!(hex, "{b:02x}");
                hex
            }),
            path,
        });
    }
    files
}
