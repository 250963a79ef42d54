//! The tables of a thread completed: the labels that stood for frames
//! become their functions' names, functions of one name, object and
//! source file become one, each frame gets its line, and the objects
//! become libraries.

use std::collections::HashMap;
use std::sync::Arc;

use fxprof_processed_profile as fx;
use serde_json::{json, Value};

use super::super::super::symbols::Frame;
use super::super::ObjectFile;
use super::{FirefoxError, RawObject, LABEL_MARK};

/// The library entry of an object, as the processed format's `libs` hold
/// them: its build id as the code id, and as the breakpad id the
/// Firefox Profiler derives from it.
fn library(name: &str, file: &ObjectFile) -> Value {
    let build_id: Vec<u8> = (0..file.build_id.len() / 2)
        .filter_map(|i| u8::from_str_radix(file.build_id.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    let breakpad_id = if build_id.is_empty() {
        String::new()
    } else {
        // The first 16 bytes as a GUID, its first three fields read as
        // little-endian (how ELF build ids become debug ids), age 0:
        // `from_guid_age` takes the bytes so and swaps the fields itself.
        let mut guid = [0u8; 16];
        for (slot, b) in guid.iter_mut().zip(&build_id) {
            *slot = *b;
        }
        fx::debugid::DebugId::from_guid_age(&guid, 0)
            .map(|id| id.breakpad().to_string())
            .unwrap_or_default()
    };
    json!({
        "name": name,
        "path": file.path,
        "debugName": name,
        "debugPath": file.path,
        "breakpadId": breakpad_id,
        "codeId": if file.build_id.is_empty() { Value::Null } else { json!(file.build_id) },
        "arch": "x86_64",
    })
}

/// Turns the labels the crate was given into the frames they stand for,
/// in each of `threads` as the crate serialized them: function names,
/// source files and lines, and objects as libraries. Returns the
/// profile's `libs`.
pub(super) fn complete(
    threads: &mut [RawObject],
    frames: &[Frame],
    files: &HashMap<Arc<str>, ObjectFile>,
) -> Result<Vec<Value>, FirefoxError> {
    let mut libs = Libraries {
        files,
        list: Vec::new(),
        index: HashMap::new(),
    };
    for thread in threads {
        // Only the tables completed are parsed.
        let mut tables = serde_json::Map::new();
        for key in TABLES {
            let raw = thread.get(key).ok_or(FirefoxError::Layout(key))?;
            tables.insert(key.to_owned(), serde_json::from_str(raw.get())?);
        }
        let mut tables = Value::Object(tables);
        complete_thread(&mut tables, frames, &mut libs)?;
        for key in TABLES {
            thread.insert(
                key.to_owned(),
                serde_json::value::to_raw_value(&tables[key])?,
            );
        }
    }
    Ok(libs.list)
}

/// The tables of a thread that are completed.
const TABLES: [&str; 4] = ["frameTable", "funcTable", "resourceTable", "stringArray"];

/// A column of a table, as an array.
fn column<'a>(
    table: &'a mut Value,
    name: &'static str,
) -> Result<&'a mut Vec<Value>, FirefoxError> {
    table
        .get_mut(name)
        .and_then(Value::as_array_mut)
        .ok_or(FirefoxError::Layout(name))
}

/// A thread's strings, each added once.
struct Strings {
    all: Vec<String>,
    index: HashMap<String, usize>,
}

impl Strings {
    fn get(&mut self, text: &str) -> usize {
        if let Some(&i) = self.index.get(text) {
            return i;
        }
        self.all.push(text.to_owned());
        self.index.insert(text.to_owned(), self.all.len() - 1);
        self.all.len() - 1
    }
}

/// The objects as libraries, across threads.
struct Libraries<'a> {
    files: &'a HashMap<Arc<str>, ObjectFile>,
    list: Vec<Value>,
    index: HashMap<Arc<str>, usize>,
}

/// A function of the Firefox profile: its name, object and source file.
type FunctionKey = (Arc<str>, Arc<str>, Option<Arc<str>>);

/// A thread's new function and resource tables.
#[derive(Default)]
struct Functions {
    by_key: HashMap<FunctionKey, usize>,
    names: Vec<Value>,
    file_names: Vec<Value>,
    resources: Vec<Value>,
    resource_of_object: HashMap<Arc<str>, usize>,
    resource_libs: Vec<Value>,
    resource_names: Vec<Value>,
}

