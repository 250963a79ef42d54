//! The recording read into a profile: spaces, mappings, JIT names and
//! thread names as the records give them.

use super::*;
use ichnos_data::{StackOut, StackStop};

fn mapping(start: u64, pgoff: u64, path: &[u8]) -> Record<'_> {
    Record::Mapping {
        asid: 1,
        start,
        len: 0x1000,
        pgoff,
        time: 0,
        path,
        build_id: &[],
        flags: ichnos_data::MAPPING_EXECUTABLE,
    }
}

fn stack(id: u64, frames: &[u64]) -> Record<'_> {
    Record::StackOut(StackOut {
        id,
        asid: 1,
        stop: StackStop::Complete,
        frames,
    })
}

/// A frame in no mapping when its stack came is placed in the mapping
/// written after it; a frame placed when its stack came keeps its
/// mapping, though a later one covers its address.
#[test]
fn unmapped_frames_are_placed_in_the_final_mappings_and_placed_ones_kept() {
    let mut profile = Profile::default();
    profile.add(&mapping(0x5000, 0, b"/old.so"));
    profile.add(&stack(0, &[0x5010]));
    profile.add(&stack(1, &[0x7010]));
    profile.add(&mapping(0x7000, 0x3000, b"/lib.so"));
    profile.add(&mapping(0x5000, 0, b"/new.so"));
    let place = |p: &Profile, id: usize| p.stacks[id].as_ref().unwrap().frames[0].1;
    assert_eq!(place(&profile, 1), Place::Unmapped, "as read");
    profile.place_unmapped_in_final_mappings();
    let name = |p: &Profile, place: Place| match place {
        Place::Mapped { mapping, offset } => (
            String::from_utf8_lossy(&p.mappings[mapping].path).into_owned(),
            offset,
        ),
        Place::Unmapped | Place::Kernel => (String::new(), 0),
    };
    assert_eq!(
        name(&profile, place(&profile, 1)),
        ("/lib.so".into(), 0x3010)
    );
    assert_eq!(name(&profile, place(&profile, 0)), ("/old.so".into(), 0x10));
}

/// A process renewed (JIT memory reused under a new name) keeps its
/// old names in its old address space; a name that first comes after
/// the renewal, for code no earlier name covered, names that code in
/// the old spaces too, but not across a fork to another process.
#[test]
fn a_late_jit_name_reaches_the_spaces_its_process_was_renewed_from() {
    let process = |asid, pid, parent| Record::Process {
        asid,
        pid,
        parent,
        time: 0,
        name: b"jit",
    };
    let jit = |asid, start, name| Record::JitCode {
        asid,
        start,
        end: start + 0x10,
        source: ichnos_data::JitSource::PerfMap,
        name,
    };
    let mut profile = Profile::default();
    profile.add(&process(1, 7, 0));
    profile.add(&jit(1, 0x1000, b"old"));
    // Renewed: 0x1000 holds other code.
    profile.add(&process(2, 7, 1));
    profile.add(&jit(2, 0x1000, b"new"));
    // A fork, then a name known only after both.
    profile.add(&process(3, 8, 2));
    profile.add(&jit(2, 0x2000, b"late"));
    profile.add(&jit(3, 0x3000, b"child"));
    let name = |asid, pc| profile.jit_name(asid, pc).map(|n| n.name.to_string());
    assert_eq!(name(1, 0x1000).as_deref(), Some("old"));
    assert_eq!(name(2, 0x1000).as_deref(), Some("new"));
    assert_eq!(name(1, 0x2000).as_deref(), Some("late"));
    assert_eq!(name(2, 0x3000), None, "a child's name stays the child's");
    assert_eq!(
        name(3, 0x2000),
        None,
        "copied at the fork, before the name came"
    );
}

/// Each program's samples are named by the name the thread had in it:
/// an exec that keeps the name writes no thread record, and the
/// program it runs is named by its process record, not by whatever
/// name the thread takes in a later one.
#[test]
fn a_program_whose_exec_kept_the_name_is_named_by_its_process_record() {
    // An exec's space is of no parent (`model.rs`, `begin`).
    let process = |asid, name| Record::Process {
        asid,
        pid: 7,
        parent: 0,
        time: 0,
        name,
    };
    let thread = |name| Record::Thread {
        pid: 7,
        tid: 7,
        time: 0,
        name,
    };
    let mut profile = Profile::default();
    profile.add(&process(1, b"sh"));
    profile.add(&thread(b"sh"));
    // `exec sh`: the same name, no thread record.
    profile.add(&process(2, b"sh"));
    profile.add(&process(3, b"make"));
    profile.add(&thread(b"make"));
    let name = |asid| profile.thread_name_in(asid, 7, 7).map(ToString::to_string);
    assert_eq!(name(1).as_deref(), Some("sh"));
    assert_eq!(name(2).as_deref(), Some("sh"));
    assert_eq!(name(3).as_deref(), Some("make"));
}

/// Frames in the kernel's half of the address space are the kernel's,
/// whatever the mappings say, and are named by the kernel functions the
/// recording holds, each up to its end.
#[test]
fn kernel_frames_are_placed_in_the_kernel_and_named_by_its_functions() {
    let mut profile = Profile::default();
    profile.add(&mapping(0x5000, 0, b"/bin/prog"));
    let (read, ext4) = (0xffff_ffff_8120_0000u64, 0xffff_ffff_c000_0000u64);
    profile.add(&Record::KernelSymbol {
        start: read,
        end: read + 0x100,
        module: b"",
        name: b"vfs_read",
    });
    profile.add(&Record::KernelSymbol {
        start: ext4,
        end: ext4 + 0x40,
        module: b"ext4",
        name: b"ext4_file_read_iter",
    });
    // The first frame is looked up at itself, the others minus one.
    profile.add(&stack(
        0,
        &[ext4 + 0x10, read + 0x100, read + 0x101, 0x5011],
    ));
    let frames = &profile.stacks[0].as_ref().unwrap().frames;
    let places: Vec<Place> = frames.iter().map(|&(_, p)| p).collect();
    assert_eq!(&places[..3], [Place::Kernel; 3]);
    assert!(matches!(places[3], Place::Mapped { offset: 0x10, .. }));
    let names: Vec<Option<&str>> = frames[..3]
        .iter()
        .map(|&(pc, _)| profile.kernel_function(pc).map(|f| &*f.name))
        .collect();
    // vfs_read's last byte is at +0xff: a return to +0x100 is from a
    // call in it, a return to +0x101 from past it.
    assert_eq!(names, [Some("ext4_file_read_iter"), Some("vfs_read"), None]);
    assert_eq!(profile.kernel_function(read - 1), None);
    assert_eq!(&*profile.kernel_function(ext4).unwrap().module, "ext4");
}
