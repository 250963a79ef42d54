//! Address-space identifiers.

use std::fmt;

/// Identifies an address space, as libipt's `struct pt_asid` does: a CR3 value
/// (the page-table root of a process) and a VMCS base (a virtual machine).
///
/// A field that is `None` is unknown and matches any value, so [`Asid::ANY`]
/// matches every address space, in both directions: a section added with
/// `Asid::ANY` is visible from every address space, and a read with
/// `Asid::ANY` sees sections of every address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Asid {
    /// The CR3 value, or `None` for any.
    pub cr3: Option<u64>,
    /// The VMCS base address, or `None` for any.
    pub vmcs: Option<u64>,
}

impl Asid {
    /// The wildcard: matches every address space.
    pub const ANY: Asid = Asid {
        cr3: None,
        vmcs: None,
    };

    /// An address space known by its CR3 value alone.
    #[must_use]
    pub const fn cr3(cr3: u64) -> Asid {
        Asid {
            cr3: Some(cr3),
            vmcs: None,
        }
    }

    /// Whether the two identifiers may name the same address space: each field
    /// is equal or unknown on either side (libipt's `pt_asid_match`).
    #[must_use]
    pub fn matches(&self, other: &Asid) -> bool {
        fn field(a: Option<u64>, b: Option<u64>) -> bool {
            match (a, b) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
        }
        field(self.cr3, other.cr3) && field(self.vmcs, other.vmcs)
    }
}

impl fmt::Display for Asid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.cr3, self.vmcs) {
            (None, None) => f.write_str("any"),
            (Some(cr3), None) => write!(f, "cr3={cr3:#x}"),
            (None, Some(vmcs)) => write!(f, "vmcs={vmcs:#x}"),
            (Some(cr3), Some(vmcs)) => write!(f, "cr3={cr3:#x},vmcs={vmcs:#x}"),
        }
    }
}
