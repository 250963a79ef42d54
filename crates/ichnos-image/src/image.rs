//! Images: the memory of one traced program, as windows onto sections placed
//! at virtual addresses within address spaces.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Weak};

use crate::cache::{copy_out, Isid, SectionCache};
use crate::error::{Error, Result};
use crate::loader::Mapping;
use crate::section::Section;
use crate::Asid;

/// A function that supplies memory no section covers: it fills the buffer
/// from the address in the address space and returns how many bytes it wrote.
pub type ReadCallback = dyn FnMut(&mut [u8], &Asid, u64) -> Result<usize> + Send;

/// What a read returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOutcome {
    /// Bytes read: at least 1, less than asked for where the section ends.
    pub len: usize,
    /// The cache entry the bytes came from; `None` for sections added with
    /// [`Image::add_file`] and for bytes supplied by the callback.
    pub isid: Option<Isid>,
}

/// One section as an image shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageSection<'a> {
    /// The file, as named when the section was added.
    pub path: &'a Path,
    /// Offset in the file of the first byte shown.
    pub file_offset: u64,
    /// Bytes shown.
    pub size: u64,
    /// Address of the first byte shown.
    pub vaddr: u64,
    /// The address space the section belongs to.
    pub asid: Asid,
    /// The cache entry the section came from, if any.
    pub isid: Option<Isid>,
}

/// A window onto a section: `[begin, end)` shows the section's bytes from
/// `offset`. Pieces of a split section are windows onto the same section.
#[derive(Debug, Clone)]
struct Window {
    section: Arc<Section>,
    begin: u64,
    end: u64,
    /// Offset into the section of the byte shown at `begin`.
    offset: u64,
    asid: Asid,
    isid: Option<Isid>,
    /// Order of addition; among windows that a wildcard read sees at one
    /// address, the newest wins.
    seq: u64,
    /// The mapping this window last read through, shared with every other
    /// user of the section while anyone keeps it alive.
    mapping: Weak<Mapping>,
}

/// The last window a read hit, with its mapping held, so that reads near the
/// previous one cost a compare and a copy.
#[derive(Debug)]
struct LastHit {
    begin: u64,
    end: u64,
    asid: Asid,
    isid: Option<Isid>,
    mapping: Arc<Mapping>,
    /// Offset into the section's bytes of the byte at `begin`.
    offset: u64,
}

/// The memory image of a traced program: sections of files placed at virtual
/// addresses in address spaces, the equivalent of libipt's `struct pt_image`.
///
/// Sections added later win where they overlap earlier ones in a matching
/// address space: the earlier section is shrunk or split into two windows that
/// keep its isid. An image is used by one thread at a time (it is `Send`);
/// give each decoder or thread its own image and share sections between them
/// with [`copy_from`](Self::copy_from) or a [`SectionCache`], which costs no
/// copy of file data.
pub struct Image {
    name: Option<String>,
    /// Sorted by `(begin, seq)`.
    windows: Vec<Window>,
    /// `reach[i]` is the largest `end` among `windows[..=i]`: lets a lookup
    /// stop scanning backwards once no earlier window can reach the address.
    reach: Vec<u64>,
    next_seq: u64,
    last: Option<LastHit>,
    callback: Option<Box<ReadCallback>>,
}

impl fmt::Debug for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Image")
            .field("name", &self.name)
            .field("sections", &self.windows.len())
            .field("callback", &self.callback.is_some())
            .finish_non_exhaustive()
    }
}

impl Image {
    /// Creates an empty image. The name is copied.
    #[must_use]
    pub fn new(name: Option<&str>) -> Image {
        Image {
            name: name.map(str::to_owned),
            windows: Vec::new(),
            reach: Vec::new(),
            next_seq: 0,
            last: None,
            callback: None,
        }
    }