impl Functions {
    /// The function of `frame`: one per name, object and source file.
    fn of(&mut self, frame: &Frame, strings: &mut Strings, libs: &mut Libraries<'_>) -> usize {
        let file = frame.source.as_ref().map(|(f, _)| Arc::clone(f));
        let key = (
            Arc::clone(&frame.function),
            Arc::clone(&frame.object),
            file.clone(),
        );
        if let Some(&i) = self.by_key.get(&key) {
            return i;
        }
        self.names.push(json!(strings.get(&frame.function)));
        self.file_names
            .push(file.map_or(Value::Null, |f| json!(strings.get(&f))));
        let resource = match libs.files.get(&frame.object) {
            Some(file) if !frame.jit => {
                let lib = if let Some(&l) = libs.index.get(&frame.object) {
                    l
                } else {
                    libs.list.push(library(&frame.object, file));
                    libs.index
                        .insert(Arc::clone(&frame.object), libs.list.len() - 1);
                    libs.list.len() - 1
                };
                let next = self.resource_libs.len();
                let r = *self
                    .resource_of_object
                    .entry(Arc::clone(&frame.object))
                    .or_insert(next);
                if r == next {
                    self.resource_libs.push(json!(lib));
                    self.resource_names.push(json!(strings.get(&frame.object)));
                }
                json!(r)
            }
            _ => json!(-1),
        };
        self.resources.push(resource);
        self.by_key.insert(key, self.names.len() - 1);
        self.names.len() - 1
    }
}

fn complete_thread(
    thread: &mut Value,
    frames: &[Frame],
    libs: &mut Libraries<'_>,
) -> Result<(), FirefoxError> {
    let all: Vec<String> = thread
        .get("stringArray")
        .and_then(Value::as_array)
        .ok_or(FirefoxError::Layout("stringArray"))?
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_owned())
        .collect();
    let mut strings = Strings {
        all,
        index: HashMap::new(),
    };
    // The frame each of the crate's functions (one per label) stands for.
    let old_names: Vec<usize> = column(&mut thread["funcTable"], "name")?
        .iter()
        .map(|v| v.as_u64().map_or(usize::MAX, |i| i as usize))
        .collect();
    let old_frames: Vec<Option<&Frame>> = old_names
        .iter()
        .map(|&i| {
            let id: usize = strings.all.get(i)?.strip_prefix(LABEL_MARK)?.parse().ok()?;
            frames.get(id)
        })
        .collect();
    let mut funcs = Functions::default();
    let new_of_old: Vec<Option<usize>> = old_frames
        .iter()
        .map(|f| f.map(|f| funcs.of(f, &mut strings, libs)))
        .collect();
    let count = funcs.names.len();
    thread["funcTable"] = json!({
        "length": count,
        "name": funcs.names,
        "isJS": vec![false; count],
        "relevantForJS": vec![false; count],
        "resource": funcs.resources,
        "fileName": funcs.file_names,
        "lineNumber": vec![Value::Null; count],
        "columnNumber": vec![Value::Null; count],
    });
    let resources = funcs.resource_libs.len();
    thread["resourceTable"] = json!({
        "length": resources,
        "lib": funcs.resource_libs,
        "name": funcs.resource_names,
        "host": vec![Value::Null; resources],
        "type": vec![1; resources],
    });
    // Each frame points at its new function and carries its line.
    let frame_table = &mut thread["frameTable"];
    let mut new_funcs = Vec::new();
    let mut lines = Vec::new();
    for old in column(frame_table, "func")?.iter() {
        let old = old.as_u64().map_or(usize::MAX, |i| i as usize);
        let (Some(Some(new)), Some(Some(frame))) = (new_of_old.get(old), old_frames.get(old))
        else {
            return Err(FirefoxError::Layout("a frame of no known function"));
        };
        new_funcs.push(json!(new));
        lines.push(frame.source.as_ref().map_or(Value::Null, |(_, l)| json!(l)));
    }
    *column(frame_table, "func")? = new_funcs;
    *column(frame_table, "line")? = lines;
    // The labels are no longer referred to: what they stood for replaces
    // them, so that no placeholder is left in the file.
    for (&i, frame) in old_names.iter().zip(&old_frames) {
        if let (Some(slot), Some(frame)) = (strings.all.get_mut(i), frame) {
            *slot = frame.function.to_string();
        }
    }
    thread["stringArray"] = json!(strings.all);
    Ok(())
}
