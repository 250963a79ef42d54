//! The `Memory` implementations: an `ichnos-image` image of a program's
//! files, the live process (a bad address is an error, not a fault), and a
//! block of bytes.

use ichnos_code::memory::{Bytes, Memory, NoMemory, Overlay, ProcessMemory};
use ichnos_image::{load_segments, Asid, Image};

#[test]
fn an_image_serves_reads_across_its_segments() {
    let path = std::path::Path::new("/bin/ls");
    let file = std::fs::read(path).unwrap();
    let bias = 0x5555_0000_0000;
    let mut image = Image::new(Some("ls"));
    image.add_elf(path, bias, Asid::ANY).unwrap();
    let segments = load_segments(path, bias).unwrap();
    assert!(segments.len() >= 2);
    for s in &segments {
        let len = s.filesz.min(4096) as usize;
        let mut got = vec![0u8; len];
        Memory::read(&mut image, s.vaddr, &mut got).unwrap();
        assert_eq!(got, file[s.offset as usize..s.offset as usize + len]);
        // The last word of the segment, read as an unwinder would.
        let last = s.vaddr + s.filesz - 8;
        let want = u64::from_le_bytes(
            file[(s.offset + s.filesz - 8) as usize..(s.offset + s.filesz) as usize]
                .try_into()
                .unwrap(),
        );
        assert_eq!(image.read_u64(last).unwrap(), want);
    }
    // Past the end of every segment: an error naming the address.
    let end = segments.iter().map(|s| s.vaddr + s.filesz).max().unwrap();
    let e = image.read_u64(end + 0x10_0000).unwrap_err();
    assert_eq!(e.addr, end + 0x10_0000);
}

#[test]
fn the_live_process_is_read_without_faults() {
    let value: u64 = 0x0123_4567_89ab_cdef;
    let mut me = ProcessMemory::current();
    assert_eq!(
        me.read_u64(std::ptr::addr_of!(value) as u64).unwrap(),
        value
    );
    assert!(me.read_u64(0x10).is_err());
    assert!(me.read_u64(u64::MAX - 4).is_err());
}

#[test]
fn bytes_are_read_only_inside_the_block() {
    let data: Vec<u8> = (0..32).collect();
    let mut b = Bytes {
        addr: 0x1000,
        data: &data,
    };
    assert_eq!(
        b.read_u64(0x1018).unwrap(),
        u64::from_le_bytes(data[24..32].try_into().unwrap())
    );
    assert!(b.read_u64(0x1019).is_err());
    assert!(b.read_u64(0xfff).is_err());
    assert!(b.read_u64(u64::MAX).is_err());
}

#[test]
fn an_overlay_serves_what_its_bytes_hold_whole_and_the_rest_from_below() {
    let over: Vec<u8> = (0..16).collect();
    let under: Vec<u8> = (100..164).collect();
    let mut below = Bytes {
        addr: 0x1000,
        data: &under,
    };
    let mut m = Overlay {
        bytes: Bytes {
            addr: 0x1010,
            data: &over,
        },
        under: &mut below,
    };
    // Inside the bytes laid over: theirs, not what lies below.
    assert_eq!(
        m.read_u64(0x1018).unwrap(),
        u64::from_le_bytes(over[8..16].try_into().unwrap())
    );
    // Outside them: from below.
    assert_eq!(
        m.read_u64(0x1030).unwrap(),
        u64::from_le_bytes(under[0x30..0x38].try_into().unwrap())
    );
    // Across their edge: not pieced together; from below, where it is
    // whole.
    assert_eq!(
        m.read_u64(0x101c).unwrap(),
        u64::from_le_bytes(under[0x1c..0x24].try_into().unwrap())
    );
    // Nothing below: only the bytes themselves, and an error naming the
    // address elsewhere.
    let mut nothing = NoMemory;
    let mut m = Overlay {
        bytes: Bytes {
            addr: 0x1010,
            data: &over,
        },
        under: &mut nothing,
    };
    assert_eq!(
        m.read_u64(0x1010).unwrap(),
        u64::from_le_bytes(over[..8].try_into().unwrap())
    );
    assert_eq!(m.read_u64(0x1020).unwrap_err().addr, 0x1020);
}