    /// The image's name, if it was given one.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Number of sections (windows) in the image.
    #[must_use]
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// Whether the image holds no section.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// The image's sections in address order.
    pub fn sections(&self) -> impl Iterator<Item = ImageSection<'_>> {
        self.windows.iter().map(|w| ImageSection {
            path: &w.section.path,
            file_offset: w.section.offset + w.offset,
            size: w.end - w.begin,
            vaddr: w.begin,
            asid: w.asid,
            isid: w.isid,
        })
    }

    /// Adds `size` bytes at `offset` of the file `path` at `vaddr` in `asid`,
    /// outside any cache (the section has no isid). The size is cut to the end
    /// of the file.
    pub fn add_file(
        &mut self,
        path: impl AsRef<Path>,
        offset: u64,
        size: u64,
        asid: Asid,
        vaddr: u64,
    ) -> Result<()> {
        let section = Arc::new(Section::new(path.as_ref(), offset, size, Weak::new())?);
        self.add_section(section, vaddr, asid, None)
    }

    /// Adds the cache entry `isid` at its load address in `asid`. The image
    /// shares the cache's section and mapping.
    pub fn add_cached(&mut self, cache: &SectionCache, isid: Isid, asid: Asid) -> Result<()> {
        let (section, vaddr) = cache.entry(isid)?;
        self.add_section(section, vaddr, asid, Some(isid))
    }

    fn add_section(
        &mut self,
        section: Arc<Section>,
        vaddr: u64,
        asid: Asid,
        isid: Option<Isid>,
    ) -> Result<()> {
        let end = vaddr
            .checked_add(section.size)
            .ok_or(Error::AddressOverflow {
                vaddr,
                size: section.size,
            })?;
        self.next_seq += 1;
        self.insert(Window {
            begin: vaddr,
            end,
            offset: 0,
            asid,
            isid,
            seq: self.next_seq,
            mapping: Weak::new(),
            section,
        });
        Ok(())
    }

    /// Places `new`, shrinking or splitting the windows it overlaps in a
    /// matching address space (libipt's `pt_image_add`).
    fn insert(&mut self, new: Window) {
        self.last = None;
        let (begin, end) = (new.begin, new.end);
        let below_end = self.windows.partition_point(|w| w.begin < end);
        let mut victims = Vec::new();
        for j in (0..below_end).rev() {
            if self.reach[j] <= begin {
                break;
            }
            let w = &self.windows[j];
            if w.end > begin && w.asid.matches(&new.asid) {
                victims.push(j);
            }
        }
        let mut changed_from = self.windows.len();
        let mut placed = Vec::with_capacity(2 * victims.len() + 1);
        // Descending indexes: each removal leaves the remaining ones valid.
        for j in victims {
            changed_from = j;
            let old = self.windows.remove(j);
            if old.begin < begin {
                placed.push(Window {
                    end: begin,
                    ..old.clone()
                });
            }
            if old.end > end {
                placed.push(Window {
                    begin: end,
                    offset: old.offset + (end - old.begin),
                    ..old
                });
            }
        }
        placed.push(new);
        for w in placed {
            let at = self
                .windows
                .partition_point(|x| (x.begin, x.seq) < (w.begin, w.seq));
            changed_from = changed_from.min(at);
            self.windows.insert(at, w);
        }
        self.recompute_reach(changed_from);
    }

    fn recompute_reach(&mut self, from: usize) {
        self.reach.truncate(from);
        let mut reach = self.reach.last().copied().unwrap_or(0);
        for w in &self.windows[from..] {
            reach = reach.max(w.end);
            self.reach.push(reach);
        }
    }

    fn remove_where(&mut self, mut doomed: impl FnMut(&Window) -> bool) -> usize {
        let before = self.windows.len();
        self.windows.retain(|w| !doomed(w));
        let removed = before - self.windows.len();
        if removed > 0 {
            self.last = None;
            self.recompute_reach(0);
        }
        removed
    }

    /// Removes every section of the file named `path` (compared as text, as
    /// libipt does) in an address space matching `asid`. Returns how many
    /// windows were removed; the pieces of a split section count separately.
    pub fn remove_by_filename(&mut self, path: impl AsRef<Path>, asid: Asid) -> usize {
        let name = path.as_ref().as_os_str();
        self.remove_where(|w| w.section.path.as_os_str() == name && w.asid.matches(&asid))
    }

    /// Removes every section in an address space matching `asid`
    /// ([`Asid::ANY`] removes all). Returns how many windows were removed.
    pub fn remove_by_asid(&mut self, asid: Asid) -> usize {
        self.remove_where(|w| w.asid.matches(&asid))
    }

    /// Adds every section of `other` to this image, as if each were added
    /// again in the order it was added to `other`: they win over this image's
    /// sections where they overlap. Sections are shared, not copied, and split
    /// sections are copied as the exact windows `other` shows (libipt copies
    /// whole sections here, which shows bytes `other` does not).
    pub fn copy_from(&mut self, other: &Image) {
        let mut order: Vec<&Window> = other.windows.iter().collect();
        order.sort_by_key(|w| w.seq);
        for w in order {
            self.next_seq += 1;
            self.insert(Window {
                seq: self.next_seq,
                ..w.clone()
            });
        }
    }

    /// Sets the function that supplies memory no section covers, replacing
    /// the previous one; `None` removes it.
    pub fn set_callback(&mut self, callback: Option<Box<ReadCallback>>) {
        self.callback = callback;
    }

    /// Reads memory at `vaddr` in address space `asid` into `buf`.
    ///
    /// A read never spans two sections: it returns the bytes up to the end of
    /// the section that holds `vaddr`, and the caller reads on from there. An
    /// address no section covers goes to the callback; without one the read
    /// fails with [`Error::NoMapping`].
    pub fn read(&mut self, asid: &Asid, vaddr: u64, buf: &mut [u8]) -> Result<ReadOutcome> {
        if let Some(hit) = &self.last {
            if vaddr >= hit.begin && vaddr < hit.end && hit.asid.matches(asid) && !buf.is_empty() {
                let shown = (hit.offset + (hit.end - hit.begin)) as usize;
                let len = copy_out(
                    &hit.mapping.bytes()[..shown],
                    hit.offset + (vaddr - hit.begin),
                    buf,
                );
                // The fast path: a truncation under the mapping is seen;
                // the file's other changes on the slow path.
                hit.mapping.check_truncation()?;
                return Ok(ReadOutcome {
                    len,
                    isid: hit.isid,
                });
            }
        }
        self.read_slow(asid, vaddr, buf)
    }

    #[cold]
    fn read_slow(&mut self, asid: &Asid, vaddr: u64, buf: &mut [u8]) -> Result<ReadOutcome> {
        if buf.is_empty() {
            return Err(Error::InvalidArgument {
                what: "read buffer is empty",
            });
        }
        let Some(i) = self.find(asid, vaddr) else {
            // The callback is taken out while it runs, so that a callback
            // which replaces or removes itself does not free itself mid-call.
            let Some(mut callback) = self.callback.take() else {
                return Err(Error::NoMapping { asid: *asid, vaddr });
            };
            let result = callback(buf, asid, vaddr);
            if self.callback.is_none() {
                self.callback = Some(callback);
            }
            return result.map(|len| ReadOutcome {
                len: len.min(buf.len()),
                isid: None,
            });
        };
        let exclusive = self.exclusive(i);
        let w = &mut self.windows[i];
        let mapping = if let Some(mapping) = w.mapping.upgrade() {
            mapping
        } else {
            let mapping = w.section.map()?;
            w.mapping = Arc::downgrade(&mapping);
            mapping
        };
        let shown = (w.offset + (w.end - w.begin)) as usize;
        let len = copy_out(&mapping.bytes()[..shown], w.offset + (vaddr - w.begin), buf);
        mapping.check()?;
        let isid = w.isid;
        if exclusive {
            self.last = Some(LastHit {
                begin: w.begin,
                end: w.end,
                asid: w.asid,
                isid,
                offset: w.offset,
                mapping,
            });
        }
        Ok(ReadOutcome { len, isid })
    }

    /// The window that shows `vaddr` to `asid`: of several (possible only
    /// when `asid` has wildcards), the newest.
    fn find(&self, asid: &Asid, vaddr: u64) -> Option<usize> {
        let upto = self.windows.partition_point(|w| w.begin <= vaddr);
        let mut best: Option<usize> = None;
        for j in (0..upto).rev() {
            if self.reach[j] <= vaddr {
                break;
            }
            let w = &self.windows[j];
            if w.end > vaddr
                && w.asid.matches(asid)
                && best.is_none_or(|b| self.windows[b].seq < w.seq)
            {
                best = Some(j);
            }
        }
        best
    }

    /// Whether no other window overlaps window `i`: then every address in it
    /// resolves to it for any address space that matches its own.
    fn exclusive(&self, i: usize) -> bool {
        let w = &self.windows[i];
        let before = i == 0 || self.reach[i - 1] <= w.begin;
        let after = self.windows.get(i + 1).is_none_or(|n| n.begin >= w.end);
        before && after
    }
}
