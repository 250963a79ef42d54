//! Code objects placed from single mappings (as a recorder's mmap records
//! give them), against the placement `/proc/self/maps` shows: where each
//! file's first page is mapped.

use std::path::Path;

use ichnos_code::elf::RowChoice;
use ichnos_code::process::{
    code_object_for_mapping, executable_file_mappings, FileMapping, MappingError,
};

#[test]
fn every_executable_mapping_of_this_process_is_placed_at_its_files_first_page() {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap();
    let entries = ichnos_image::parse_maps(std::process::id(), &text).unwrap();
    let mut checked = 0;
    for (m, origin) in executable_file_mappings(&entries) {
        let Some(origin) = origin else { continue };
        let mapping = FileMapping {
            start: m.range.start,
            end: m.range.end,
            pgoff: m.offset,
        };
        let object =
            code_object_for_mapping(Path::new(&m.name), &m.name, mapping, RowChoice::EhFrame)
                .unwrap_or_else(|e| panic!("{}: {e}", m.name));
        assert_eq!(
            object.bias, origin,
            "{} mapped at {:#x}",
            m.name, m.range.start
        );
        assert_eq!((object.start, object.end), (m.range.start, m.range.end));
        // The text of a file mapped from a later page: not its first page.
        assert_ne!(m.offset, 0, "{}", m.name);
        // The code has rows.
        assert!(object
            .find_row(m.range.start + (m.range.end - m.range.start) / 2)
            .is_some());
        checked += 1;
    }
    // The test binary and libc at least.
    assert!(checked >= 2, "{checked} mappings checked");
}

#[test]
fn what_cannot_be_placed_says_why() {
    let mapping = FileMapping {
        start: 0x1000,
        end: 0x2000,
        pgoff: 0x7fff_0000,
    };
    let exe = std::env::current_exe().unwrap();
    let e = code_object_for_mapping(&exe, "x", mapping, RowChoice::EhFrame).unwrap_err();
    assert!(
        matches!(
            e,
            MappingError::NoSegment {
                pgoff: 0x7fff_0000,
                ..
            }
        ),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text");
    std::fs::write(&text, "not an ELF file").unwrap();
    let mapping = FileMapping {
        pgoff: 0,
        ..mapping
    };
    let e = code_object_for_mapping(&text, "x", mapping, RowChoice::EhFrame).unwrap_err();
    assert!(matches!(e, MappingError::BadElf { .. }), "{e}");
    let e = code_object_for_mapping(dir.path(), "x", mapping, RowChoice::EhFrame).unwrap_err();
    assert!(matches!(e, MappingError::Io { .. }), "{e}");
    assert!(e.to_string().contains("not a regular file"), "{e}");
}

#[test]
fn only_regular_files_are_opened_and_links_are_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"bytes").unwrap();
    assert!(ichnos_code::elf::open_regular(&file).is_ok());
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    assert!(ichnos_code::elf::open_regular(&link).is_err());
    assert!(ichnos_code::elf::open_regular(dir.path()).is_err());
    // A FIFO is refused at once, not waited on for a writer.
    let fifo = dir.path().join("fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(ichnos_code::elf::open_regular(&fifo).is_err());
}
