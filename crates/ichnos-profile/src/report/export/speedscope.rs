//! speedscope's JSON file format (its `file-format-schema.json`): the
//! frames shared by every profile, and one sampled profile per thread,
//! heaviest first, each distinct stack listed once, root first, with its
//! weight.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

use ichnos_data::StackStop;
use serde_json::{json, Value};

use super::super::load::Profile;
use super::super::print::INCOMPLETE;
use super::super::Weighted;

/// A frame as speedscope tells frames apart: its name, object and source
/// line.
type FrameKey = (Arc<str>, Arc<str>, Option<(Arc<str>, u32)>);

/// One thread's samples: each distinct stack of frames once (stacks of
/// different addresses can name the same frames).
struct Thread {
    name: String,
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
    index: HashMap<Vec<usize>, usize>,
    total: u64,
}

/// Writes `samples` of `profile` as a speedscope file.
pub fn write_speedscope(
    profile: &Profile,
    samples: &[Weighted<'_>],
    out: &mut dyn Write,
) -> io::Result<()> {
    let nanoseconds = matches!(profile.description.event.as_str(), "cpu-clock" | "");
    let mut frames: Vec<Value> = Vec::new();
    let mut frame_index: HashMap<FrameKey, usize> = HashMap::new();
    // Where the source is not known, the object stands as the file, so
    // that functions of one name in two objects stay apart.
    let mut index_of = |name: &Arc<str>, object: &Arc<str>, source: &Option<(Arc<str>, u32)>| {
        *frame_index
            .entry((Arc::clone(name), Arc::clone(object), source.clone()))
            .or_insert_with(|| {
                let mut frame = json!({ "name": &**name });
                if let Some((file, line)) = source {
                    frame["file"] = json!(&**file);
                    frame["line"] = json!(line);
                } else if !object.is_empty() {
                    frame["file"] = json!(&**object);
                }
                frames.push(frame);
                frames.len() - 1
            })
    };
    let incomplete: Arc<str> = Arc::from(INCOMPLETE);
    let mut threads: HashMap<(u32, u32), Thread> = HashMap::new();
    for w in samples {
        let mut stack = Vec::with_capacity(w.frames.len() + 1);
        if w.stop != StackStop::Complete {
            stack.push(index_of(&incomplete, &Arc::from(""), &None));
        }
        stack.extend(
            w.frames
                .iter()
                .rev()
                .map(|f| index_of(&f.function, &f.object, &f.source)),
        );
        let weight = if nanoseconds {
            w.tally.weight
        } else {
            w.tally.samples
        };
        let thread = threads.entry((w.pid, w.tid)).or_insert_with(|| Thread {
            name: format!("{} (pid {}, tid {})", w.thread, w.pid, w.tid),
            samples: Vec::new(),
            weights: Vec::new(),
            index: HashMap::new(),
            total: 0,
        });
        if let Some(&i) = thread.index.get(&stack) {
            thread.weights[i] = thread.weights[i].saturating_add(weight);
        } else {
            thread.index.insert(stack.clone(), thread.samples.len());
            thread.samples.push(stack);
            thread.weights.push(weight);
        }
        thread.total = thread.total.saturating_add(weight);
    }
    let mut threads: Vec<((u32, u32), Thread)> = threads.into_iter().collect();
    threads.sort_unstable_by(|(a, ta), (b, tb)| tb.total.cmp(&ta.total).then(a.cmp(b)));
    let profiles_empty = threads.is_empty();
    let profiles: Vec<Value> = threads
        .into_iter()
        .map(|(_, t)| {
            json!({
                "type": "sampled",
                "name": t.name,
                "unit": if nanoseconds { "nanoseconds" } else { "none" },
                "startValue": 0,
                "endValue": t.total,
                "samples": t.samples,
                "weights": t.weights,
            })
        })
        .collect();
    let d = &profile.description;
    let name = if d.command.is_empty() {
        "ichnos profile".to_owned()
    } else {
        d.command_line()
    };
    let mut file = json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "exporter": format!("ichnos {}", env!("CARGO_PKG_VERSION")),
        "name": name,
        "shared": { "frames": frames },
        "profiles": profiles,
    });
    // The heaviest thread first; no index into an empty list.
    if !profiles_empty {
        file["activeProfileIndex"] = json!(0);
    }
    serde_json::to_writer(&mut *out, &file)?;
    writeln!(out)?;
    out.flush()
}
