//! Image reads against a byte-level model of libipt's overlap rules, under
//! random sequences of adds, removals, copies and reads.
//!
//! The model knows nothing of windows or splitting: each address holds a
//! list of `(add id, address space, file, file offset)` claims. Adding a
//! section drops, at each address it covers, the claims whose address space
//! matches, then claims the address. A read sees the newest claim that
//! matches its address space, and runs on while that same add still claims
//! the next address.

use ichnos_image::{Asid, Error, Image, Isid, SectionCache};
use proptest::prelude::*;

use super::Files;

const SPACE: u64 = 48;
const FILE_LEN: u64 = 40;
const FILES: usize = 3;

fn asid(i: u8) -> Asid {
    match i {
        0 => Asid::ANY,
        n => Asid::cr3(u64::from(n)),
    }
}

/// File `f`'s byte at `offset`: unique per (file, offset).
fn byte(f: usize, offset: u64) -> u8 {
    (f as u64 * 64 + offset) as u8
}

#[derive(Debug, Clone)]
enum Op {
    Add {
        file: usize,
        offset: u64,
        size: u64,
        vaddr: u64,
        asid: u8,
        cached: bool,
    },
    RemoveFile {
        file: usize,
        asid: u8,
    },
    RemoveAsid {
        asid: u8,
    },
    Copy,
    Read {
        asid: u8,
        vaddr: u64,
        len: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..FILES, 0..FILE_LEN - 1, 1..24u64, 0..SPACE, 0..3u8, any::<bool>()).prop_map(
            |(file, offset, size, vaddr, asid, cached)| Op::Add { file, offset, size, vaddr, asid, cached }
        ),
        1 => (0..FILES, 0..3u8).prop_map(|(file, asid)| Op::RemoveFile { file, asid }),
        1 => (0..3u8).prop_map(|asid| Op::RemoveAsid { asid }),
        1 => Just(Op::Copy),
        6 => (0..3u8, 0..SPACE + 4, 1..20usize).prop_map(|(asid, vaddr, len)| Op::Read { asid, vaddr, len }),
    ]
}

#[derive(Debug, Clone, Copy)]
struct Claim {
    add: usize,
    asid: Asid,
    file: usize,
    offset: u64,
    isid: Option<Isid>,
}

struct Model {
    bytes: Vec<Vec<Claim>>,
}

impl Model {
    /// Adds `claim`'s file range, `size` bytes, at `vaddr`.
    fn add(&mut self, claim: Claim, size: u64, vaddr: u64) {
        for i in 0..size {
            let at = (vaddr + i) as usize;
            if at >= self.bytes.len() {
                self.bytes.resize(at + 1, Vec::new());
            }
            self.bytes[at].retain(|c| !c.asid.matches(&claim.asid));
            self.bytes[at].push(Claim {
                offset: claim.offset + i,
                ..claim
            });
        }
    }

    fn remove(&mut self, mut doomed: impl FnMut(&Claim) -> bool) {
        for claims in &mut self.bytes {
            claims.retain(|c| !doomed(c));
        }
    }

    /// The bytes and isid a read of up to `len` bytes returns, or `None`.
    fn read(&self, asid: Asid, vaddr: u64, len: usize) -> Option<(Vec<u8>, Option<Isid>)> {
        let claims = self.bytes.get(vaddr as usize)?;
        let first = claims
            .iter()
            .filter(|c| c.asid.matches(&asid))
            .max_by_key(|c| c.add)?;
        let mut out = Vec::new();
        for at in vaddr as usize..self.bytes.len() {
            if out.len() == len {
                break;
            }
            match self.bytes[at].iter().find(|c| c.add == first.add) {
                Some(c) => out.push(byte(c.file, c.offset)),
                None => break,
            }
        }
        Some((out, first.isid))
    }
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let files = Files::new();
    let paths: Vec<_> = (0..FILES)
        .map(|f| {
            let bytes: Vec<u8> = (0..FILE_LEN).map(|o| byte(f, o)).collect();
            files.write(&format!("f{f}"), &bytes)
        })
        .collect();
    let cache = SectionCache::new(None);
    let mut image = Image::new(None);
    let mut model = Model { bytes: Vec::new() };
    for (n, op) in ops.iter().enumerate() {
        match *op {
            Op::Add {
                file,
                offset,
                size,
                vaddr,
                asid: a,
                cached,
            } => {
                let size = size.min(FILE_LEN - offset);
                let isid = if cached {
                    let isid = cache.add_file(&paths[file], offset, size, vaddr).unwrap();
                    image.add_cached(&cache, isid, asid(a)).unwrap();
                    Some(isid)
                } else {
                    image
                        .add_file(&paths[file], offset, size, asid(a), vaddr)
                        .unwrap();
                    None
                };
                model.add(
                    Claim {
                        add: n,
                        asid: asid(a),
                        file,
                        offset,
                        isid,
                    },
                    size,
                    vaddr,
                );
            }
            Op::RemoveFile { file, asid: a } => {
                image.remove_by_filename(&paths[file], asid(a));
                model.remove(|c| c.file == file && c.asid.matches(&asid(a)));
            }
            Op::RemoveAsid { asid: a } => {
                image.remove_by_asid(asid(a));
                model.remove(|c| c.asid.matches(&asid(a)));
            }
            Op::Copy => {
                let mut copy = Image::new(None);
                copy.copy_from(&image);
                image = copy;
            }
            Op::Read {
                asid: a,
                vaddr,
                len,
            } => {
                let mut buf = vec![0u8; len];
                let got = match image.read(&asid(a), vaddr, &mut buf) {
                    Ok(r) => Some((buf[..r.len].to_vec(), r.isid)),
                    Err(Error::NoMapping { .. }) => None,
                    Err(e) => return Err(TestCaseError::fail(format!("op {n}: {e}"))),
                };
                prop_assert_eq!(got, model.read(asid(a), vaddr, len), "op {}: {:?}", n, op);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn image_reads_agree_with_the_byte_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(&ops)?;
    }
}
