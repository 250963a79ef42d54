//! libipt's error numbers and the thread-local message of the last failure.

use std::cell::RefCell;
use std::ffi::{c_char, CString};

use ichnos_image::{Error, ErrorKind};

/// libipt's `enum pt_error_code` values used by the image functions.
pub(crate) mod pte {
    pub const INTERNAL: i32 = 1;
    pub const INVALID: i32 = 2;
    pub const NOMEM: i32 = 9;
    pub const NOMAP: i32 = 13;
    pub const BAD_IMAGE: i32 = 17;
    pub const OVERFLOW: i32 = 25;
    pub const BAD_FILE: i32 = 26;
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error.
pub(crate) fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // During thread teardown the slot may be gone; the message is then lost,
    // but the error number still reaches the caller.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = text);
}

/// Records `error`, with its causes, as this thread's last error.
pub(crate) fn set_last_error_of(error: &dyn std::error::Error) {
    set_last_error(&ichnos_image::error_chain(error));
}

/// Records `what` as the last error and returns `-code`.
pub(crate) fn fail(code: i32, what: &str) -> i32 {
    set_last_error(what);
    -code
}

/// Records the error and returns its negative libipt code.
pub(crate) fn status(error: &Error) -> i32 {
    set_last_error_of(error);
    match error.kind() {
        ErrorKind::Invalid => -pte::INVALID,
        ErrorKind::NoMap => -pte::NOMAP,
        ErrorKind::BadImage => -pte::BAD_IMAGE,
        ErrorKind::BadFile => -pte::BAD_FILE,
        ErrorKind::NoMem => -pte::NOMEM,
        ErrorKind::Overflow => -pte::OVERFLOW,
        // A code a C callback returned: pass it through unchanged.
        ErrorKind::Other(code) => code,
        _ => -pte::INTERNAL,
    }
}

/// The message of the last failed call on this thread, or an empty string.
/// The pointer stays valid until the next failing call on the same thread.
#[no_mangle]
pub extern "C" fn ichnos_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|last| last.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// libipt's `pt_errstr`: a description of an error code (negated or not).
#[no_mangle]
pub extern "C" fn pt_errstr(code: i32) -> *const c_char {
    let text: &'static [u8] = match code.unsigned_abs() {
        0 => b"success\0",
        1 => b"internal error\0",
        2 => b"invalid argument\0",
        3 => b"decoder out of sync\0",
        4 => b"unknown opcode\0",
        5 => b"unknown payload\0",
        6 => b"unexpected packet context\0",
        7 => b"reached end of trace stream\0",
        8 => b"trace stream does not match query\0",
        9 => b"not enough memory\0",
        10 => b"bad configuration\0",
        11 => b"no ip\0",
        12 => b"ip has been suppressed\0",
        13 => b"no memory mapped at this address\0",
        14 => b"unknown instruction\0",
        15 => b"no timing information\0",
        16 => b"no core:bus ratio\0",
        17 => b"bad image\0",
        18 => b"locking error\0",
        19 => b"not supported\0",
        20 => b"compressed return without call\0",
        21 => b"bad compressed return\0",
        22 => b"bad status update\0",
        23 => b"expected tracing enabled event\0",
        24 => b"event ignored\0",
        25 => b"overflow\0",
        26 => b"bad file\0",
        27 => b"unknown cpu\0",
        _ => b"bad error code\0",
    };
    text.as_ptr().cast()
}
